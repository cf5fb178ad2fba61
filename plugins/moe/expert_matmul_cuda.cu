// ExpertMatMul on CUDA: every entry reads its expert's matrix in place (no
// gathered copy). The routing indices stay on the device; each block reads
// its entry's index. Decode entries are GEMVs, bound by the weight reads:
// columns = 1 (rows of W contiguous in K) gives one warp per output, its
// lanes striding K; columns = 0 (W [K, N]) one thread per output column,
// consecutive threads reading consecutive columns of each row.
#include <cuda_runtime.h>

#include <cmath>

#include "expert_matmul_cuda.h"

namespace sy_moe {
namespace {

__device__ int64_t expert_of(const void* experts, int index_bytes, int64_t m, int64_t E) {
  int64_t e = index_bytes == 8 ? static_cast<const int64_t*>(experts)[m] : static_cast<const int32_t*>(experts)[m];
  if (e < 0) e += E;
  return e;
}

// grid (ceil(N / 8), M * P), 256 threads: warp w of the block computes output n.
__global__ void expert_rows_kernel(const float* __restrict__ x, const void* experts, int index_bytes, const float* __restrict__ w, int64_t E,
                                   int64_t P, int64_t K, int64_t N, float* __restrict__ y) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * 8 + threadIdx.x / 32, mp = blockIdx.y, m = mp / P, p = mp % P;
  if (n >= N) return;
  const int64_t e = expert_of(experts, index_bytes, m, E);
  const int lane = threadIdx.x % 32;
  float* out = y + m * N * P + n * P + p;
  if (e < 0 || e >= E) {
    if (lane == 0) *out = NAN;
    return;
  }
  const float* wr = w + (e * N + n) * K;
  const float* xm = x + m * K * P + p;  // x[m] is [K, P]
  float acc = 0.f;
  for (int64_t k = lane; k < K; k += 32) acc += wr[k] * xm[k * P];
  for (int o = 16; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) *out = acc;
}

// grid (ceil(N / 256), M * P), 256 threads: thread t computes output column n.
__global__ void expert_columns_kernel(const float* __restrict__ x, const void* experts, int index_bytes, const float* __restrict__ w,
                                      int64_t E, int64_t P, int64_t K, int64_t N, float* __restrict__ y) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x, mp = blockIdx.y, m = mp / P;
  if (n >= N) return;
  const int64_t e = expert_of(experts, index_bytes, m, E);
  float* out = y + mp * N + n;  // y[m] is [P, N]
  if (e < 0 || e >= E) {
    *out = NAN;
    return;
  }
  const float* we = w + e * K * N + n;
  const float* xr = x + mp * K;
  float acc = 0.f;
  for (int64_t k = 0; k < K; ++k) acc += xr[k] * we[k * N];
  *out = acc;
}

}  // namespace

const char* cuda_expert_matmul(const float* x, const void* experts, int index_bytes, const float* w, int64_t E, int64_t M, int64_t P,
                               int64_t K, int64_t N, bool columns, float* y, void* stream) {
  if (M == 0 || P == 0 || N == 0) return nullptr;
  if (M * P > 65535) return "more than 65535 expert rows in one step";
  auto s = static_cast<cudaStream_t>(stream);
  if (columns) {
    dim3 grid(static_cast<unsigned>((N + 7) / 8), static_cast<unsigned>(M * P));
    expert_rows_kernel<<<grid, 256, 0, s>>>(x, experts, index_bytes, w, E, P, K, N, y);
  } else {
    dim3 grid(static_cast<unsigned>((N + 255) / 256), static_cast<unsigned>(M * P));
    expert_columns_kernel<<<grid, 256, 0, s>>>(x, experts, index_bytes, w, E, P, K, N, y);
  }
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

}  // namespace sy_moe
