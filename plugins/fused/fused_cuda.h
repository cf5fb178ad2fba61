// CUDA launches of the fused ops (fused_cuda.cu). Error message or null.
#pragma once
#include <cstdint>

#include "rotary_axes.h"

namespace sy_fused {

const char* cuda_rmsnorm(const float* x, const float* weight, float eps, bool divide, int64_t rows, int64_t cols, float* y, void* stream);
const char* cuda_silu_mul(const float* gate, const float* up, int64_t n, float* y, void* stream);

const char* cuda_rotary(const float* x, const float* cos, const float* sin, int64_t rows, int64_t dim, bool interleaved,
                        const RotaryAxes& axes, float* y, void* stream);

}  // namespace sy_fused
