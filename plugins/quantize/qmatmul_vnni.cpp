// AVX-512 VNNI GEMV: int8 activations (per 32-element block) times the u8
// codes with vpdpbusd. Built with -mavx512f -mavx512bw -mavx512vnni.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "avx512_common.h"
#include "int8_dispatch.h"

namespace sy_quant {

void quantize_activation(const PackedMatrix& w, const float* x, QuantizedActivation& a) {
  const int64_t blocks = w.Kp / 32, blocks_per_group = size_activation(w, a);
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
  if (folds_zero_point(w)) {
    // Sums of 4 consecutive q (vpdpbusd with ones), times -z.
    a.zero_start.resize(static_cast<size_t>(w.Kp / 4));
    const __m512i ones = _mm512_set1_epi8(1), negz = _mm512_set1_epi32(-static_cast<int32_t>(w.symmetric_zero_point));
    for (int64_t k = 0; k < w.Kp; k += 64) {
      const __m512i sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_loadu_si512(a.q.data() + k));
      _mm512_storeu_si512(a.zero_start.data() + k / 4, _mm512_mullo_epi32(sums, negz));
    }
  }
}

namespace {


// Sum of 16 lanes (GCC 12's _mm512_reduce_add_ps trips -Wuninitialized
// inside its header when inlined here).
inline float hsum512(__m512 v) {
  __m512 t = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
  t = _mm512_add_ps(t, _mm512_shuffle_f32x4(t, t, _MM_SHUFFLE(2, 3, 0, 1)));
  __m128 q = _mm512_castps512_ps128(t);
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));
  q = _mm_add_ss(q, _mm_shuffle_ps(q, q, 1));
  return _mm_cvtss_f32(q);
}


// The weight-scale vector of 64-element chunk c: lanes 0-7 belong to the
// chunk's first 32-block, lanes 8-15 to its second.
template <Groups G, typename S>
inline __m512 weight_scales(const S* s, int64_t c, int shift) {
  if constexpr (G == Groups::PerRow) {
    return _mm512_set1_ps(1.f);  // applied once per row
  } else if constexpr (G == Groups::Of32) {
    const __m512i lanes = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    __m128 pair;
    if constexpr (std::is_same_v<S, float>) {
      pair = _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + 2 * c)));
    } else {
      int32_t bits;
      std::memcpy(&bits, s + 2 * c, sizeof bits);
      pair = _mm_cvtph_ps(_mm_cvtsi32_si128(bits));
    }
    return _mm512_permutexvar_ps(lanes, _mm512_castps128_ps512(pair));
  } else {
    return _mm512_set1_ps(scale_value(s[c >> shift]));
  }
}

// R rows at a time, two 64-element chunks (128 codes) per iteration: the
// activation's codes, scales and zero-point start values are loaded once for
// the R rows. Fold: symmetric weights, the zero point folded into the dot
// products' start values (QuantizedActivation::zero_start). Each (row,
// token) result takes exactly the operations of tile() below, in the same
// order (one accumulator, chunk by chunk), so a token's output is the same
// bits in a GEMV and in any tile: batching and speculative verification do
// not change a quantized model's decode.
template <int Bits, Groups G, bool Fold, int R, typename S>
void row_block(const PackedMatrix& w, const QuantizedActivation& a, float* y, int64_t n) {
  const int64_t chunks = w.Kp / 64;
  int shift = 0;
  if constexpr (G == Groups::Pow2)
    while ((int64_t{64} << shift) < w.group) ++shift;
  const __m512i low = _mm512_set1_epi8(0x0F);
  const int8_t* xq = a.q.data();
  const float* xs = a.scale16.data();
  const uint8_t* row[R];
  const S* s[R];
  __m512 acc[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    row[r] = w.codes.data() + (n + r) * w.row_bytes();
    s[r] = scales_of<S>(w) + (n + r) * w.group_stride;
    acc[r] = _mm512_setzero_ps();
  }
  // The R rows are R short streams the hardware prefetcher barely follows.
  // Rows are contiguous, so the blocks that follow are one stream: it is
  // prefetched 4 KB ahead, at the rate this block is read.
  constexpr int64_t kStep = R * (Bits == 8 ? 128 : 64);
  const char* ahead = reinterpret_cast<const char*>(row[0]) + 4096;
  for (int64_t c = 0; c < chunks; c += 2) {
    if constexpr (R > 1)
      for (int64_t line = 0; line < kStep; line += 64) _mm_prefetch(ahead + (c / 2) * kStep + line, _MM_HINT_T0);
    const __m512i x0 = _mm512_loadu_si512(xq + c * 64), x1 = _mm512_loadu_si512(xq + c * 64 + 64);
    const __m512 xs0 = _mm512_loadu_ps(xs + c * 16), xs1 = _mm512_loadu_ps(xs + c * 16 + 16);
    __m512i z0 = _mm512_setzero_si512(), z1 = _mm512_setzero_si512();
    if constexpr (Fold) {
      z0 = _mm512_loadu_si512(a.zero_start.data() + c * 16);
      z1 = _mm512_loadu_si512(a.zero_start.data() + c * 16 + 16);
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      __m512i w0, w1;
      if constexpr (Bits == 8) {
        w0 = _mm512_loadu_si512(row[r] + c * 64);
        w1 = _mm512_loadu_si512(row[r] + c * 64 + 64);
      } else {
        const __m512i v = _mm512_loadu_si512(row[r] + c * 32);
        w0 = _mm512_and_si512(v, low);
        w1 = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
      }
      const __m512i d0 = _mm512_dpbusd_epi32(z0, w0, x0);
      const __m512i d1 = _mm512_dpbusd_epi32(z1, w1, x1);
      __m512 s0 = xs0, s1 = xs1;
      if constexpr (G != Groups::PerRow) {
        s0 = _mm512_mul_ps(s0, weight_scales<G, S>(s[r], c, shift));
        s1 = _mm512_mul_ps(s1, weight_scales<G, S>(s[r], c + 1, shift));
      }
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0), s0, acc[r]);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d1), s1, acc[r]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    float total = hsum512(acc[r]);
    if constexpr (G == Groups::PerRow) total *= scale_value(s[r][0]);
    if constexpr (!Fold) total += zero_point_term(w, n + r, a.group_sum.data());
    y[n + r] = total;
  }
}

// Prefill: R weight rows times T tokens per tile, one accumulator per pair.
// The R rows (a few KB) stay in L1 while the token blocks pass; every
// weight load serves T tokens and every activation load R rows.
template <int Bits, Groups G, bool Fold, int R, int T, typename S>
void tile(const PackedMatrix& w, const QuantizedActivation* a, float* y, int64_t n) {
  const int64_t chunks = w.Kp / 64, ldy = w.N;
  int shift = 0;
  if constexpr (G == Groups::Pow2)
    while ((int64_t{64} << shift) < w.group) ++shift;
  const __m512i low = _mm512_set1_epi8(0x0F);
  const uint8_t* row[R];
  const S* s[R];
  __m512 acc[R][T];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    row[r] = w.codes.data() + (n + r) * w.row_bytes();
    s[r] = scales_of<S>(w) + (n + r) * w.group_stride;
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  }
  // The weight rows stream from memory as in row_block: prefetched 4 KB
  // ahead (the tiles of a thread walk its rows in order).
  constexpr int64_t kStep = R * (Bits == 8 ? 128 : 64);
  const char* ahead = reinterpret_cast<const char*>(row[0]) + 4096;
  for (int64_t c = 0; c < chunks; c += 2) {
    if constexpr (R > 1)
      for (int64_t line = 0; line < kStep; line += 64) _mm_prefetch(ahead + (c / 2) * kStep + line, _MM_HINT_T0);
    __m512i wv[R][2];
    __m512 ws[R][2];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      if constexpr (Bits == 8) {
        wv[r][0] = _mm512_loadu_si512(row[r] + c * 64);
        wv[r][1] = _mm512_loadu_si512(row[r] + c * 64 + 64);
      } else {
        const __m512i v = _mm512_loadu_si512(row[r] + c * 32);
        wv[r][0] = _mm512_and_si512(v, low);
        wv[r][1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
      }
      if constexpr (G != Groups::PerRow) {
        ws[r][0] = weight_scales<G, S>(s[r], c, shift);
        ws[r][1] = weight_scales<G, S>(s[r], c + 1, shift);
      }
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const int8_t* xq = a[t].q.data() + c * 64;
      const float* xs = a[t].scale16.data() + c * 16;
      const __m512i x0 = _mm512_loadu_si512(xq), x1 = _mm512_loadu_si512(xq + 64);
      const __m512 xs0 = _mm512_loadu_ps(xs), xs1 = _mm512_loadu_ps(xs + 16);
      __m512i z0 = _mm512_setzero_si512(), z1 = _mm512_setzero_si512();
      if constexpr (Fold) {
        z0 = _mm512_loadu_si512(a[t].zero_start.data() + c * 16);
        z1 = _mm512_loadu_si512(a[t].zero_start.data() + c * 16 + 16);
      }
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512i d0 = _mm512_dpbusd_epi32(z0, wv[r][0], x0);
        const __m512i d1 = _mm512_dpbusd_epi32(z1, wv[r][1], x1);
        __m512 s0 = xs0, s1 = xs1;
        if constexpr (G != Groups::PerRow) {
          s0 = _mm512_mul_ps(s0, ws[r][0]);
          s1 = _mm512_mul_ps(s1, ws[r][1]);
        }
        acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0), s0, acc[r][t]);
        acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d1), s1, acc[r][t]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      float total = hsum512(acc[r][t]);
      if constexpr (G == Groups::PerRow) total *= scale_value(s[r][0]);
      if constexpr (!Fold) total += zero_point_term(w, n + r, a[t].group_sum.data());
      y[t * ldy + n + r] = total;
    }
}

// Rows [n0, n1) of all M tokens for R weight rows: tiles of 4 tokens, then
// one tile of the 1-3 tokens left (a verification's 5 or 7 rows read the
// weights twice, not four times).
template <int Bits, Groups G, bool Fold, int R, typename S>
void token_tiles(const PackedMatrix& w, const QuantizedActivation* a, int64_t M, float* y, int64_t n) {
  const int64_t ldy = w.N;
  int64_t m = 0;
  for (; m + 4 <= M; m += 4) tile<Bits, G, Fold, R, 4, S>(w, a + m, y + m * ldy, n);
  switch (M - m) {
    case 3: tile<Bits, G, Fold, R, 3, S>(w, a + m, y + m * ldy, n); break;
    case 2: tile<Bits, G, Fold, R, 2, S>(w, a + m, y + m * ldy, n); break;
    case 1: tile<Bits, G, Fold, R, 1, S>(w, a + m, y + m * ldy, n); break;
    default: break;
  }
}

// Rows [n0, n1) for all M tokens: 4-row tiles, then the leftover rows.
template <int Bits, Groups G, bool Fold, typename S>
void tiles(const PackedMatrix& w, const QuantizedActivation* a, int64_t M, float* y, int64_t n0, int64_t n1) {
  int64_t n = n0;
  for (; n + 4 <= n1; n += 4) token_tiles<Bits, G, Fold, 4, S>(w, a, M, y, n);
  for (; n < n1; ++n) token_tiles<Bits, G, Fold, 1, S>(w, a, M, y, n);
}

template <int Bits, Groups G, typename S>
void rows(const PackedMatrix& w, const QuantizedActivation& a, float* y, int64_t n0, int64_t n1) {
  // int4: four rows share each activation load (its rows are half as long
  // per code, and the loads, not the bytes, bound it). int8: one row, one
  // sequential stream, at the memory wall already (bench_qmatmul).
  constexpr int R = Bits == 4 ? 4 : 1;
  int64_t n = n0;
  if (folds_zero_point(w)) {
    for (; n + R <= n1; n += R) row_block<Bits, G, true, R, S>(w, a, y, n);
    for (; n < n1; ++n) row_block<Bits, G, true, 1, S>(w, a, y, n);
  } else {
    for (; n + R <= n1; n += R) row_block<Bits, G, false, R, S>(w, a, y, n);
    for (; n < n1; ++n) row_block<Bits, G, false, 1, S>(w, a, y, n);
  }
}

}  // namespace

void gemv_avx512vnni(const PackedMatrix& w, const QuantizedActivation& a, float* y, int64_t n0, int64_t n1) {
  dispatch_groups(w, [&]<Groups G, typename S>() {
    if (w.bits == 8) rows<8, G, S>(w, a, y, n0, n1);
    else rows<4, G, S>(w, a, y, n0, n1);
  });
}

void gemm_avx512vnni(const PackedMatrix& w, const QuantizedActivation* a, int64_t M, float* y, int64_t n0, int64_t n1) {
  const bool fold = folds_zero_point(w);
  dispatch_groups(w, [&]<Groups G, typename S>() {
    if (w.bits == 8 && fold) tiles<8, G, true, S>(w, a, M, y, n0, n1);
    else if (w.bits == 8) tiles<8, G, false, S>(w, a, M, y, n0, n1);
    else if (fold) tiles<4, G, true, S>(w, a, M, y, n0, n1);
    else tiles<4, G, false, S>(w, a, M, y, n0, n1);
  });
}

}  // namespace sy_quant
