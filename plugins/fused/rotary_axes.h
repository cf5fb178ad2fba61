// Where row r of a Rotary's x finds its cos/sin row, shared by the CPU
// kernel and the CUDA launch (plain data: it is passed to the device by
// value): the sum over x's outer dims, innermost first, of
// (r / product of the inner sizes % size) * cos_stride.
#pragma once
#include <cstdint>

namespace sy_fused {

struct RotaryAxes {
  static constexpr int kMax = 8;  // SY_MAX_RANK
  int count = 0;
  int64_t size[kMax] = {}, cos_stride[kMax] = {};  // cos_stride in elements (0: broadcast)
#ifdef __CUDACC__
  __host__ __device__
#endif
  int64_t cos_row(int64_t row) const {
    int64_t off = 0;
    for (int a = 0; a < count; ++a) {
      off += (row % size[a]) * cos_stride[a];
      row /= size[a];
    }
    return off;
  }
};

}  // namespace sy_fused
