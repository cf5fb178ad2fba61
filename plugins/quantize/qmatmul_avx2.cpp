// AVX2 + FMA GEMV over dequantized codes with fp32 activations (8 lanes).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "avx2_common.h"
#include "qmatmul.h"

namespace sy_quant {

namespace {

inline __m256i load8_u8_as_i32(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

}  // namespace

void gemv_avx2(const PackedMatrix& w, const float* x, const float* xsum, float* y, int64_t n0, int64_t n1) {
  const __m256i low = _mm256_set1_epi32(0x0F);
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w.codes.data() + n * w.row_bytes();
    const float* s = w.scales.data() + n * w.group_stride;
    __m256 acc = _mm256_setzero_ps(), accg = _mm256_setzero_ps();
    int64_t g = 0, next = w.n_groups == 1 ? INT64_MAX : w.group;
    auto at = [&](int64_t k) {
      if (k >= next && g + 1 < w.n_groups) {
        acc = _mm256_fmadd_ps(accg, _mm256_set1_ps(s[g]), acc);
        accg = _mm256_setzero_ps();
        ++g;
        next += w.group;
      }
    };
    if (w.bits == 8) {
      for (int64_t k = 0; k < w.Kp; k += 8) {
        at(k);
        accg = _mm256_fmadd_ps(_mm256_cvtepi32_ps(load8_u8_as_i32(row + k)), _mm256_loadu_ps(x + k), accg);
      }
    } else {
      for (int64_t c = 0; c < w.Kp / 128; ++c) {
        const uint8_t* bytes = row + c * 64;
        for (int64_t half = 0; half < 2; ++half)
          for (int64_t o = 0; o < 64; o += 8) {
            const int64_t k = c * 128 + half * 64 + o;
            at(k);
            __m256i v = load8_u8_as_i32(bytes + o);
            v = half ? _mm256_srli_epi32(v, 4) : _mm256_and_si256(v, low);
            accg = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), _mm256_loadu_ps(x + k), accg);
          }
      }
    }
    acc = _mm256_fmadd_ps(accg, _mm256_set1_ps(s[g]), acc);
    float total = hsum(acc);
    const size_t base = static_cast<size_t>(n * w.group_stride);
    total += w.negzp.empty() ? -w.symmetric_zero_point * dot(w.scales.data() + base, xsum, w.n_groups) : dot(w.negzp.data() + base, xsum, w.n_groups);
    y[n] = total;
  }
}

void dequantize_rows_avx2(const PackedMatrix& w, int64_t n0, int64_t n1, float* out) {
  // Segments of 8 codes never straddle a group when the group is a multiple
  // of 8 (or one per row); other geometries take the portable loop.
  if (w.n_groups != 1 && w.group % 8 != 0) return dequantize_rows(w, n0, n1, out);
  // A group's scale and zero point are looked up once per group, not once
  // per 8 codes: that lookup divided by the group size each time, and cost
  // the int4 prefill GEMM 8% on Zen 2 (bench_qmatmul, docs/design-notes.md).
  const __m256i low = _mm256_set1_epi32(0x0F);
  const int64_t group = w.n_groups == 1 ? w.K : w.group;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w.codes.data() + n * w.row_bytes();
    float* o = out + (n - n0) * w.K;
    for (int64_t g = 0; g < w.n_groups; ++g) {
      const int64_t k0 = g * group, k1 = std::min(w.K, k0 + group);
      const float scale = w.scales[static_cast<size_t>(n * w.group_stride + g)], zero = w.negzp_at(n, g);
      const __m256 s = _mm256_set1_ps(scale), z = _mm256_set1_ps(zero);
      int64_t k = k0;
      for (; k + 8 <= k1; k += 8) {
        __m256i q;
        if (w.bits == 8) {
          q = load8_u8_as_i32(row + k);
        } else {
          // Chunk k / 128's 64 bytes: codes 0-63 low nibbles, 64-127 high.
          q = load8_u8_as_i32(row + (k / 128) * 64 + k % 64);
          q = k % 128 < 64 ? _mm256_and_si256(q, low) : _mm256_srli_epi32(q, 4);
        }
        _mm256_storeu_ps(o + k, _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), s, z));
      }
      for (; k < k1; ++k) o[k] = static_cast<float>(w.code(n, k)) * scale + zero;  // the row's last few codes
    }
  }
}

}  // namespace sy_quant
