// AVX2 GEMV with int8 activations: the activation row quantized per
// 32-element block (exactly as the VNNI path does it), multiplied with the
// codes by vpmaddubsw (u8 x s8 -> pairs summed in s16) and vpmaddwd (-> s32).
// Built with -mavx2 -mfma; the AVX2 machines' counterpart of vpdpbusd.
//
// vpmaddubsw saturates at 32767: int4 codes (0..15) times |q| <= 127 cannot
// reach it, but int8 codes (0..255) can. Those are recentred to signed
// (c - 128, by flipping the top bit) and multiplied by the sign trick,
// |c - 128| as unsigned times q carrying c - 128's sign, whose pair sums
// stay within 2 * 128 * 127. The 128 * sum(q) this leaves out is folded into
// the zero-point term: with the symmetric int8 zero point (128) the two
// cancel exactly and that term is skipped.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>
#include <type_traits>

#include "avx2_common.h"
#include "int8_dispatch.h"
#include "qmatmul.h"

namespace sy_quant {

namespace {

inline int hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

// int8 weights, one row at a time, one sequential stream, for T tokens:
// each block's codes are loaded, recentred and their scale converted once
// for the T tokens. Four accumulators per token, one per 32-block of a
// 128-code chunk; every token's sums run in the same order at any T, so a
// token's outputs are the same bits alone and in a batch.
template <Groups G, int T, typename S>
void int8_rows(const PackedMatrix& w, const QuantizedActivation* a, float* y, int64_t ldy, int64_t n0, int64_t n1) {
  const int64_t chunks = w.Kp / 128;  // four 32-blocks each
  int shift = 0;                      // Pow2: block b is in group b >> shift
  if constexpr (G == Groups::Pow2)
    while ((int64_t{32} << shift) < w.group) ++shift;
  const int8_t* xq[T];
  const float* xs[T];
  for (int t = 0; t < T; ++t) {
    xq[t] = a[t].q.data();
    xs[t] = a[t].scale16.data();
  }
  // Block b's activation scale, eight copies: scale16 keeps them so.
  auto act_scale = [&](int t, int64_t b) { return _mm256_loadu_ps(xs[t] + (b / 2) * 16 + (b % 2) * 8); };
  const bool cancels = w.negzp.empty() && w.symmetric_zero_point == 128.f;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w.codes.data() + n * w.row_bytes();
    const S* s = scales_of<S>(w) + n * w.group_stride;
    __m256 acc[T][4];
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < 4; ++i) acc[t][i] = _mm256_setzero_ps();
    for (int64_t c = 0; c < chunks; ++c) {
      for (int i = 0; i < 4; ++i) {
        const int64_t b = c * 4 + i;
        const __m256i codes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + b * 32));
        const __m256i centred = _mm256_xor_si256(codes, _mm256_set1_epi8(static_cast<char>(0x80)));  // c - 128 as s8
        const __m256i magnitude = _mm256_abs_epi8(centred);
        __m256 ws = _mm256_setzero_ps();
        if constexpr (G == Groups::Of32) ws = _mm256_set1_ps(scale_value(s[b]));
        if constexpr (G == Groups::Pow2) ws = _mm256_set1_ps(scale_value(s[b >> shift]));
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq[t] + b * 32));
          const __m256i pairs = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(q, centred));
          const __m256i d = _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
          __m256 scale = act_scale(t, b);
          if constexpr (G != Groups::PerRow) scale = _mm256_mul_ps(scale, ws);
          acc[t][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), scale, acc[t][i]);
        }
      }
    }
    for (int t = 0; t < T; ++t) {
      float total = hsum(_mm256_add_ps(_mm256_add_ps(acc[t][0], acc[t][1]), _mm256_add_ps(acc[t][2], acc[t][3])));
      if constexpr (G == Groups::PerRow) total *= s[0];
      // The zero-point term, sum_g zp'_g * group_sum_g, where zp' also
      // carries the 128 * sum(q) the recentring left out.
      if (!cancels) {
        for (int64_t g = 0; g < w.n_groups; ++g) {
          const float coeff = w.negzp_at(n, g) + 128.f * scale_value(s[g]);
          total += coeff * a[t].group_sum[static_cast<size_t>(g)];
        }
      }
      y[t * ldy + n] = total;
    }
  }
}

// int4, R rows at a time for T tokens: each token's activation codes and
// scales are loaded once for the R rows, each row's codes unpacked and its
// scales converted once for the T tokens; every (row, token) sum runs in
// the same order whatever R and T are, so a token's outputs are the same
// bits alone and in a batch. Fold (symmetric weights): with the zero-point
// start values (QuantizedActivation::zero_start) the codes come out as
// dot(code - 8, q), no zero-point term per row; otherwise (asymmetric
// weights: GGUF's Q4_1, int4-asym) each row adds its term at the end. The
// R rows are short streams the hardware prefetcher barely follows; the rows
// that follow (contiguous) are prefetched a few KB ahead at the rate these
// are read.
template <Groups G, bool Fold, int R, int T, typename S>
void int4_row_block(const PackedMatrix& w, const QuantizedActivation* a, float* y, int64_t ldy, int64_t n) {
  const int64_t chunks = w.Kp / 128;
  int shift = 0;
  if constexpr (G == Groups::Pow2)
    while ((int64_t{32} << shift) < w.group) ++shift;
  const __m256i low = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  const uint8_t* row[R];
  const S* s[R];
  __m256 acc[R][T];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    row[r] = w.codes.data() + (n + r) * w.row_bytes();
    s[r] = scales_of<S>(w) + (n + r) * w.group_stride;
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  }
  const char* ahead = reinterpret_cast<const char*>(row[0]) + 4096;
  for (int64_t c = 0; c < chunks; ++c) {
    if constexpr (R > 1)
      for (int line = 0; line < R * 64; line += 64) _mm_prefetch(ahead + c * R * 64 + line, _MM_HINT_T0);
    // Half h of the chunk's 64 bytes holds block h (low nibbles) and block
    // h + 2 (high nibbles).
    for (int h = 0; h < 2; ++h) {
      const int64_t b_lo = c * 4 + h, b_hi = c * 4 + 2 + h;
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row[r] + c * 64 + h * 32));
        const __m256i c_lo = _mm256_and_si256(v, low), c_hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
        __m256 ws_lo = _mm256_setzero_ps(), ws_hi = _mm256_setzero_ps();
        if constexpr (G == Groups::Of32) {
          ws_lo = _mm256_set1_ps(scale_value(s[r][b_lo]));
          ws_hi = _mm256_set1_ps(scale_value(s[r][b_hi]));
        } else if constexpr (G == Groups::Pow2) {
          ws_lo = _mm256_set1_ps(scale_value(s[r][b_lo >> shift]));
          ws_hi = _mm256_set1_ps(scale_value(s[r][b_hi >> shift]));
        }
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          const int8_t* xq = a[t].q.data();
          const float* xs = a[t].scale16.data();
          const __m256i q_lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b_lo * 32));
          const __m256i q_hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b_hi * 32));
          __m256i d_lo = _mm256_madd_epi16(_mm256_maddubs_epi16(c_lo, q_lo), ones);
          __m256i d_hi = _mm256_madd_epi16(_mm256_maddubs_epi16(c_hi, q_hi), ones);
          if constexpr (Fold) {
            const int32_t* zs = a[t].zero_start.data();
            d_lo = _mm256_add_epi32(d_lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(zs + b_lo * 8)));
            d_hi = _mm256_add_epi32(d_hi, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(zs + b_hi * 8)));
          }
          __m256 sc_lo = _mm256_loadu_ps(xs + (b_lo / 2) * 16 + (b_lo % 2) * 8);
          __m256 sc_hi = _mm256_loadu_ps(xs + (b_hi / 2) * 16 + (b_hi % 2) * 8);
          if constexpr (G != Groups::PerRow) {
            sc_lo = _mm256_mul_ps(sc_lo, ws_lo);
            sc_hi = _mm256_mul_ps(sc_hi, ws_hi);
          }
          acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d_lo), sc_lo, acc[r][t]);
          acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d_hi), sc_hi, acc[r][t]);
        }
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) {
      float total = hsum(acc[r][t]) * (G == Groups::PerRow ? scale_value(s[r][0]) : 1.f);
      if constexpr (!Fold) total += dot(w.negzp.data() + (n + r) * w.group_stride, a[t].group_sum.data(), w.n_groups);  // the zero-point term
      y[t * ldy + n + r] = total;
    }
}

// Rows [n0, n1) for T tokens: blocks of R rows (R x T accumulators kept in
// registers: 4 rows for one or two tokens, 2 for four), the rest one by one.
template <Groups G, bool Fold, int T, typename S>
void int4_rows(const PackedMatrix& w, const QuantizedActivation* a, float* y, int64_t ldy, int64_t n0, int64_t n1) {
  constexpr int R = T >= 4 ? 2 : 4;
  int64_t n = n0;
  for (; n + R <= n1; n += R) int4_row_block<G, Fold, R, T, S>(w, a, y, ldy, n);
  for (; n < n1; ++n) int4_row_block<G, Fold, 1, T, S>(w, a, y, ldy, n);
}

template <int Bits, Groups G, int T, typename S>
void rows(const PackedMatrix& w, const QuantizedActivation* a, float* y, int64_t ldy, int64_t n0, int64_t n1) {
  if constexpr (Bits == 4) {
    if (folds_zero_point(w)) int4_rows<G, true, T, S>(w, a, y, ldy, n0, n1);
    else int4_rows<G, false, T, S>(w, a, y, ldy, n0, n1);
  } else {
    int8_rows<G, T, S>(w, a, y, ldy, n0, n1);
  }
}

// M tokens, four at a time (int4) or two (int8: its four accumulators per
// token leave registers for two), the rest in smaller groups.
template <int Bits, Groups G, typename S>
void token_groups(const PackedMatrix& w, const QuantizedActivation* a, int64_t M, float* y, int64_t ldy, int64_t n0, int64_t n1) {
  int64_t m = 0;
  if constexpr (Bits == 4)
    for (; m + 4 <= M; m += 4) rows<Bits, G, 4, S>(w, a + m, y + m * ldy, ldy, n0, n1);
  for (; m + 2 <= M; m += 2) rows<Bits, G, 2, S>(w, a + m, y + m * ldy, ldy, n0, n1);
  if (m < M) rows<Bits, G, 1, S>(w, a + m, y + m * ldy, ldy, n0, n1);
}

}  // namespace

void quantize_activation_avx2(const PackedMatrix& w, const float* x, QuantizedActivation& a) {
  const int64_t blocks = w.Kp / 32, blocks_per_group = size_activation(w, a);
  const __m256 sign = _mm256_set1_ps(-0.f);
  // packs_epi32 / packs_epi16 interleave the 128-bit lanes; this puts the
  // 32 bytes back in order.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t b = 0; b < blocks; ++b) {
    const float* xb = x + b * 32;
    __m256 v[4];
    __m256 amax_v = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(xb + i * 8);
      amax_v = _mm256_max_ps(amax_v, _mm256_andnot_ps(sign, v[i]));
    }
    const float amax = hmax(amax_v);
    // The same arithmetic as the VNNI path: identical codes on both.
    const float scale = amax / 127.f, inv = amax > 0 ? 127.f / amax : 0.f;
    __m256i q[4];
    for (int i = 0; i < 4; ++i) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], _mm256_set1_ps(inv)));  // nearest even
    const int sum = hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
    const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(a.q.data() + b * 32), _mm256_permutevar8x32_epi32(packed, order));
    std::fill_n(a.scale16.data() + (b / 2) * 16 + (b % 2) * 8, 8, scale);
    a.group_sum[static_cast<size_t>(std::min(b / blocks_per_group, w.n_groups - 1))] += scale * static_cast<float>(sum);
  }
  if (folds_zero_point(w)) {
    // Sums of 4 consecutive q (vpmaddubsw with ones, then vpmaddwd), times -z.
    a.zero_start.resize(static_cast<size_t>(w.Kp / 4));
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    const __m256i negz = _mm256_set1_epi32(-static_cast<int32_t>(w.symmetric_zero_point));
    for (int64_t k = 0; k < w.Kp; k += 32) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q.data() + k));
      const __m256i sums = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(a.zero_start.data() + k / 4), _mm256_mullo_epi32(sums, negz));
    }
  }
}

namespace {

// 8 vectors of 8 dwords, transposed: v[i] lane r <- v[r] lane i.
inline void transpose8x8_epi32(__m256i v[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_castsi256_ps(_mm256_unpacklo_epi32(v[i], v[i + 1]));
    t[i + 1] = _mm256_castsi256_ps(_mm256_unpackhi_epi32(v[i], v[i + 1]));
  }
  // u[4h + j]: rows 4h .. 4h+3 of columns j (low half) and j + 4 (high),
  // for j = 0, 1, 2, 3.
  for (int h = 0; h < 8; h += 4) {
    u[h + 0] = _mm256_shuffle_ps(t[h], t[h + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[h + 1] = _mm256_shuffle_ps(t[h], t[h + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[h + 2] = _mm256_shuffle_ps(t[h + 1], t[h + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[h + 3] = _mm256_shuffle_ps(t[h + 1], t[h + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int j = 0; j < 4; ++j) {
    v[j] = _mm256_castps_si256(_mm256_permute2f128_ps(u[j], u[4 + j], 0x20));
    v[j + 4] = _mm256_castps_si256(_mm256_permute2f128_ps(u[j], u[4 + j], 0x31));
  }
}

// Rows n0 .. n0+7 of an int4 weight in panel order, the tiles' operand: for
// block b, 8 vectors whose lane r holds row r's codes 4i .. 4i+3 (one byte
// each, 0-15), i = 0..7; rows past N are zero codes with zero scales. The
// group scales as 8-row vectors, [group_stride, 8].
struct Int4Panel {
  struct alignas(32) Lanes {
    uint8_t bytes[32];
  };
  std::vector<Lanes> codes;    // [Kp / 32, 8]
  std::vector<float> scales;   // [group_stride, 8]
  std::vector<float> negzp;    // [n_groups, 8]: -scale * zero point, asymmetric weights only

  void fill(const PackedMatrix& w, int64_t n0) {
    const int64_t blocks = w.Kp / 32, valid = std::min<int64_t>(8, w.N - n0);
    codes.resize(static_cast<size_t>(blocks * 8));
    scales.assign(static_cast<size_t>(w.group_stride * 8), 0.f);
    const __m256i low = _mm256_set1_epi8(0x0F);
    for (int64_t b = 0; b < blocks; ++b) {
      // Block b of a row: 32 low (or high) nibbles of the chunk's bytes.
      const int64_t at = (b / 4) * 64 + (b % 2) * 32;
      const bool high = b % 4 >= 2;
      __m256i v[8];
      for (int64_t r = 0; r < 8; ++r) {
        if (r >= valid) {
          v[r] = _mm256_setzero_si256();
          continue;
        }
        const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.codes.data() + (n0 + r) * w.row_bytes() + at));
        v[r] = _mm256_and_si256(high ? _mm256_srli_epi16(bytes, 4) : bytes, low);
      }
      transpose8x8_epi32(v);
      for (int i = 0; i < 8; ++i) _mm256_store_si256(reinterpret_cast<__m256i*>(codes[static_cast<size_t>(b * 8 + i)].bytes), v[i]);
    }
    for (int64_t r = 0; r < valid; ++r)
      for (int64_t g = 0; g < w.group_stride; ++g) scales[static_cast<size_t>(g * 8 + r)] = w.scales[static_cast<size_t>((n0 + r) * w.group_stride + g)];
    if (folds_zero_point(w)) return;
    negzp.assign(static_cast<size_t>(w.n_groups * 8), 0.f);
    for (int64_t r = 0; r < valid; ++r)
      for (int64_t g = 0; g < w.n_groups; ++g) negzp[static_cast<size_t>(g * 8 + r)] = w.negzp_at(n0 + r, g);
  }
};

// The 8 rows of `panel` x T tokens. Per 32-block, each token's 4-code groups
// are broadcast against the block's 8 vectors; the 8 vpmaddubsw pair sums
// add up in 16 bits (at most 8 * 2 * 15 * 127 = 30480, no overflow), then
// one vpmaddwd, one convert, one scale and one FMA per block serve all 8
// rows, where the row GEMV pays them per row. Fold: symmetric weights, the
// zero point folded into the start (QuantizedActivation::block_zero);
// otherwise each row's zero-point term is added at the end.
template <bool Fold, int T>
void int4_panel_tile(const PackedMatrix& w, const Int4Panel& panel, const QuantizedActivation* a, float* y, int64_t ldy, int64_t n0) {
  const int64_t blocks = w.Kp / 32;
  int shift = 0;  // block b is in group b >> shift; one group per row: 0
  while (w.n_groups > 1 && (int64_t{32} << shift) < w.group) ++shift;
  const bool per_row = w.n_groups == 1;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const Int4Panel::Lanes* blk = panel.codes.data() + b * 8;
    __m256i wv[8];
    for (int i = 0; i < 8; ++i) wv[i] = _mm256_load_si256(reinterpret_cast<const __m256i*>(blk[i].bytes));
    __m256i sum[T];
    for (int t = 0; t < T; ++t) sum[t] = _mm256_maddubs_epi16(wv[0], _mm256_set1_epi32(four_codes(a[t].q.data() + b * 32)));
#pragma GCC unroll 7
    for (int i = 1; i < 8; ++i)
      for (int t = 0; t < T; ++t)
        sum[t] = _mm256_add_epi16(sum[t], _mm256_maddubs_epi16(wv[i], _mm256_set1_epi32(four_codes(a[t].q.data() + b * 32 + 4 * i))));
    const __m256 ws = _mm256_loadu_ps(panel.scales.data() + (per_row ? 0 : (b >> shift)) * 8);
    for (int t = 0; t < T; ++t) {
      __m256i d = _mm256_madd_epi16(sum[t], ones);
      if constexpr (Fold) d = _mm256_add_epi32(d, _mm256_set1_epi32(a[t].block_zero[static_cast<size_t>(b)]));
      const __m256 s = _mm256_mul_ps(_mm256_set1_ps(a[t].scale16[static_cast<size_t>((b / 2) * 16 + (b % 2) * 8)]), ws);
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), s, acc[t]);
    }
  }
  const int64_t valid = std::min<int64_t>(8, w.N - n0);
  for (int t = 0; t < T; ++t) {
    if constexpr (!Fold)  // sum over groups of -scale * zero point * the group's activation sum
      for (int64_t g = 0; g < w.n_groups; ++g)
        acc[t] = _mm256_fmadd_ps(_mm256_loadu_ps(panel.negzp.data() + g * 8), _mm256_set1_ps(a[t].group_sum[static_cast<size_t>(g)]), acc[t]);
    alignas(32) float out[8];
    _mm256_store_ps(out, acc[t]);
    std::copy(out, out + valid, y + t * ldy + n0);
  }
}

template <bool Fold>
void int4_panels(const PackedMatrix& w, const QuantizedActivation* a, int64_t M, float* y, int64_t g0, int64_t g1) {
  thread_local Int4Panel panel_storage;  // each thread's own, kept across calls
  Int4Panel& panel = panel_storage;
  const int64_t ldy = w.N;
  for (int64_t g = g0; g < g1; ++g) {
    panel.fill(w, g * 8);
    int64_t m = 0;
    for (; m + 4 <= M; m += 4) int4_panel_tile<Fold, 4>(w, panel, a + m, y + m * ldy, ldy, g * 8);
    for (; m < M; ++m) int4_panel_tile<Fold, 1>(w, panel, a + m, y + m * ldy, ldy, g * 8);
  }
}

}  // namespace

void gemm_avx2_int4(const PackedMatrix& w, const QuantizedActivation* a, int64_t M, float* y, int64_t g0, int64_t g1) {
  if (folds_zero_point(w)) int4_panels<true>(w, a, M, y, g0, g1);
  else int4_panels<false>(w, a, M, y, g0, g1);
}

void gemv_avx2_int8(const PackedMatrix& w, const QuantizedActivation* a, int64_t M, float* y, int64_t ldy, int64_t n0, int64_t n1) {
  dispatch_groups(w, [&]<Groups G, typename S>() {
    if (w.bits == 8) token_groups<8, G, S>(w, a, M, y, ldy, n0, n1);
    else token_groups<4, G, S>(w, a, M, y, ldy, n0, n1);
  });
}

}  // namespace sy_quant
