// CUDA launches of the fused ops (fused_cuda.cu). Error message or null.
#pragma once
#include <cstdint>

namespace sy_fused {

const char* cuda_rmsnorm(const float* x, const float* weight, float eps, bool divide, int64_t rows, int64_t cols, float* y, void* stream);
const char* cuda_silu_mul(const float* gate, const float* up, int64_t n, float* y, void* stream);

// Where x row r finds its cos/sin row: sum over axes (innermost first) of
// (r / product of inner sizes % size) * cos_stride.
struct RotaryAxes {
  static constexpr int kMax = 8;
  int count = 0;
  int64_t size[kMax] = {}, cos_stride[kMax] = {};
};
const char* cuda_rotary(const float* x, const float* cos, const float* sin, int64_t rows, int64_t dim, bool interleaved,
                        const RotaryAxes& axes, float* y, void* stream);

}  // namespace sy_fused
