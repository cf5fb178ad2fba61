// Helpers shared by the AVX-512 translation units (qmatmul_avx512.cpp,
// qmatmul_vnni.cpp, qmatmul_amx.cpp), all built with -mavx512f. Internal linkage: each unit
// keeps its own copy, compiled for its own flags.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <type_traits>

#include "qmatmul.h"

namespace sy_quant {
namespace {

// sum_i a[i] * b[i], 16 lanes with a masked tail.
inline float dot_avx512(const float* a, const float* b, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
  const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
  acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc);
  return _mm512_reduce_add_ps(acc);
}

// The zero-point term of row n: sum_g -scale_g * zero_point_g * sums[g], where
// sums are the activation's per-group sums.
inline float zero_point_term(const PackedMatrix& w, int64_t n, const float* sums) {
  const size_t at = static_cast<size_t>(n * w.group_stride);
  return w.negzp.empty() ? -w.symmetric_zero_point * dot_avx512(w.scales.data() + at, sums, w.n_groups)
                         : dot_avx512(w.negzp.data() + at, sums, w.n_groups);
}

// A panel's group-scale vector for one group: its 16 rows' scales, contiguous.
template <typename S>
inline __m512 panel_scales(const S* s) {
  if constexpr (std::is_same_v<S, float>) return _mm512_loadu_ps(s);
  else return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)));
}

// The panel-order scales behind the codes (PackedMatrix::panel_scales_at).
template <typename S>
const S* panel_scales_of(const PackedMatrix& w) {
  return reinterpret_cast<const S*>(w.codes.data() + w.panel_scales_at);
}

// One token's 16 outputs of panel p from its float accumulator: the row
// scale (PerRowScale: one scale a row, applied once at the end), the zero
// point term (asymmetric weights: the panel's -scale * zero point of each
// group, 16 rows a vector, times the activation's group sums), a masked
// store of the panel's real rows. The VNNI and AMX tiles both end here, so
// they round alike.
template <bool PerRowScale, bool Fold, typename S>
inline void store_panel_outputs(const PackedMatrix& w, int64_t p, __m512 acc, const S* scales, const float* group_sum, float* y) {
  const int64_t n0 = p * 16, valid = std::min<int64_t>(16, w.N - n0);
  if constexpr (PerRowScale) acc = _mm512_mul_ps(acc, panel_scales(scales));
  if constexpr (!Fold) {
    const float* negzp = w.negzp.data() + p * w.group_stride * 16;
    __m512 z = _mm512_setzero_ps();
    for (int64_t g = 0; g < w.n_groups; ++g) z = _mm512_fmadd_ps(_mm512_loadu_ps(negzp + g * 16), _mm512_set1_ps(group_sum[g]), z);
    acc = _mm512_add_ps(acc, z);
  }
  _mm512_mask_storeu_ps(y + n0, static_cast<__mmask16>((1u << valid) - 1), acc);
}

}  // namespace
}  // namespace sy_quant
