// Rotary position embedding of one head vector, shared by the contrib
// kernels (GroupQueryAttention with do_rotary, RotaryEmbedding).
#pragma once
#include <cstdint>

namespace sy_contrib {

// Rotates the first `rotary_dim` values of x (one head) for position `pos`,
// reading cos/sin rows of width rotary_dim / 2. Non-interleaved: the two
// halves (x[i], x[i + rd/2]) form pairs; interleaved: (x[2i], x[2i+1]).
inline void rotate(float* x, int64_t pos, const float* cos_cache, const float* sin_cache, int64_t rotary_dim,
                   bool interleaved) {
  const int64_t half = rotary_dim / 2;
  const float* c = cos_cache + pos * half;
  const float* s = sin_cache + pos * half;
  for (int64_t i = 0; i < half; ++i) {
    const int64_t a = interleaved ? 2 * i : i;
    const int64_t b = interleaved ? 2 * i + 1 : i + half;
    const float x1 = x[a], x2 = x[b];
    x[a] = x1 * c[i] - x2 * s[i];
    x[b] = x2 * c[i] + x1 * s[i];
  }
}

}  // namespace sy_contrib
