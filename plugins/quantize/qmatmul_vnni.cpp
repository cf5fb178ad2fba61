// AVX-512 VNNI GEMV: int8 activations (per 32-element block) times the u8
// codes with vpdpbusd. Built with -mavx512f -mavx512bw -mavx512vnni.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "qmatmul.h"

namespace sy_quant {

void quantize_activation(const PackedMatrix& w, const float* x, QuantizedActivation& a) {
  const int64_t blocks = w.Kp / 32;
  a.q.resize(static_cast<size_t>(w.Kp));
  a.scale16.resize(static_cast<size_t>(blocks / 2 * 16));
  a.group_sum.assign(static_cast<size_t>(w.n_groups), 0.f);
  const int64_t blocks_per_group = w.n_groups == 1 ? blocks : w.group / 32;
  for (int64_t b = 0; b < blocks; ++b) {
    const float* xb = x + b * 32;
    __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const float scale = amax / 127.f, inv = amax > 0 ? 127.f / amax : 0.f;
    // Round to nearest even, like lrintf: the rounding the error bound assumes.
    __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, _mm512_set1_ps(inv)));
    __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, _mm512_set1_ps(inv)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(a.q.data() + b * 32), _mm512_cvtsepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(a.q.data() + b * 32 + 16), _mm512_cvtsepi32_epi8(q1));
    const int sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    std::fill_n(a.scale16.data() + (b / 2) * 16 + (b % 2) * 8, 8, scale);
    a.group_sum[static_cast<size_t>(std::min(b / blocks_per_group, w.n_groups - 1))] += scale * static_cast<float>(sum);
  }
}

void gemv_avx512vnni(const PackedMatrix& w, const QuantizedActivation& a, float* y, int64_t n0, int64_t n1) {
  const __m256i low = _mm256_set1_epi8(0x0F);
  const int64_t chunks = w.Kp / 64;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w.codes.data() + n * w.row_bytes();
    const float* s = w.scales.data() + n * w.n_groups;
    __m512 acc = _mm512_setzero_ps();
    int64_t g = 0;  // group of the chunk's first half
    for (int64_t c = 0; c < chunks; ++c) {
      __m512i codes;
      if (w.bits == 8) {
        codes = _mm512_loadu_si512(row + c * 64);
      } else {
        __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + c * 32));
        __m256i lo = _mm256_and_si256(v, low), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
        codes = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
      }
      __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), codes, _mm512_loadu_si512(a.q.data() + c * 64));
      // Scale of each lane: activation block scale x weight group scale.
      // Groups are multiples of 32 (or one per row): each half lies in one group.
      while (g + 1 < w.n_groups && c * 64 >= (g + 1) * w.group) ++g;
      const int64_t g1 = g + 1 < w.n_groups && c * 64 + 32 >= (g + 1) * w.group ? g + 1 : g;
      const __m512 ws = g1 == g ? _mm512_set1_ps(s[g]) : _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(s[g]), _mm512_set1_ps(s[g1]));
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(ws, _mm512_loadu_ps(a.scale16.data() + c * 16)), acc);
    }
    float total = _mm512_reduce_add_ps(acc);
    const float* z = w.negzp.data() + n * w.n_groups;
    for (int64_t j = 0; j < w.n_groups; ++j) total += z[j] * a.group_sum[static_cast<size_t>(j)];
    y[n] = total;
  }
}

}  // namespace sy_quant
