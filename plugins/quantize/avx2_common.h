// Helpers shared by the AVX2 translation units (qmatmul_avx2.cpp,
// qmatmul_avx2_int8.cpp), both built with -mavx2 -mfma -mf16c. Internal
// linkage: each unit keeps its own copy, compiled for its own flags.
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace sy_quant {
namespace {

// Sum of 8 lanes.
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// sum_i a[i] * b[i]: a row's zero-point term, its per-group coefficients
// (-scale * zero point) against the activation's group sums.
inline float dot(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  float total = hsum(acc);
  for (; i < n; ++i) total += a[i] * b[i];
  return total;
}

}  // namespace
}  // namespace sy_quant
