#include <cuda_runtime.h>

#include "fused_cuda.h"

namespace sy_fused {
namespace {

// One block per row: a block-wide sum of squares, then the scaled row.
__global__ void rmsnorm_kernel(const float* __restrict__ x, const float* __restrict__ w, float eps, bool divide, int64_t cols,
                               float* __restrict__ y) {
  __shared__ float partial[32];
  const float* xr = x + blockIdx.x * cols;
  float* yr = y + blockIdx.x * cols;
  float ss = 0.f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) ss += xr[c] * xr[c];
  for (int o = 16; o > 0; o /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = ss;
  __syncthreads();
  if (threadIdx.x < 32) {
    float v = threadIdx.x < blockDim.x / 32 ? partial[threadIdx.x] : 0.f;
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x == 0) partial[0] = v;
  }
  __syncthreads();
  const float root = sqrtf(partial[0] / static_cast<float>(cols) + eps), inv = 1.f / root;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = (divide ? __fdiv_rn(xr[c], root) : xr[c] * inv) * w[c];
}

// One thread per output pair: (i, i + dim/2) for halves, (2j, 2j + 1) interleaved.
__global__ void rotary_kernel(const float* __restrict__ x, const float* __restrict__ c, const float* __restrict__ s, int64_t rows,
                              int64_t dim, bool interleaved, RotaryAxes axes, float* __restrict__ y) {
  const int64_t half = dim / 2, t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= rows * half) return;
  const int64_t row = t / half, j = t % half;
  const int64_t co = axes.cos_row(row);
  const float* xr = x + row * dim;
  float* yr = y + row * dim;
  if (interleaved) {
    const float e = xr[2 * j], o = xr[2 * j + 1], cv = c[co + j], sv = s[co + j];
    yr[2 * j] = __fsub_rn(__fmul_rn(e, cv), __fmul_rn(o, sv));
    yr[2 * j + 1] = __fadd_rn(__fmul_rn(e, sv), __fmul_rn(o, cv));
  } else {
    const float x1 = xr[j], x2 = xr[j + half], neg = -x2;
    yr[j] = __fadd_rn(__fmul_rn(x1, c[co + j]), __fmul_rn(neg, s[co + j]));
    yr[j + half] = __fadd_rn(__fmul_rn(x2, c[co + j + half]), __fmul_rn(x1, s[co + j + half]));
  }
}

__global__ void silu_mul_kernel(const float* __restrict__ g, const float* __restrict__ u, int64_t n, float* __restrict__ y) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    const float v = g[i];
    y[i] = v / (1.f + __expf(-v)) * u[i];
  }
}

const char* last_error() {
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

}  // namespace

const char* cuda_rmsnorm(const float* x, const float* weight, float eps, bool divide, int64_t rows, int64_t cols, float* y, void* stream) {
  if (rows == 0 || cols == 0) return nullptr;
  const int threads = cols >= 1024 ? 1024 : (cols >= 256 ? 256 : 64);
  rmsnorm_kernel<<<static_cast<unsigned>(rows), threads, 0, static_cast<cudaStream_t>(stream)>>>(x, weight, eps, divide, cols, y);
  return last_error();
}

const char* cuda_rotary(const float* x, const float* cos, const float* sin, int64_t rows, int64_t dim, bool interleaved,
                        const RotaryAxes& axes, float* y, void* stream) {
  const int64_t pairs = rows * (dim / 2);
  if (pairs == 0) return nullptr;
  rotary_kernel<<<static_cast<unsigned>((pairs + 255) / 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(x, cos, sin, rows, dim, interleaved, axes, y);
  return last_error();
}

const char* cuda_silu_mul(const float* gate, const float* up, int64_t n, float* y, void* stream) {
  if (n == 0) return nullptr;
  silu_mul_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(gate, up, n, y);
  return last_error();
}

}  // namespace sy_fused
