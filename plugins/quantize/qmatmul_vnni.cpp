// AVX-512 VNNI: int8 activations (per 32-element block) times the u8 codes
// of a matrix in panels (qmatmul.h) with vpdpbusd, one token (decode) or
// many (prefill, batched decodes, verification) through the same tile code.
// Built with -mavx512f -mavx512bw -mavx512vnni.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "panel_common.h"

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
    std::fill_n(a.scale16.data() + (b / 2) * 16 + (b % 2) * 8, 8, scale);
    if (w.n_groups > 1 && w.group == 16) {  // two groups a block: q0 and q1
      a.group_sum[static_cast<size_t>(std::min(2 * b, w.n_groups - 1))] += scale * static_cast<float>(_mm512_reduce_add_epi32(q0));
      a.group_sum[static_cast<size_t>(std::min(2 * b + 1, w.n_groups - 1))] += scale * static_cast<float>(_mm512_reduce_add_epi32(q1));
      continue;
    }
    const int sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
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
    fill_block_zero(a);
  }
}

namespace {

// One 32-block of a panel's codes into registers, 16 rows a vector:
// wv[i] holds each row's codes 4i .. 4i+3 (int4: each line's low nibbles,
// then its high ones).
template <int Bits>
inline void load_block(const uint8_t* blk, __m512i (&wv)[8]) {
  if constexpr (Bits == 8) {
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) wv[i] = _mm512_loadu_si512(blk + 64 * i);
  } else {
    const __m512i low = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const __m512i v = _mm512_loadu_si512(blk + 64 * j);
      wv[2 * j] = _mm512_and_si512(v, low);
      wv[2 * j + 1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
    }
  }
}

// A thread's panels are one contiguous stream: each block's lines fetched
// 4 KB ahead. Always inlined: GCC 12 deletes a call it did not inline early
// to a function whose only effect is a prefetch.
[[gnu::always_inline]] inline void prefetch_ahead(const uint8_t* blk, int64_t block_bytes) {
  for (int64_t line = 0; line < block_bytes; line += 64) _mm_prefetch(reinterpret_cast<const char*>(blk) + 4096 + line, _MM_HINT_T0);
}

// One token's product with block b of a panel (codes wv, group scales ws),
// added to acc: C integer chains (exact, so C changes no bit), started at
// the folded zero point (Fold), then one convert, scale and FMA for the
// panel's 16 rows.
template <Groups G, bool Fold, int C>
inline __m512 block_product(const __m512i (&wv)[8], const QuantizedActivation& a, int64_t b, __m512 ws, __m512 acc) {
  const int8_t* xq = a.q.data() + b * 32;
  __m512i d[C];
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) d[c] = _mm512_setzero_si512();
  if constexpr (Fold) d[0] = _mm512_set1_epi32(a.block_zero[static_cast<size_t>(b)]);
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) d[i % C] = _mm512_dpbusd_epi32(d[i % C], wv[i], _mm512_set1_epi32(four_codes(xq + 4 * i)));
#pragma GCC unroll 4
  for (int c = 1; c < C; ++c) d[0] = _mm512_add_epi32(d[0], d[c]);
  __m512 s = _mm512_set1_ps(a.scale16[static_cast<size_t>((b / 2) * 16 + (b % 2) * 8)]);
  if constexpr (G != Groups::PerRow) s = _mm512_mul_ps(s, ws);
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(d[0]), s, acc);
}

// One 32-block of a panel whose groups are 16 codes: the block's first four
// code lines (codes 0-15) and last four (16-31) sum in chains of their own,
// each converted and scaled by its group's scales. A lone token keeps two
// chains a half for the vpdpbusd latency.
template <bool Fold, int T>
inline void half_groups(const __m512i (&wv)[8], __m512 ws_lo, __m512 ws_hi, const QuantizedActivation* a, int64_t b, __m512 (&acc)[T]) {
  constexpr int C = T == 1 ? 2 : 1;  // chains per half
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    const int8_t* xq = a[t].q.data() + b * 32;
    __m512i lo[C], hi[C];
#pragma GCC unroll 2
    for (int c = 0; c < C; ++c) lo[c] = hi[c] = _mm512_setzero_si512();
    if constexpr (Fold) {
      lo[0] = _mm512_set1_epi32(a[t].half_zero[static_cast<size_t>(2 * b)]);
      hi[0] = _mm512_set1_epi32(a[t].half_zero[static_cast<size_t>(2 * b + 1)]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      lo[i % C] = _mm512_dpbusd_epi32(lo[i % C], wv[i], _mm512_set1_epi32(four_codes(xq + 4 * i)));
      hi[i % C] = _mm512_dpbusd_epi32(hi[i % C], wv[4 + i], _mm512_set1_epi32(four_codes(xq + 16 + 4 * i)));
    }
    if constexpr (C == 2) lo[0] = _mm512_add_epi32(lo[0], lo[1]), hi[0] = _mm512_add_epi32(hi[0], hi[1]);
    const __m512 s = _mm512_set1_ps(a[t].scale16[static_cast<size_t>((b / 2) * 16 + (b % 2) * 8)]);
    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo[0]), _mm512_mul_ps(s, ws_lo), acc[t]);
    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi[0]), _mm512_mul_ps(s, ws_hi), acc[t]);
  }
}

// 16 rows (panel p) x T tokens. Per 32-block: the block's codes for the 16
// rows (int8: 8 lines, int4: 4 lines unpacked to 8) stay in registers while
// each token's 4-code groups are broadcast against them; C independent
// integer chains per token (summed exactly, so C changes no bit) cover the
// vpdpbusd latency when few tokens share the block. Then one convert, one
// scale and one FMA per block for all 16 rows. Each (row, token) result
// takes the same operations in the same order whatever T is, so a token's
// output is the same bits alone (the GEMV, T = 1) and in any tile: batching
// and speculative verification do not change a quantized model's decode.
// Fold: symmetric weights, the zero point folded into the chains' start
// (QuantizedActivation::block_zero).
template <int Bits, Groups G, bool Fold, int T, typename S>
void panel_tile(const PackedMatrix& w, const QuantizedActivation* a, float* y, int64_t ldy, int64_t p) {
  constexpr int C = T >= 4 ? 1 : 4 / T;
  const int64_t blocks = w.Kp / 32;
  const int shift = G == Groups::Pow2 ? group_shift(w) : 0;
  const uint8_t* codes = w.codes.data() + p * w.panel_bytes();
  const S* scales = panel_scales_of<S>(w) + p * w.group_stride * 16;
  const int64_t block_bytes = w.block_bytes();
  __m512 acc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* blk = codes + b * block_bytes;
    prefetch_ahead(blk, block_bytes);
    __m512i wv[8];  // wv[i] holds each row's codes 4i .. 4i+3 of the block
    load_block<Bits>(blk, wv);
    if constexpr (G == Groups::Of16) {
      half_groups<Fold, T>(wv, panel_scales(scales + 2 * b * 16), panel_scales(scales + (2 * b + 1) * 16), a, b, acc);
      continue;
    }
    const __m512 ws = block_scales<G>(scales, b, shift);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) acc[t] = block_product<G, Fold, C>(wv, a[t], b, ws, acc[t]);
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) store_panel_outputs<G == Groups::PerRow, Fold>(w, p, acc[t], scales, a[t].group_sum.data(), y + t * ldy);
}

// One token (a decode GEMV), kPanelsSideBySide panels at once: each
// panel's operations and their order are panel_tile<..., 1>'s (the integer
// chains are exact, so their number changes no bit), but a thread keeps four
// code streams in flight and four panels of independent work per block,
// where one panel at a time left a core's memory reads idle between blocks:
// 1.1B int4 at one thread, 20.7-21.4 -> 24.9-25.7 tokens/s (2 panels: 23.6-
// 24.0, 8: 21.9-22.2, on Sapphire Rapids).
constexpr int kPanelsSideBySide = 4;

template <int Bits, Groups G, bool Fold, typename S>
void panels_side_by_side(const PackedMatrix& w, const QuantizedActivation& a, float* y, int64_t p) {
  constexpr int P = kPanelsSideBySide;
  const int64_t blocks = w.Kp / 32, block_bytes = w.block_bytes();
  const int shift = G == Groups::Pow2 ? group_shift(w) : 0;
  const uint8_t* codes[P];
  const S* scales[P];
  __m512 acc[P];
#pragma GCC unroll 4
  for (int q = 0; q < P; ++q) {
    codes[q] = w.codes.data() + (p + q) * w.panel_bytes();
    scales[q] = panel_scales_of<S>(w) + (p + q) * w.group_stride * 16;
    acc[q] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < blocks; ++b) {
#pragma GCC unroll 4
    for (int q = 0; q < P; ++q) {
      const uint8_t* blk = codes[q] + b * block_bytes;
      prefetch_ahead(blk, block_bytes);
      __m512i wv[8];
      load_block<Bits>(blk, wv);
      acc[q] = block_product<G, Fold, 2>(wv, a, b, block_scales<G>(scales[q], b, shift), acc[q]);
    }
  }
#pragma GCC unroll 4
  for (int q = 0; q < P; ++q) store_panel_outputs<G == Groups::PerRow, Fold>(w, p + q, acc[q], scales[q], a.group_sum.data(), y);
}

// Panels [p0, p1) for all M tokens: tiles of 8 tokens, then 4, 2 and 1
// (a verification's 5 or 7 rows read each panel from L1 a few times); one
// token, four panels side by side.
template <int Bits, Groups G, bool Fold, typename S>
void panels(const PackedMatrix& w, const QuantizedActivation* a, int64_t M, float* y, int64_t p0, int64_t p1) {
  const int64_t ldy = w.N;
  if constexpr (G != Groups::Of16) {
    if (M == 1) {
      int64_t p = p0;
      for (; p + kPanelsSideBySide <= p1; p += kPanelsSideBySide) panels_side_by_side<Bits, G, Fold, S>(w, a[0], y, p);
      for (; p < p1; ++p) panel_tile<Bits, G, Fold, 1, S>(w, a, y, ldy, p);
      return;
    }
  }
  for (int64_t p = p0; p < p1; ++p) {
    int64_t m = 0;
    for (; m + 8 <= M; m += 8) panel_tile<Bits, G, Fold, 8, S>(w, a + m, y + m * ldy, ldy, p);
    if (M - m >= 4) panel_tile<Bits, G, Fold, 4, S>(w, a + m, y + m * ldy, ldy, p), m += 4;
    if (M - m >= 2) panel_tile<Bits, G, Fold, 2, S>(w, a + m, y + m * ldy, ldy, p), m += 2;
    if (M - m >= 1) panel_tile<Bits, G, Fold, 1, S>(w, a + m, y + m * ldy, ldy, p);
  }
}

}  // namespace

void gemm_avx512vnni(const PackedMatrix& w, const QuantizedActivation* a, int64_t M, float* y, int64_t p0, int64_t p1) {
  const bool fold = folds_zero_point(w);
  dispatch_groups<true>(w, [&]<Groups G, typename S>() {
    if (w.bits == 8 && fold) panels<8, G, true, S>(w, a, M, y, p0, p1);
    else if (w.bits == 8) panels<8, G, false, S>(w, a, M, y, p0, p1);
    else if (fold) panels<4, G, true, S>(w, a, M, y, p0, p1);
    else panels<4, G, false, S>(w, a, M, y, p0, p1);
  });
}

}  // namespace sy_quant
