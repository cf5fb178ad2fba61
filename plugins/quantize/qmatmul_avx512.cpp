// AVX-512 and AVX2 GEMV over dequantized codes with fp32 activations. Built
// with -mavx512f -mavx512bw (and -mavx2 -mfma for the AVX2 file); called only
// when the CPU has them.
#include <immintrin.h>

#include "qmatmul.h"

namespace sy_quant {

namespace {

// Walks a row in 16-element segments in k order, flushing the group's partial
// sum with its scale whenever a group boundary is crossed.
struct GroupWalker {
  const PackedMatrix& w;
  const float* s;
  __m512 acc = _mm512_setzero_ps(), accg = _mm512_setzero_ps();
  int64_t g = 0, next;
  GroupWalker(const PackedMatrix& m, const float* scales) : w(m), s(scales), next(m.n_groups == 1 ? INT64_MAX : m.group) {}
  inline void at(int64_t k) {
    if (k >= next && g + 1 < w.n_groups) {
      acc = _mm512_fmadd_ps(accg, _mm512_set1_ps(s[g]), acc);
      accg = _mm512_setzero_ps();
      ++g;
      next += w.group;
    }
  }
  inline float finish() {
    acc = _mm512_fmadd_ps(accg, _mm512_set1_ps(s[g]), acc);
    return _mm512_reduce_add_ps(acc);
  }
};

}  // namespace

void gemv_avx512(const PackedMatrix& w, const float* x, const float* xsum, float* y, int64_t n0, int64_t n1) {
  const __m512i low = _mm512_set1_epi32(0x0F);
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w.codes.data() + n * w.row_bytes();
    GroupWalker walk(w, w.scales.data() + n * w.n_groups);
    if (w.bits == 8) {
      for (int64_t k = 0; k < w.Kp; k += 16) {
        walk.at(k);
        __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + k))));
        walk.accg = _mm512_fmadd_ps(q, _mm512_loadu_ps(x + k), walk.accg);
      }
    } else {
      for (int64_t c = 0; c < w.Kp / 64; ++c) {
        const uint8_t* bytes = row + c * 32;
        for (int64_t half = 0; half < 2; ++half)
          for (int64_t o = 0; o < 32; o += 16) {
            const int64_t k = c * 64 + half * 32 + o;
            walk.at(k);
            __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + o)));
            v = half ? _mm512_srli_epi32(v, 4) : _mm512_and_si512(v, low);
            walk.accg = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_loadu_ps(x + k), walk.accg);
          }
      }
    }
    float acc = walk.finish();
    const float* z = w.negzp.data() + n * w.n_groups;
    for (int64_t g = 0; g < w.n_groups; ++g) acc += z[g] * xsum[g];
    y[n] = acc;
  }
}

}  // namespace sy_quant
