// Pointwise and layout CUDA kernels of the core, float32: broadcast binary
// ops, unary ops, strided copies (Transpose, Slice, Concat), last-axis
// Softmax and ReduceMean, and row Gather. Shapes and strides are computed on
// the host (kernels/kernel_util.h's Broadcast coalesces them) and passed by
// value; every launch is on the session's stream.
#pragma once
#include <cstdint>
#include <cuda_runtime_api.h>

namespace sy::cuda {

constexpr int kMaxRank = 8;

struct Strided {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t a[kMaxRank] = {};  // element strides of the first source (0: broadcast)
  int64_t b[kMaxRank] = {};  // of the second source, or of the destination for copies
};

enum class BinaryOp { Add, Sub, Mul, Div, Pow };
enum class UnaryOp { Neg, Sqrt, Sigmoid, Exp, Cos, Sin, Reciprocal, Tanh };

// y (contiguous, numel of s.dims) = op(x[a-strided], z[b-strided])
void binary(BinaryOp op, const float* x, const float* z, float* y, const Strided& s, cudaStream_t stream);
void unary(UnaryOp op, const float* x, float* y, int64_t n, cudaStream_t stream);
// dst[base_dst + Σ i_d * b_d] = src[base_src + Σ i_d * a_d] over s.dims (any element size in bytes: 4 or 8).
void strided_copy(const void* src, int64_t base_src, void* dst, int64_t base_dst, const Strided& s, int elem_bytes,
                  cudaStream_t stream);
void softmax_rows(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream);
void mean_rows(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream);
// y[i, :] = table[idx[i], :] for i < n (idx already checked and normalized).
void gather_rows(const float* table, const int64_t* idx, float* y, int64_t n, int64_t row, cudaStream_t stream);

}  // namespace sy::cuda
