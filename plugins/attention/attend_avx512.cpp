// The attention tile for AVX-512 (compiled with -mavx512f -mfma).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include <switchyard/plugin.hpp>

#include "attend.h"

namespace sy_attention::attend_avx512 {

struct Vec {
  using T = __m512;
  static constexpr int64_t W = 16;
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  static T load_partial(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p); }
  static void store(float* p, T v) { _mm512_storeu_ps(p, v); }
  static T set1(float a) { return _mm512_set1_ps(a); }
  static T zero() { return _mm512_setzero_ps(); }
  static T add(T a, T b) { return _mm512_add_ps(a, b); }
  static T sub(T a, T b) { return _mm512_sub_ps(a, b); }
  static T mul(T a, T b) { return _mm512_mul_ps(a, b); }
  static T max(T a, T b) { return _mm512_max_ps(a, b); }
  static T fmadd(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static float sum(T v) {
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float hmax(T v) { return _mm512_reduce_max_ps(v); }
  // Lane i of the result is the sum of v[i]'s lanes: pairs interleaved and
  // added within 128-bit quarters (twice), then quarters across vectors.
  static T transpose_sum(const T* v) {
    T a[8], b[4], c[2];
    for (int i = 0; i < 8; ++i) a[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
    for (int i = 0; i < 4; ++i) {
      const __m512d x = _mm512_castps_pd(a[2 * i]), y = _mm512_castps_pd(a[2 * i + 1]);
      b[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
    }
    for (int i = 0; i < 2; ++i)
      c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                           _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_add_ps(_mm512_shuffle_f32x4(c[0], c[1], _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_f32x4(c[0], c[1], _MM_SHUFFLE(3, 1, 3, 1)));
  }
  static T pow2(T t) {
    const __m512i k = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_set1_epi32(0x4B400000 - 127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(k, 23));
  }
  // float16 -> float32, 16 at a time (AVX-512F's vcvtph2ps; exact).
  static void halves(const uint16_t* h, int64_t n, float* out) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + i))));
    for (; i < n; ++i) out[i] = sy::plugin::f16_to_f32(h[i]);
  }
  static T load_halves(const uint16_t* h) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h))); }
};

#include "attend_impl.inc"

}  // namespace sy_attention::attend_avx512
