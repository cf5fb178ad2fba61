#include <cfloat>

#include "kernels/cuda/pointwise.h"

namespace sy::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 * 32 ? b : 65535 * 32);
}

// The offsets of flat output index i in the two strided operands.
__device__ __forceinline__ void offsets(const Strided& s, int64_t i, int64_t& oa, int64_t& ob) {
  oa = 0;
  ob = 0;
  for (int d = s.rank - 1; d >= 0; --d) {
    const int64_t q = i / s.dims[d], r = i - q * s.dims[d];
    oa += r * s.a[d];
    ob += r * s.b[d];
    i = q;
  }
}

template <BinaryOp Op>
__device__ __forceinline__ float apply(float x, float z) {
  if constexpr (Op == BinaryOp::Add) return x + z;
  else if constexpr (Op == BinaryOp::Sub) return x - z;
  else if constexpr (Op == BinaryOp::Mul) return x * z;
  else if constexpr (Op == BinaryOp::Div) return x / z;
  else return z == 2.f ? x * x : powf(x, z);
}

template <BinaryOp Op>
__global__ void binary_kernel(const float* __restrict__ x, const float* __restrict__ z, float* __restrict__ y, Strided s, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t oa, ob;
    offsets(s, i, oa, ob);
    y[i] = apply<Op>(x[oa], z[ob]);
  }
}

template <UnaryOp Op>
__device__ __forceinline__ float apply1(float x) {
  if constexpr (Op == UnaryOp::Neg) return -x;
  else if constexpr (Op == UnaryOp::Sqrt) return sqrtf(x);
  else if constexpr (Op == UnaryOp::Sigmoid) return 1.f / (1.f + expf(-x));
  else if constexpr (Op == UnaryOp::Exp) return expf(x);
  else if constexpr (Op == UnaryOp::Cos) return cosf(x);
  else if constexpr (Op == UnaryOp::Sin) return sinf(x);
  else if constexpr (Op == UnaryOp::Reciprocal) return 1.f / x;
  else return tanhf(x);
}

template <UnaryOp Op>
__global__ void unary_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = apply1<Op>(x[i]);
}

template <typename T>
__global__ void strided_copy_kernel(const T* __restrict__ src, T* __restrict__ dst, Strided s, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t oa, ob;
    offsets(s, i, oa, ob);
    dst[ob] = src[oa];
  }
}

// One block per row; block-wide max and sum through shared memory.
template <bool Softmax>
__global__ void rows_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t cols) {
  __shared__ float red[kThreads / 32];
  const float* xr = x + blockIdx.x * cols;
  auto block_reduce = [&](float v, bool is_max) {
    for (int o = 16; o > 0; o /= 2) {
      const float w = __shfl_xor_sync(0xffffffffu, v, o);
      v = is_max ? fmaxf(v, w) : v + w;
    }
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
    __syncthreads();
    float r = is_max ? -FLT_MAX : 0.f;
    for (int w = 0; w < kThreads / 32; ++w) r = is_max ? fmaxf(r, red[w]) : r + red[w];
    __syncthreads();
    return r;
  };
  if constexpr (Softmax) {
    float m = -FLT_MAX;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, xr[c]);
    m = block_reduce(m, true);
    float s = 0.f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += expf(xr[c] - m);
    s = block_reduce(s, false);
    float* yr = y + blockIdx.x * cols;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = expf(xr[c] - m) / s;
  } else {
    float s = 0.f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += xr[c];
    s = block_reduce(s, false);
    if (threadIdx.x == 0) y[blockIdx.x] = s / static_cast<float>(cols);
  }
}

__global__ void gather_rows_kernel(const float* __restrict__ table, const int64_t* __restrict__ idx, float* __restrict__ y, int64_t row) {
  const float* src = table + idx[blockIdx.x] * row;
  float* dst = y + static_cast<int64_t>(blockIdx.x) * row;
  for (int64_t c = threadIdx.x; c < row; c += blockDim.x) dst[c] = src[c];
}

int64_t numel(const Strided& s) {
  int64_t n = 1;
  for (int d = 0; d < s.rank; ++d) n *= s.dims[d];
  return n;
}

}  // namespace

void binary(BinaryOp op, const float* x, const float* z, float* y, const Strided& s, cudaStream_t stream) {
  const int64_t n = numel(s);
  if (n == 0) return;
  switch (op) {
    case BinaryOp::Add: binary_kernel<BinaryOp::Add><<<blocks_for(n), kThreads, 0, stream>>>(x, z, y, s, n); break;
    case BinaryOp::Sub: binary_kernel<BinaryOp::Sub><<<blocks_for(n), kThreads, 0, stream>>>(x, z, y, s, n); break;
    case BinaryOp::Mul: binary_kernel<BinaryOp::Mul><<<blocks_for(n), kThreads, 0, stream>>>(x, z, y, s, n); break;
    case BinaryOp::Div: binary_kernel<BinaryOp::Div><<<blocks_for(n), kThreads, 0, stream>>>(x, z, y, s, n); break;
    case BinaryOp::Pow: binary_kernel<BinaryOp::Pow><<<blocks_for(n), kThreads, 0, stream>>>(x, z, y, s, n); break;
  }
}

void unary(UnaryOp op, const float* x, float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  switch (op) {
    case UnaryOp::Neg: unary_kernel<UnaryOp::Neg><<<blocks_for(n), kThreads, 0, stream>>>(x, y, n); break;
    case UnaryOp::Sqrt: unary_kernel<UnaryOp::Sqrt><<<blocks_for(n), kThreads, 0, stream>>>(x, y, n); break;
    case UnaryOp::Sigmoid: unary_kernel<UnaryOp::Sigmoid><<<blocks_for(n), kThreads, 0, stream>>>(x, y, n); break;
    case UnaryOp::Exp: unary_kernel<UnaryOp::Exp><<<blocks_for(n), kThreads, 0, stream>>>(x, y, n); break;
    case UnaryOp::Cos: unary_kernel<UnaryOp::Cos><<<blocks_for(n), kThreads, 0, stream>>>(x, y, n); break;
    case UnaryOp::Sin: unary_kernel<UnaryOp::Sin><<<blocks_for(n), kThreads, 0, stream>>>(x, y, n); break;
    case UnaryOp::Reciprocal: unary_kernel<UnaryOp::Reciprocal><<<blocks_for(n), kThreads, 0, stream>>>(x, y, n); break;
    case UnaryOp::Tanh: unary_kernel<UnaryOp::Tanh><<<blocks_for(n), kThreads, 0, stream>>>(x, y, n); break;
  }
}

void strided_copy(const void* src, int64_t base_src, void* dst, int64_t base_dst, const Strided& s, int elem_bytes,
                  cudaStream_t stream) {
  const int64_t n = numel(s);
  if (n == 0) return;
  if (elem_bytes == 8)
    strided_copy_kernel<int64_t><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const int64_t*>(src) + base_src,
                                                                         static_cast<int64_t*>(dst) + base_dst, s, n);
  else
    strided_copy_kernel<float><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const float*>(src) + base_src,
                                                                       static_cast<float*>(dst) + base_dst, s, n);
}

void softmax_rows(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  rows_kernel<true><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, y, cols);
}

void mean_rows(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  rows_kernel<false><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, y, cols);
}

void gather_rows(const float* table, const int64_t* idx, float* y, int64_t n, int64_t row, cudaStream_t stream) {
  if (n == 0 || row == 0) return;
  gather_rows_kernel<<<static_cast<unsigned>(n), 128, 0, stream>>>(table, idx, y, row);
}

}  // namespace sy::cuda
