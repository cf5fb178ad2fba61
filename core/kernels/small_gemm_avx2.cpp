// The small-GEMM body for AVX2 + FMA (this file is compiled with -mavx2 -mfma).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace sy::small_gemm_avx2 {

struct Vec {
  using T = __m256;
  static constexpr int W = 8;
  static constexpr int G = 2;  // 8 broadcasts + 4 weight vectors + accumulators in 16 registers
  // The register tile of the few-row product (nn_tile): MR rows x NV vectors,
  // 6 x 2 accumulators + 2 weight vectors + a broadcast in 16 registers.
  static constexpr int MR = 6, NV = 2;
  static T load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, T v) { _mm256_storeu_ps(p, v); }
  static T set1(float a) { return _mm256_set1_ps(a); }
  static T zero() { return _mm256_setzero_ps(); }
  static T fmadd(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static float sum(T v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};

#include "kernels/small_gemm_simd.inc"

}  // namespace sy::small_gemm_avx2
