// AVX-512 VNNI GEMV: int8 activations (per 32-element block) times the u8
// codes with vpdpbusd. Built with -mavx512f -mavx512bw -mavx512vnni.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "avx512_common.h"

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

namespace {

enum class Groups { PerRow, Of32, Pow2 };


// The weight-scale vector of 64-element chunk c: lanes 0-7 belong to the
// chunk's first 32-block, lanes 8-15 to its second.
template <Groups G>
inline __m512 weight_scales(const float* s, int64_t c, int shift) {
  if constexpr (G == Groups::PerRow) {
    return _mm512_set1_ps(1.f);  // applied once per row
  } else if constexpr (G == Groups::Of32) {
    const __m512i lanes = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_permutexvar_ps(lanes, _mm512_castps128_ps512(_mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + 2 * c)))));
  } else {
    return _mm512_set1_ps(s[c >> shift]);
  }
}

// Two 64-element chunks (128 codes) per iteration, two accumulators.
template <int Bits, Groups G>
void rows(const PackedMatrix& w, const QuantizedActivation& a, float* y, int64_t n0, int64_t n1) {
  const int64_t chunks = w.Kp / 64;
  int shift = 0;
  if constexpr (G == Groups::Pow2)
    while ((int64_t{64} << shift) < w.group) ++shift;
  const __m512i low = _mm512_set1_epi8(0x0F);
  const int8_t* xq = a.q.data();
  const float* xs = a.scale16.data();
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w.codes.data() + n * w.row_bytes();
    const float* s = w.scales.data() + n * w.group_stride;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    for (int64_t c = 0; c < chunks; c += 2) {
      __m512i w0, w1;
      if constexpr (Bits == 8) {
        w0 = _mm512_loadu_si512(row + c * 64);
        w1 = _mm512_loadu_si512(row + c * 64 + 64);
      } else {
        const __m512i v = _mm512_loadu_si512(row + c * 32);
        w0 = _mm512_and_si512(v, low);
        w1 = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
      }
      const __m512i d0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w0, _mm512_loadu_si512(xq + c * 64));
      const __m512i d1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w1, _mm512_loadu_si512(xq + c * 64 + 64));
      __m512 s0 = _mm512_loadu_ps(xs + c * 16), s1 = _mm512_loadu_ps(xs + c * 16 + 16);
      if constexpr (G != Groups::PerRow) {
        s0 = _mm512_mul_ps(s0, weight_scales<G>(s, c, shift));
        s1 = _mm512_mul_ps(s1, weight_scales<G>(s, c + 1, shift));
      }
      acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0), s0, acc0);
      acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d1), s1, acc1);
    }
    float total = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    if constexpr (G == Groups::PerRow) total *= s[0];
    y[n] = total + zero_point_term(w, n, a.group_sum.data());
  }
}

template <int Bits>
void rows_for(const PackedMatrix& w, const QuantizedActivation& a, float* y, int64_t n0, int64_t n1) {
  if (w.n_groups == 1) rows<Bits, Groups::PerRow>(w, a, y, n0, n1);
  else if (w.group == 32) rows<Bits, Groups::Of32>(w, a, y, n0, n1);
  else rows<Bits, Groups::Pow2>(w, a, y, n0, n1);
}

}  // namespace

void gemv_avx512vnni(const PackedMatrix& w, const QuantizedActivation& a, float* y, int64_t n0, int64_t n1) {
  if (w.bits == 8) rows_for<8>(w, a, y, n0, n1);
  else rows_for<4>(w, a, y, n0, n1);
}

}  // namespace sy_quant
