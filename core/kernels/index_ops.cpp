// Indexing ops today's exporters emit around masks and caches: GatherND,
// ScatterND, GatherElements, ScatterElements. Byte movers (any element type);
// the Scatter reductions need arithmetic and dispatch on the type.
#include <cstring>

#include "kernels/kernel_util.h"
#include "kernels/registry.h"

namespace sy {
namespace {

int64_t checked_index(int64_t i, int64_t dim, const char* what) {
  if (i < 0) i += dim;
  SY_CHECK(i >= 0 && i < dim, what << ": index " << (i < 0 ? i - dim : i) << " is out of range for a dimension of " << dim);
  return i;
}

// GatherND (opset 12+): indices [..., K] address the first K dims after
// batch_dims; each index tuple copies one slice of the remaining dims.
class GatherNDKernel : public Kernel {
 public:
  explicit GatherNDKernel(const Node& n) : batch_dims_(n.attr_int("batch_dims", 0)) {}
  void compute(KernelContext& ctx) override {
    const Tensor& data = ctx.input(0);
    const Tensor& idx = ctx.input(1);
    SY_CHECK(idx.dtype() == DType::I64, "GatherND: indices must be int64");
    const int r = data.rank(), q = idx.rank(), b = static_cast<int>(batch_dims_);
    SY_CHECK(q >= 1 && b >= 0 && b < std::min(r, q), "GatherND: batch_dims " << b << " does not fit ranks " << r << " and " << q);
    const int64_t K = idx.dim(q - 1);
    SY_CHECK(K >= 1 && K <= r - b, "GatherND: index tuples of length " << K << " do not fit data of rank " << r);
    for (int d = 0; d < b; ++d) SY_CHECK(data.dim(d) == idx.dim(d), "GatherND: batch dimension " << d << " differs");
    Shape out;
    for (int d = 0; d < q - 1; ++d) out.push_back(idx.dim(d));
    for (int d = b + static_cast<int>(K); d < r; ++d) out.push_back(data.dim(d));
    Tensor& y = ctx.allocate_output(0, data.dtype(), out);
    const size_t es = dtype_size(data.dtype());
    int64_t slice = 1, batches = 1, per_batch_data = 1;
    for (int d = b + static_cast<int>(K); d < r; ++d) slice *= data.dim(d);
    for (int d = 0; d < b; ++d) batches *= data.dim(d);
    for (int d = b; d < r; ++d) per_batch_data *= data.dim(d);
    const int64_t tuples = K == 0 ? 0 : idx.numel() / K;
    const int64_t per_batch_tuples = batches == 0 ? 0 : tuples / batches;
    auto strides = contiguous_strides(data.shape());
    const int64_t* ip = idx.data<int64_t>();
    auto* src = static_cast<const std::byte*>(data.raw());
    auto* dst = static_cast<std::byte*>(y.raw());
    for (int64_t t = 0; t < tuples; ++t) {
      int64_t batch = per_batch_tuples ? t / per_batch_tuples : 0;
      int64_t off = batch * per_batch_data;
      for (int64_t k = 0; k < K; ++k) {
        int d = b + static_cast<int>(k);
        off += checked_index(ip[t * K + k], data.dim(d), "GatherND") * strides[static_cast<size_t>(d)];
      }
      std::memcpy(dst + static_cast<size_t>(t * slice) * es, src + static_cast<size_t>(off) * es, static_cast<size_t>(slice) * es);
    }
  }

 private:
  int64_t batch_dims_;
};

enum class Reduction { None, Add, Mul, Max, Min };

Reduction parse_reduction(const Node& n) {
  std::string r = n.attr_string("reduction", "none");
  if (r == "none") return Reduction::None;
  if (r == "add") return Reduction::Add;
  if (r == "mul") return Reduction::Mul;
  if (r == "max") return Reduction::Max;
  if (r == "min") return Reduction::Min;
  SY_THROW("unknown reduction '" << r << "'");
}

// Writes `count` elements from src into dst with the reduction.
void scatter_into(std::byte* dst, const std::byte* src, int64_t count, DType t, Reduction red) {
  if (red == Reduction::None) {
    std::memcpy(dst, src, static_cast<size_t>(count) * dtype_size(t));
    return;
  }
  dispatch_type(t, "Scatter reduction", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      SY_THROW("Scatter reductions on bool are not defined");
    } else {
      T* d = reinterpret_cast<T*>(dst);
      const T* s = reinterpret_cast<const T*>(src);
      for (int64_t i = 0; i < count; ++i) {
        switch (red) {
          case Reduction::Add: d[i] = static_cast<T>(d[i] + s[i]); break;
          case Reduction::Mul: d[i] = static_cast<T>(d[i] * s[i]); break;
          case Reduction::Max: d[i] = d[i] > s[i] ? d[i] : s[i]; break;
          case Reduction::Min: d[i] = d[i] < s[i] ? d[i] : s[i]; break;
          case Reduction::None: break;
        }
      }
    }
  });
}

// ScatterND: a copy of data with slices replaced (or reduced) at index tuples.
class ScatterNDKernel : public Kernel {
 public:
  explicit ScatterNDKernel(const Node& n) : red_(parse_reduction(n)) {}
  void compute(KernelContext& ctx) override {
    const Tensor& data = ctx.input(0);
    const Tensor& idx = ctx.input(1);
    const Tensor& upd = ctx.input(2);
    SY_CHECK(idx.dtype() == DType::I64, "ScatterND: indices must be int64");
    SY_CHECK(upd.dtype() == data.dtype(), "ScatterND: updates and data have different types");
    const int r = data.rank(), q = idx.rank();
    const int64_t K = idx.dim(q - 1);
    SY_CHECK(K >= 1 && K <= r, "ScatterND: index tuples of length " << K << " do not fit data of rank " << r);
    Tensor& y = ctx.allocate_output(0, data.dtype(), data.shape());
    if (data.bytes()) std::memcpy(y.raw(), data.raw(), data.bytes());
    const size_t es = dtype_size(data.dtype());
    int64_t slice = 1;
    for (int d = static_cast<int>(K); d < r; ++d) slice *= data.dim(d);
    const int64_t tuples = idx.numel() / K;
    SY_CHECK(upd.numel() == tuples * slice, "ScatterND: updates have " << upd.numel() << " elements, expected " << tuples * slice);
    auto strides = contiguous_strides(data.shape());
    const int64_t* ip = idx.data<int64_t>();
    auto* dst = static_cast<std::byte*>(y.raw());
    auto* src = static_cast<const std::byte*>(upd.raw());
    for (int64_t t = 0; t < tuples; ++t) {
      int64_t off = 0;
      for (int64_t k = 0; k < K; ++k)
        off += checked_index(ip[t * K + k], data.dim(static_cast<int>(k)), "ScatterND") * strides[static_cast<size_t>(k)];
      scatter_into(dst + static_cast<size_t>(off) * es, src + static_cast<size_t>(t * slice) * es, slice, data.dtype(), red_);
    }
  }

 private:
  Reduction red_;
};

// Walks every position of `shape` (row-major), with the offset of the same
// position in a tensor of strides `st` except along `axis`, where `pick`
// gives the coordinate.
template <typename F>
void for_each_position(const Shape& shape, F&& f) {
  const int r = shape.rank();
  int64_t n = shape.numel();
  std::array<int64_t, Shape::kMaxRank> pos{};
  for (int64_t i = 0; i < n; ++i) {
    f(i, pos);
    for (int d = r - 1; d >= 0; --d) {
      if (++pos[static_cast<size_t>(d)] < shape[d]) break;
      pos[static_cast<size_t>(d)] = 0;
    }
  }
}

int64_t int_at(const Tensor& idx, int64_t i) {
  return idx.dtype() == DType::I64 ? idx.data<int64_t>()[i] : static_cast<int64_t>(idx.data<int32_t>()[i]);
}

// GatherElements: out[p] = data[p with p[axis] replaced by indices[p]].
class GatherElementsKernel : public Kernel {
 public:
  explicit GatherElementsKernel(const Node& n) : axis_(n.attr_int("axis", 0)) {}
  void compute(KernelContext& ctx) override {
    const Tensor& data = ctx.input(0);
    const Tensor& idx = ctx.input(1);
    SY_CHECK(idx.dtype() == DType::I64 || idx.dtype() == DType::I32, "GatherElements: indices must be int32 or int64");
    SY_CHECK(idx.rank() == data.rank(), "GatherElements: indices and data have different ranks");
    const int ax = normalize_axis(axis_, data.rank(), "GatherElements");
    Tensor& y = ctx.allocate_output(0, data.dtype(), idx.shape());
    const size_t es = dtype_size(data.dtype());
    auto st = contiguous_strides(data.shape());
    auto* src = static_cast<const std::byte*>(data.raw());
    auto* dst = static_cast<std::byte*>(y.raw());
    for_each_position(idx.shape(), [&](int64_t i, const std::array<int64_t, Shape::kMaxRank>& pos) {
      int64_t off = 0;
      for (int d = 0; d < data.rank(); ++d) {
        int64_t c = d == ax ? checked_index(int_at(idx, i), data.dim(d), "GatherElements") : pos[static_cast<size_t>(d)];
        off += c * st[static_cast<size_t>(d)];
      }
      std::memcpy(dst + static_cast<size_t>(i) * es, src + static_cast<size_t>(off) * es, es);
    });
  }

 private:
  int64_t axis_;
};

// ScatterElements: a copy of data with data[p with p[axis] = indices[p]] = updates[p].
class ScatterElementsKernel : public Kernel {
 public:
  explicit ScatterElementsKernel(const Node& n) : axis_(n.attr_int("axis", 0)), red_(parse_reduction(n)) {}
  void compute(KernelContext& ctx) override {
    const Tensor& data = ctx.input(0);
    const Tensor& idx = ctx.input(1);
    const Tensor& upd = ctx.input(2);
    SY_CHECK(idx.dtype() == DType::I64 || idx.dtype() == DType::I32, "ScatterElements: indices must be int32 or int64");
    SY_CHECK(idx.shape() == upd.shape() && idx.rank() == data.rank(), "ScatterElements: indices/updates shapes do not match");
    SY_CHECK(upd.dtype() == data.dtype(), "ScatterElements: updates and data have different types");
    const int ax = normalize_axis(axis_, data.rank(), "ScatterElements");
    Tensor& y = ctx.allocate_output(0, data.dtype(), data.shape());
    if (data.bytes()) std::memcpy(y.raw(), data.raw(), data.bytes());
    const size_t es = dtype_size(data.dtype());
    auto st = contiguous_strides(data.shape());
    auto* dst = static_cast<std::byte*>(y.raw());
    auto* src = static_cast<const std::byte*>(upd.raw());
    for_each_position(idx.shape(), [&](int64_t i, const std::array<int64_t, Shape::kMaxRank>& pos) {
      int64_t off = 0;
      for (int d = 0; d < data.rank(); ++d) {
        int64_t c = d == ax ? checked_index(int_at(idx, i), data.dim(d), "ScatterElements") : pos[static_cast<size_t>(d)];
        off += c * st[static_cast<size_t>(d)];
      }
      scatter_into(dst + static_cast<size_t>(off) * es, src + static_cast<size_t>(i) * es, 1, data.dtype(), red_);
    });
  }

 private:
  int64_t axis_;
  Reduction red_;
};

template <typename K>
void add(KernelRegistry& r, const std::string& op) {
  KernelDef d;
  d.op_type = op;
  d.create = [](const KernelCreateInfo& ci) -> std::unique_ptr<Kernel> { return std::make_unique<K>(ci.node); };
  r.add(std::move(d));
}

}  // namespace

void register_index_kernels(KernelRegistry& r) {
  add<GatherNDKernel>(r, "GatherND");
  add<ScatterNDKernel>(r, "ScatterND");
  add<GatherElementsKernel>(r, "GatherElements");
  add<ScatterElementsKernel>(r, "ScatterElements");
}

}  // namespace sy
