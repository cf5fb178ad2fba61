// Small helpers shared by the built-in kernels: type dispatch, axis
// normalisation, numpy-style broadcasting.
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>

#include "kernels/kernel.h"

namespace sy {

template <typename T> struct TypeTag { using type = T; };

// Calls f(TypeTag<T>{}) for the C++ type of `t`; throws for other types.
template <typename F>
void dispatch_type(DType t, const char* what, F&& f) {
  switch (t) {
    case DType::F32: f(TypeTag<float>{}); return;
    case DType::F64: f(TypeTag<double>{}); return;
    case DType::I64: f(TypeTag<int64_t>{}); return;
    case DType::I32: f(TypeTag<int32_t>{}); return;
    case DType::I8: f(TypeTag<int8_t>{}); return;
    case DType::U8: f(TypeTag<uint8_t>{}); return;
    case DType::Bool: f(TypeTag<bool>{}); return;
    default: SY_THROW(what << ": unsupported element type " << dtype_name(t));
  }
}

// ONNX Slice semantics (negative and out-of-range starts/ends clamped, negative
// steps): per dimension of `in`, the first index, the step and the result size.
void resolve_slice(const Shape& in, const std::vector<int64_t>& starts, const std::vector<int64_t>& ends,
                   const std::vector<int64_t>& axes, const std::vector<int64_t>& steps, Shape& start, Shape& step, Shape& out);

// ONNX Split semantics: the part sizes along an axis of `dim` elements, from
// input 1 (opset >= 13), the `split` attribute (older opsets) or equal parts
// (num_outputs, else the node's output count); checked against both.
std::vector<int64_t> resolve_split(const KernelContext& ctx, int64_t dim, const std::optional<std::vector<int64_t>>& attr_split,
                                   int64_t num_outputs_attr);

inline int normalize_axis(int64_t axis, int rank, const char* what) {
  SY_CHECK(axis >= -rank && axis < rank, what << ": axis " << axis << " is out of range for rank " << rank);
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

// Numpy broadcasting of up to three operands, with dimensions coalesced so
// the innermost loop is as long as possible.
struct Broadcast {
  static constexpr int kMaxInputs = 3;
  Shape out;                                   // full output shape
  int rank = 0;                                // coalesced rank (>= 1)
  std::array<int64_t, Shape::kMaxRank> dims{};  // coalesced dims
  std::array<std::array<int64_t, Shape::kMaxRank>, kMaxInputs> strides{};
  int n = 0;

  Broadcast(std::initializer_list<const Shape*> shapes, const char* what);

  // Calls f(out_offset, len, in_offsets) for each innermost run; the inner
  // stride of input k is strides[k][rank-1] (0 or 1).
  template <typename F>
  void for_each_run(F&& f) const {
    int64_t inner = dims[static_cast<size_t>(rank - 1)];
    int64_t outer = 1;
    for (int i = 0; i < rank - 1; ++i) outer *= dims[static_cast<size_t>(i)];
    std::array<int64_t, Shape::kMaxRank> idx{};
    std::array<int64_t, kMaxInputs> off{};
    for (int64_t o = 0; o < outer; ++o) {
      f(o * inner, inner, off);
      for (int d = rank - 2; d >= 0; --d) {
        size_t du = static_cast<size_t>(d);
        ++idx[du];
        for (int k = 0; k < n; ++k) off[static_cast<size_t>(k)] += strides[static_cast<size_t>(k)][du];
        if (idx[du] < dims[du]) break;
        for (int k = 0; k < n; ++k) off[static_cast<size_t>(k)] -= strides[static_cast<size_t>(k)][du] * dims[du];
        idx[du] = 0;
      }
    }
  }
};

// Row-major strides of a shape.
inline std::array<int64_t, Shape::kMaxRank> contiguous_strides(const Shape& s) {
  std::array<int64_t, Shape::kMaxRank> st{};
  int64_t acc = 1;
  for (int i = s.rank() - 1; i >= 0; --i) {
    st[static_cast<size_t>(i)] = acc;
    acc *= s[i];
  }
  return st;
}

// Reads the int64 values of an optional shape-like input, or nullopt.
inline std::optional<std::vector<int64_t>> optional_ints(const KernelContext& ctx, int i) {
  if (!ctx.has_input(i)) return std::nullopt;
  return ctx.input(i).to_int64_vector();
}

// Elementwise kernels parallelise only above this many elements: below it
// the hand-off to the pool costs more than the work.
constexpr int64_t kParallelElementThreshold = 1 << 16;

}  // namespace sy
