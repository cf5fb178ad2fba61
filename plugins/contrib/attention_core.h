// The attention inner loop shared by the contrib attention kernels: one
// query vector against a contiguous run of keys/values of one head, with an
// optional soft-cap and an additive bias, softmax in float.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace sy_contrib {

inline float dot(const float* a, const float* b, int64_t n) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// out[D] = softmax_j(cap(q . k_j * scale) + bias[j]) v_j over j in
// [first, last]; K and V rows are D apart. `bias` may be null; -inf
// entries exclude a key. `scores` is scratch of at least last + 1 floats.
inline void attend(const float* q, const float* K, const float* V, int64_t D, int64_t first, int64_t last, float scale,
                   float softcap, const float* bias, std::vector<float>& scores, float* out) {
  std::fill(out, out + D, 0.f);
  if (last < first) return;
  scores.resize(static_cast<size_t>(last + 1));
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t j = first; j <= last; ++j) {
    float s = dot(q, K + j * D, D) * scale;
    if (softcap > 0.f) s = softcap * std::tanh(s / softcap);
    if (bias) s += bias[j];
    scores[static_cast<size_t>(j)] = s;
    m = std::max(m, s);
  }
  if (m == -std::numeric_limits<float>::infinity()) return;
  float l = 0.f;
  for (int64_t j = first; j <= last; ++j) {
    float w = std::exp(scores[static_cast<size_t>(j)] - m);
    l += w;
    const float* v = V + j * D;
#pragma omp simd
    for (int64_t d = 0; d < D; ++d) out[d] += w * v[d];
  }
  const float inv = 1.f / l;
  for (int64_t d = 0; d < D; ++d) out[d] *= inv;
}

}  // namespace sy_contrib
