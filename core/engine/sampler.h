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
  bool greedy() const { return p_.temperature <= 0.f; }
  // The exact distribution sample() draws from (one-hot at the argmax when
  // greedy): what speculative verification compares draft tokens against.
  void distribution(const float* logits, int n, std::vector<double>& p);
  // A draw from an explicit distribution (need not be normalised), and a
  // uniform number in [0, 1), from this sampler's seeded stream.
  int sample_from(const std::vector<double>& p);
  double uniform();

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int>> scratch_;
  std::vector<double> probs_;
};

}  // namespace sy
