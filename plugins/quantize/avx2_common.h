// Helpers shared by the AVX2 translation units (qmatmul_avx2.cpp,
// qmatmul_avx2_int8.cpp), both built with -mavx2 -mfma -mf16c. Internal
// linkage: each unit keeps its own copy, compiled for its own flags.
#pragma once
#include <immintrin.h>

namespace sy_quant {
namespace {

// Sum of 8 lanes.
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

}  // namespace
}  // namespace sy_quant
