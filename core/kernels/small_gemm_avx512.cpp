// The small-GEMM body for AVX-512 (this file is compiled with -mavx512f -mfma).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace sy::small_gemm_avx512 {

struct Vec {
  using T = __m512;
  static constexpr int W = 16;
  static constexpr int G = 4;  // 16 broadcasts + 4 weight vectors + accumulators in 32 registers
  // The register tile of the few-row product (nn_tile): MR rows x NV vectors,
  // 8 x 3 accumulators + 3 weight vectors + a broadcast in 32 registers.
  static constexpr int MR = 8, NV = 3;
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, T v) { _mm512_storeu_ps(p, v); }
  static T set1(float a) { return _mm512_set1_ps(a); }
  static T zero() { return _mm512_setzero_ps(); }
  static T fmadd(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static float sum(T v) { return _mm512_reduce_add_ps(v); }
};

#include "kernels/small_gemm_simd.inc"

}  // namespace sy::small_gemm_avx512
