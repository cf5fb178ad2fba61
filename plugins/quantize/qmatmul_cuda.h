// Weight-only int8/int4 matmul on CUDA, dequantization fused into the
// product: the weight stays in its stored MatMulNBits layout (quant_format.h)
// in device memory and is never expanded. GEMV (up to 8 rows, decode): one
// warp per output channel streaming its codes as 32-bit words; GEMM (more
// rows, prefill): 64x64 output tiles with the weight tile dequantized into
// shared memory. fp32 activations, fp32 accumulation.
#pragma once
#include <cstdint>

namespace sy_quant {

struct DeviceQWeight {
  const uint8_t* codes = nullptr;        // [N, n_blocks, block_size * bits / 8]
  const float* scales = nullptr;         // [N * n_blocks]
  const uint8_t* zero_points = nullptr;  // [N, ceil(n_blocks * bits / 8)] or null (symmetric)
  const float* float_zero_points = nullptr;  // [N * n_blocks] (GGUF Q4_1's mins), instead of zero_points
  int64_t K = 0, N = 0, block_size = 0, n_blocks = 0;
  int bits = 8;
};

// y[M, N] = x[M, K] * W + bias (bias may be null), on `stream` (a cudaStream_t).
// Returns an error message, or null on success (no exception crosses here).
const char* cuda_qmatmul(const DeviceQWeight& w, const float* x, int64_t M, const float* bias, float* y, void* stream);

}  // namespace sy_quant
