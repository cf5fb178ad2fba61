#include <cuda_runtime.h>

#include "qmatmul_cuda.h"

namespace sy_quant {
namespace {

constexpr int kWarp = 32;
constexpr int kGemvRowsPerBlock = 4;  // warps per block, one output channel each
constexpr int kMaxGemvRows = 8;

__device__ __forceinline__ float zero_point(const DeviceQWeight& w, int64_t n, int64_t blk) {
  if (w.float_zero_points) return w.float_zero_points[n * w.n_blocks + blk];
  if (!w.zero_points) return static_cast<float>(1 << (w.bits - 1));
  const int64_t row_bytes = (w.n_blocks * w.bits + 7) / 8;
  const uint8_t* zp = w.zero_points + n * row_bytes;
  if (w.bits == 8) return static_cast<float>(zp[blk]);
  return static_cast<float>((zp[blk >> 1] >> ((blk & 1) * 4)) & 0xF);
}

// Adds the contribution of byte `j` of row n (value b) to acc[0..M).
template <int M>
__device__ __forceinline__ void accumulate_byte(const DeviceQWeight& w, int64_t n, int64_t j, uint32_t b, const float* __restrict__ x,
                                                float (&acc)[M], int rows) {
  const int64_t blob = w.block_size * w.bits / 8;
  const int64_t blk = j / blob, off = j - blk * blob;
  const float scale = w.scales[n * w.n_blocks + blk];
  const float zp = zero_point(w, n, blk);
  if (w.bits == 8) {
    const int64_t k = blk * w.block_size + off;
    if (k >= w.K) return;
    const float v = (static_cast<float>(b) - zp) * scale;
#pragma unroll
    for (int m = 0; m < M; ++m)
      if (m < rows) acc[m] += v * x[m * w.K + k];
  } else {
    const int64_t k = blk * w.block_size + 2 * off;
    const float lo = (static_cast<float>(b & 0xF) - zp) * scale, hi = (static_cast<float>(b >> 4) - zp) * scale;
#pragma unroll
    for (int m = 0; m < M; ++m) {
      if (m >= rows) continue;
      if (k < w.K) acc[m] += lo * x[m * w.K + k];
      if (k + 1 < w.K) acc[m] += hi * x[m * w.K + k + 1];
    }
  }
}

// One warp per output channel; lanes stride over the row's codes, 4 bytes at a
// time when the row is a whole number of words (every scheme the pass emits).
template <int M>
__global__ void qgemv_kernel(DeviceQWeight w, const float* __restrict__ x, int rows, const float* __restrict__ bias,
                             float* __restrict__ y) {
  const int lane = threadIdx.x % kWarp;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kGemvRowsPerBlock + threadIdx.x / kWarp;
  if (n >= w.N) return;
  const int64_t row_bytes = w.n_blocks * (w.block_size * w.bits / 8);
  const uint8_t* row = w.codes + n * row_bytes;
  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.f;
  if (row_bytes % 4 == 0) {
    const uint32_t* words = reinterpret_cast<const uint32_t*>(row);
    for (int64_t i = lane; i < row_bytes / 4; i += kWarp) {
      const uint32_t word = words[i];
#pragma unroll
      for (int byte = 0; byte < 4; ++byte) accumulate_byte<M>(w, n, i * 4 + byte, (word >> (8 * byte)) & 0xFF, x, acc, rows);
    }
  } else {
    for (int64_t j = lane; j < row_bytes; j += kWarp) accumulate_byte<M>(w, n, j, row[j], x, acc, rows);
  }
#pragma unroll
  for (int m = 0; m < M; ++m) {
    float v = acc[m];
    for (int off = kWarp / 2; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
    if (lane == 0 && m < rows) y[m * w.N + n] = v + (bias ? bias[n] : 0.f);
  }
}

__device__ __forceinline__ float dequant(const DeviceQWeight& w, int64_t n, int64_t k) {
  const int64_t blob = w.block_size * w.bits / 8;
  const int64_t blk = k / w.block_size, off = k - blk * w.block_size;
  const uint8_t* row = w.codes + n * w.n_blocks * blob + blk * blob;
  int code = w.bits == 8 ? row[off] : (row[off >> 1] >> ((off & 1) * 4)) & 0xF;
  return (static_cast<float>(code) - zero_point(w, n, blk)) * w.scales[n * w.n_blocks + blk];
}

constexpr int kTile = 64, kTileK = 32, kGemmThreads = 256;

// 64x64 outputs per block, 4x4 per thread; the weight tile is dequantized
// straight into shared memory.
__global__ void qgemm_kernel(DeviceQWeight w, const float* __restrict__ x, int64_t M, const float* __restrict__ bias,
                             float* __restrict__ y) {
  __shared__ float xs[kTileK][kTile + 1];
  __shared__ float ws[kTileK][kTile + 1];
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTile, n0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < w.K; k0 += kTileK) {
    for (int i = threadIdx.x; i < kTile * kTileK; i += kGemmThreads) {
      const int r = i / kTileK, c = i % kTileK;
      const int64_t m = m0 + r, n = n0 + r, k = k0 + c;
      xs[c][r] = (m < M && k < w.K) ? x[m * w.K + k] : 0.f;
      ws[c][r] = (n < w.N && k < w.K) ? dequant(w, n, k) : 0.f;
    }
    __syncthreads();
#pragma unroll 8
    for (int c = 0; c < kTileK; ++c) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        a[i] = xs[c][ty * 4 + i];
        b[i] = ws[c][tx * 4 + i];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t m = m0 + ty * 4 + i, n = n0 + tx * 4 + j;
      if (m < M && n < w.N) y[m * w.N + n] = acc[i][j] + (bias ? bias[n] : 0.f);
    }
}

template <int M>
void launch_gemv(const DeviceQWeight& w, const float* x, int rows, const float* bias, float* y, cudaStream_t s) {
  const unsigned blocks = static_cast<unsigned>((w.N + kGemvRowsPerBlock - 1) / kGemvRowsPerBlock);
  qgemv_kernel<M><<<blocks, kGemvRowsPerBlock * kWarp, 0, s>>>(w, x, rows, bias, y);
}

}  // namespace

const char* cuda_qmatmul(const DeviceQWeight& w, const float* x, int64_t M, const float* bias, float* y, void* stream) {
  if (M == 0 || w.N == 0) return nullptr;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (M <= 2) launch_gemv<2>(w, x, static_cast<int>(M), bias, y, s);
  else if (M <= kMaxGemvRows) launch_gemv<kMaxGemvRows>(w, x, static_cast<int>(M), bias, y, s);
  else {
    dim3 grid(static_cast<unsigned>((w.N + kTile - 1) / kTile), static_cast<unsigned>((M + kTile - 1) / kTile));
    qgemm_kernel<<<grid, kGemmThreads, 0, s>>>(w, x, M, bias, y);
  }
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

}  // namespace sy_quant
