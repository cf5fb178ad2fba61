#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/cuda_ops.h"

namespace sy::cuda {
namespace {

template <typename T>
__device__ T from_float(float v);
template <>
__device__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __half from_float<__half>(float v) { return __float2half_rn(v); }

// Four elements per thread through float4 loads when the buffers allow it.
template <typename T>
__global__ void convert_kernel(const float* __restrict__ src, T* __restrict__ dst, int64_t n) {
  int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
  if (i + 3 < n) {
    float4 v = *reinterpret_cast<const float4*>(src + i);
    dst[i] = from_float<T>(v.x);
    dst[i + 1] = from_float<T>(v.y);
    dst[i + 2] = from_float<T>(v.z);
    dst[i + 3] = from_float<T>(v.w);
  } else {
    for (; i < n; ++i) dst[i] = from_float<T>(src[i]);
  }
}

template <typename T>
__global__ void convert_scalar_kernel(const float* __restrict__ src, T* __restrict__ dst, int64_t n) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = from_float<T>(src[i]);
}

__global__ void fill_rows_kernel(float* __restrict__ y, const float* __restrict__ bias, int64_t rows, int64_t cols,
                                 int64_t bias_rows) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  int64_t r = i / cols, c = i % cols;
  y[i] = bias[(r % bias_rows) * cols + c];
}

template <typename T>
void launch_convert(const float* src, T* dst, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int kThreads = 256;
  bool aligned = (reinterpret_cast<uintptr_t>(src) % 16) == 0;
  if (aligned) {
    int64_t threads = (n + 3) / 4;
    convert_kernel<T><<<static_cast<unsigned>((threads + kThreads - 1) / kThreads), kThreads, 0, stream>>>(src, dst, n);
  } else {
    convert_scalar_kernel<T><<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(src, dst, n);
  }
}

}  // namespace

void convert_f32_to_16(const float* src, void* dst, int64_t n, Half16 type, cudaStream_t stream) {
  if (type == Half16::BF16) launch_convert(src, static_cast<__nv_bfloat16*>(dst), n, stream);
  else launch_convert(src, static_cast<__half*>(dst), n, stream);
}

void fill_rows(float* y, const float* bias, int64_t rows, int64_t cols, int64_t bias_rows, cudaStream_t stream) {
  int64_t n = rows * cols;
  if (n == 0) return;
  fill_rows_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(y, bias, rows, cols, bias_rows);
}

}  // namespace sy::cuda
