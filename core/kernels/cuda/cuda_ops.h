// Small CUDA kernels the core's cuBLAS path needs around the GEMM: activation
// conversion to the GEMM's 16-bit type and Gemm's bias. Declared for plain
// C++ callers; defined in convert.cu.
#pragma once
#include <cstdint>
#include <cuda_runtime_api.h>

namespace sy::cuda {

enum class Half16 { BF16, F16 };

// dst[i] = (16-bit) src[i], round to nearest even.
void convert_f32_to_16(const float* src, void* dst, int64_t n, Half16 type, cudaStream_t stream);
// y[r, c] = bias[(r % bias_rows), c] for an [rows, cols] output (bias rows 1 or rows).
void fill_rows(float* y, const float* bias, int64_t rows, int64_t cols, int64_t bias_rows, cudaStream_t stream);

}  // namespace sy::cuda
