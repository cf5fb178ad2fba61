#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "base/error.h"
#include "engine/sampler.h"

namespace sy {
namespace {

const std::vector<float> kLogits = {1.0f, 3.0f, 2.0f, 0.5f, 2.9f};

SamplingParams params(float temperature, int top_k, float top_p, uint64_t seed) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.seed = seed;
  return p;
}

// OpenAI: logit[j] -= frequency * count[j] + presence * (count[j] > 0), on
// the tokens generated so far; at temperature 1 the distribution is the
// softmax of those logits.
TEST(Sampler, PresenceAndFrequencyPenaltiesFollowOpenAI) {
  SamplingParams sp = params(1.0f, 0, 1.0f, 1);
  sp.presence_penalty = 0.5f;
  sp.frequency_penalty = 0.25f;
  Sampler s(sp);
  s.set_prompt({1, 1, 1});  // the prompt does not count for these two
  s.accept(1);
  s.accept(1);
  s.accept(4);
  std::vector<double> p;
  s.distribution(kLogits.data(), 5, p);
  std::vector<double> want(5);
  std::vector<float> l = kLogits;
  l[1] -= 0.25f * 2 + 0.5f;
  l[4] -= 0.25f * 1 + 0.5f;
  double z = 0;
  for (float x : l) z += std::exp(static_cast<double>(x));
  for (size_t i = 0; i < 5; ++i) EXPECT_NEAR(p[i], std::exp(static_cast<double>(l[i])) / z, 1e-9) << i;
  // Pending tokens (speculative drafts before this position) count too.
  std::vector<double> with_pending;
  s.distribution(kLogits.data(), 5, with_pending, {2});
  EXPECT_LT(with_pending[2], p[2]);
}

// Hugging Face: a positive logit of a token in the prompt or the output is
// divided by the penalty, a negative one multiplied; greedy sees it too.
TEST(Sampler, RepetitionPenaltyCoversPromptAndOutput) {
  SamplingParams sp;
  sp.repetition_penalty = 2.0f;
  Sampler s(sp);
  const std::vector<float> logits = {-1.0f, 3.0f, 2.0f, 0.5f, 2.9f};
  EXPECT_EQ(s.greedy_choice(logits.data(), 5), 1);
  s.set_prompt({1});  // 3.0 -> 1.5: token 4 (2.9) wins
  EXPECT_EQ(s.greedy_choice(logits.data(), 5), 4);
  s.accept(4);  // 2.9 -> 1.45: token 2 (2.0) wins
  EXPECT_EQ(s.greedy_choice(logits.data(), 5), 2);
  EXPECT_EQ(s.sample(logits.data(), 5), 2);
}

TEST(Sampler, MinPDropsTokensFarBelowTheTop) {
  SamplingParams sp = params(1.0f, 0, 1.0f, 5);
  sp.min_p = 0.5f;  // keep tokens with p >= 0.5 * p(top): logits within ln 2 of the top
  Sampler s(sp);
  std::vector<double> p;
  s.distribution(kLogits.data(), 5, p);
  EXPECT_GT(p[1], 0);
  EXPECT_GT(p[4], 0);  // 2.9: within ln 2 of 3.0
  EXPECT_EQ(p[2], 0);  // 2.0: more than ln 2 below
  EXPECT_EQ(p[0], 0);
  EXPECT_NEAR(p[1] + p[4], 1.0, 1e-12);
}

TEST(Sampler, LogprobsAreTheLogSoftmaxOfTheRawLogits) {
  TokenLogprobs lp = token_logprobs(kLogits.data(), 5, 2, 3);
  double z = 0;
  for (float x : kLogits) z += std::exp(static_cast<double>(x));
  EXPECT_NEAR(lp.logprob, 2.0 - std::log(z), 1e-6);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].first, 1);
  EXPECT_EQ(lp.top[1].first, 4);
  EXPECT_EQ(lp.top[2].first, 2);
  EXPECT_NEAR(lp.top[1].second, 2.9 - std::log(z), 1e-6);
}

TEST(Sampler, RejectsPenaltiesOutOfRange) {
  SamplingParams sp;
  sp.presence_penalty = 2.5f;
  EXPECT_THROW(Sampler{sp}, Error);
  sp = SamplingParams{};
  sp.repetition_penalty = 0.f;
  EXPECT_THROW(Sampler{sp}, Error);
  sp = SamplingParams{};
  sp.min_p = 1.5f;
  EXPECT_THROW(Sampler{sp}, Error);
  sp = SamplingParams{};
  sp.logprobs = 21;
  EXPECT_THROW(Sampler{sp}, Error);
}

TEST(Sampler, GreedyIsArgmax) {
  Sampler s(SamplingParams{});
  EXPECT_EQ(s.sample(kLogits.data(), 5), 1);
}

TEST(Sampler, SeedReproduces) {
  SamplingParams p = params(1.0f, 0, 1.0f, 42);
  Sampler a(p), b(p);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.sample(kLogits.data(), 5), b.sample(kLogits.data(), 5));
}

TEST(Sampler, TopKOneAndTinyTopPAreGreedy) {
  Sampler k1(params(1.0f, 1, 1.0f, 7));
  Sampler p(params(1.0f, 0, 0.01f, 7));
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(k1.sample(kLogits.data(), 5), 1);
    EXPECT_EQ(p.sample(kLogits.data(), 5), 1);
  }
}

TEST(Sampler, FrequenciesFollowSoftmax) {
  // 20000 draws at temperature 1: each frequency within 4 standard errors.
  Sampler s(params(1.0f, 0, 1.0f, 3));
  std::map<int, int> counts;
  const int n = 20000;
  for (int i = 0; i < n; ++i) ++counts[s.sample(kLogits.data(), 5)];
  double z = 0;
  for (float l : kLogits) z += std::exp(l);
  for (int i = 0; i < 5; ++i) {
    double p = std::exp(kLogits[static_cast<size_t>(i)]) / z;
    double se = std::sqrt(p * (1 - p) / n);
    EXPECT_NEAR(counts[i] / static_cast<double>(n), p, 4 * se) << "token " << i;
  }
}

TEST(Sampler, TopKExcludesTheRest) {
  Sampler s(params(2.0f, 2, 1.0f, 9));
  for (int i = 0; i < 200; ++i) {
    int t = s.sample(kLogits.data(), 5);
    EXPECT_TRUE(t == 1 || t == 4) << t;
  }
}

TEST(Sampler, RejectsBadParameters) {
  EXPECT_THROW(Sampler(params(1.0f, -1, 1.0f, 0)), Error);
  EXPECT_THROW(Sampler(params(1.0f, 0, 0.0f, 0)), Error);
  EXPECT_THROW(Sampler(params(NAN, 0, 1.0f, 0)), Error);
}

}  // namespace
}  // namespace sy
