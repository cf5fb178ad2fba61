// AVX-512 and AVX2 GEMV over dequantized codes with fp32 activations. Built
// with -mavx512f -mavx512bw (and -mavx2 -mfma for the AVX2 file); called only
// when the CPU has them.
#include <immintrin.h>

#include "avx512_common.h"

namespace sy_quant {

namespace {

// Walks a row in 16-element segments in k order, flushing the group's partial
// sum with its scale whenever a group boundary is crossed.
// (The geometry is copied in and the steps forced inline so that the
// accumulators stay in registers in the sanitizer build too.)
struct GroupWalker {
  const int64_t n_groups, group;
  const float* s;
  __m512 acc = _mm512_setzero_ps(), accg = _mm512_setzero_ps();
  int64_t g = 0, next;
  GroupWalker(const PackedMatrix& m, const float* scales)
      : n_groups(m.n_groups), group(m.group), s(scales), next(m.n_groups == 1 ? INT64_MAX : m.group) {}
  [[gnu::always_inline]] inline void at(int64_t k) {
    if (k >= next && g + 1 < n_groups) {
      acc = _mm512_fmadd_ps(accg, _mm512_set1_ps(s[g]), acc);
      accg = _mm512_setzero_ps();
      ++g;
      next += group;
    }
  }
  [[gnu::always_inline]] inline float finish() {
    acc = _mm512_fmadd_ps(accg, _mm512_set1_ps(s[g]), acc);
    return _mm512_reduce_add_ps(acc);
  }
};

}  // namespace

void gemv_avx512(const PackedMatrix& w, const float* x, const float* xsum, float* y, int64_t n0, int64_t n1) {
  const __m512i low = _mm512_set1_epi32(0x0F);
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w.codes.data() + n * w.row_bytes();
    GroupWalker walk(w, w.scales.data() + n * w.group_stride);
    if (w.bits == 8) {
      for (int64_t k = 0; k < w.Kp; k += 16) {
        walk.at(k);
        __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + k))));
        walk.accg = _mm512_fmadd_ps(q, _mm512_loadu_ps(x + k), walk.accg);
      }
    } else {
      for (int64_t c = 0; c < w.Kp / 128; ++c) {
        const uint8_t* bytes = row + c * 64;
        for (int64_t half = 0; half < 2; ++half)
          for (int64_t o = 0; o < 64; o += 16) {
            const int64_t k = c * 128 + half * 64 + o;
            walk.at(k);
            __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + o)));
            v = half ? _mm512_srli_epi32(v, 4) : _mm512_and_si512(v, low);
            walk.accg = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_loadu_ps(x + k), walk.accg);
          }
      }
    }
    float acc = walk.finish();
    acc += zero_point_term(w, n, xsum);
    y[n] = acc;
  }
}

void dequantize_rows_avx512(const PackedMatrix& w, int64_t n0, int64_t n1, float* out) {
  // Segments of 16 codes never straddle a group when the group is a multiple
  // of 16 (or one per row); other geometries take the portable loop.
  if (w.n_groups != 1 && w.group % 16 != 0) return dequantize_rows(w, n0, n1, out);
  const __m512i low = _mm512_set1_epi32(0x0F);
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w.codes.data() + n * w.row_bytes();
    float* o = out + (n - n0) * w.K;
    for (int64_t k = 0; k < w.K; k += 16) {
      const int64_t g = w.n_groups == 1 ? 0 : k / w.group;
      const __m512 s = _mm512_set1_ps(w.scales[static_cast<size_t>(n * w.group_stride + g)]), z = _mm512_set1_ps(w.negzp_at(n, g));
      __m512i q;
      if (w.bits == 8) {
        q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + k)));
      } else {
        const int64_t c = k / 128, j = k % 128;
        q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c * 64 + j % 64)));
        q = j < 64 ? _mm512_and_si512(q, low) : _mm512_srli_epi32(q, 4);
      }
      const __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(q), s, z);
      const int64_t left = w.K - k;
      if (left >= 16) _mm512_storeu_ps(o + k, v);
      else _mm512_mask_storeu_ps(o + k, static_cast<__mmask16>((1u << left) - 1), v);
    }
  }
}

}  // namespace sy_quant
