// Token sampling: greedy, temperature, top-k and top-p (nucleus), seeded so a
// run can be reproduced exactly.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace sy {

struct SamplingParams {
  float temperature = 0.f;  // <= 0: greedy (argmax)
  int top_k = 0;            // 0: no limit
  float top_p = 1.f;        // 1: no limit
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  int sample(const float* logits, int n);
  static int argmax(const float* logits, int n);  // lowest id among ties

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int>> scratch_;
};

}  // namespace sy
