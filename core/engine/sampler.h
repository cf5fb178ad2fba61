// Token sampling: penalties on what the sequence already holds, then greedy
// or temperature with min-p, top-k and top-p, seeded so a run can be
// reproduced exactly. The same processing serves sampling and speculative
// verification, so drafted tokens are judged against exactly the
// distribution the sequence would have sampled from.
#pragma once
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "model/sampling_defaults.h"

namespace sy {

struct SamplingParams {
  float temperature = 0.f;  // <= 0: greedy (argmax)
  int top_k = 0;            // 0: no limit
  float top_p = 1.f;        // 1: no limit
  float min_p = 0.f;        // 0: off; else drop tokens below min_p * the top probability
  // OpenAI's penalties on generated tokens: logit -= frequency * count +
  // presence * (count > 0). Range [-2, 2]; 0: off.
  float presence_penalty = 0.f;
  float frequency_penalty = 0.f;
  // Hugging Face's (and vLLM's) on prompt and generated tokens: a positive
  // logit is divided by it, a negative one multiplied. 1: off.
  float repetition_penalty = 1.f;
  uint64_t seed = 0;
  // Log-probabilities to report per generated token: -1 none, 0 the chosen
  // token's, k > 0 also the k most likely (OpenAI's top_logprobs, up to 20).
  int logprobs = -1;
  // OpenAI's logit_bias: (token, bias) added to the logits before sampling.
  std::vector<std::pair<int, float>> logit_bias;
  bool penalized() const { return presence_penalty != 0.f || frequency_penalty != 0.f || repetition_penalty != 1.f; }
  bool changes_logits() const { return penalized() || !logit_bias.empty(); }
};

// The log-probability of one generated token and the most likely
// alternatives, from the model's raw logits (log-softmax, before penalties
// and temperature: what OpenAI and vLLM report).
struct TokenLogprobs {
  int token = 0;
  float logprob = 0.f;
  int rank = 1;  // 1 + the number of tokens more likely (vLLM's "rank")
  std::vector<std::pair<int, float>> top;  // most likely first
};
TokenLogprobs token_logprobs(const float* logits, int n, int token, int top);

// Whether a token mask (structured output: bit t % 32 of word t / 32) allows
// token t. The one place the mask layout is read.
inline bool mask_allows(const uint32_t* mask, int t) { return (mask[t >> 5] >> (t & 31)) & 1u; }

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  // The sequence so far: the prompt (repetition penalty) and each generated
  // token as it is accepted (all penalties).
  void set_prompt(const std::vector<int>& prompt);
  void accept(int token);
  // Structured output: the tokens the next call may choose (bit t % 32 of
  // word t / 32), or null for any. Every token outside it gets probability
  // zero in sample, greedy_choice and distribution; the row must stay valid
  // until it is replaced. At least one token must be allowed.
  void set_mask(const uint32_t* mask) { mask_ = mask; }

  // Samples the next token. `pending`: tokens proposed after the accepted
  // ones (speculative drafts before this position), counted as generated.
  int sample(const float* logits, int n, const std::vector<int>& pending = {});
  static int argmax(const float* logits, int n);  // lowest id among ties
  bool greedy() const { return p_.temperature <= 0.f; }
  const SamplingParams& params() const { return p_; }
  // The exact distribution sample() draws from (one-hot at the argmax when
  // greedy): what speculative verification compares draft tokens against.
  void distribution(const float* logits, int n, std::vector<double>& p, const std::vector<int>& pending = {});
  // The penalised argmax (greedy's choice).
  int greedy_choice(const float* logits, int n, const std::vector<int>& pending = {});
  // A draw from an explicit distribution (need not be normalised), and a
  // uniform number in [0, 1), from this sampler's seeded stream.
  int sample_from(const std::vector<double>& p);
  double uniform();

 private:
  // logits with the penalties and the mask applied (the input itself when
  // there are none).
  const float* penalize(const float* logits, int n, const std::vector<int>& pending);

  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int>> scratch_;
  std::vector<double> weights_;  // exp(logit - max) by token id
  std::vector<double> probs_;
  std::vector<float> penalized_;
  std::unordered_map<int, int> generated_;  // token -> times generated
  std::vector<int> prompt_tokens_;          // distinct, sorted
  const uint32_t* mask_ = nullptr;
};

}  // namespace sy
