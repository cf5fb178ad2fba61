#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
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

// The distribution Hugging Face's warpers define, written out independently:
// logits / temperature, softmax; keep the top_k most likely; then the fewest
// most likely whose probability (renormalised over those kept) reaches top_p.
std::vector<double> filtered_softmax(const std::vector<float>& logits, float temperature, int top_k, float top_p) {
  const size_t n = logits.size();
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return logits[a] > logits[b]; });
  size_t keep = top_k > 0 ? std::min(n, static_cast<size_t>(top_k)) : n;
  auto weights = [&](size_t k) {
    std::vector<double> w(n, 0.0);
    double z = 0;
    for (size_t r = 0; r < k; ++r) z += w[order[r]] = std::exp(static_cast<double>(logits[order[r]]) / temperature);
    for (double& v : w) v /= z;
    return w;
  };
  std::vector<double> w = weights(keep);
  double acc = 0;
  for (size_t r = 0; r < keep; ++r) {
    acc += w[order[r]];
    if (acc >= top_p - 1e-12) {
      keep = r + 1;
      break;
    }
  }
  return weights(keep);
}

TEST(Sampler, FrequenciesFollowTheFilteredDistributionAtEachTemperatureTopKAndTopP) {
  // 30000 draws per setting against the exact filtered distribution:
  // excluded tokens never drawn, the rest within a chi-square test at 0.1%.
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.5f, 2.9f, -1.0f, 1.7f, 2.2f, 0.1f, 2.6f, -0.4f, 1.2f};
  struct Setting {
    float temperature;
    int top_k;
    float top_p;
  };
  for (const Setting& st : {Setting{0.7f, 3, 1.0f}, Setting{1.3f, 0, 0.8f}, Setting{1.0f, 6, 0.9f}, Setting{0.5f, 0, 0.95f},
                            Setting{2.0f, 8, 0.6f}}) {
    const std::vector<double> expected = filtered_softmax(logits, st.temperature, st.top_k, st.top_p);
    Sampler s(params(st.temperature, st.top_k, st.top_p, 12));
    const int n = 30000;
    std::vector<int> counts(logits.size(), 0);
    for (int i = 0; i < n; ++i) ++counts[static_cast<size_t>(s.sample(logits.data(), static_cast<int>(logits.size())))];
    double chi = 0;
    int support = 0;
    for (size_t t = 0; t < logits.size(); ++t) {
      if (expected[t] == 0) {
        EXPECT_EQ(counts[t], 0) << "token " << t << " is filtered out at temperature " << st.temperature << ", top_k "
                                << st.top_k << ", top_p " << st.top_p;
        continue;
      }
      ++support;
      const double e = expected[t] * n;
      chi += (counts[t] - e) * (counts[t] - e) / e;
    }
    const int df = support - 1;
    ASSERT_GE(df, 1);
    const double h = 2.0 / (9.0 * df), crit = df * std::pow(1 - h + 3.0902 * std::sqrt(h), 3);
    std::printf("[ temperature %.1f, top-k %d, top-p %.2f ] %d tokens kept, chi-square %.1f on %d df (critical %.1f)\n",
                st.temperature, st.top_k, st.top_p, support, chi, df, crit);
    EXPECT_LT(chi, crit);
  }
}

TEST(Sampler, RejectsBadParameters) {
  EXPECT_THROW(Sampler(params(1.0f, -1, 1.0f, 0)), Error);
  EXPECT_THROW(Sampler(params(1.0f, 0, 0.0f, 0)), Error);
  EXPECT_THROW(Sampler(params(NAN, 0, 1.0f, 0)), Error);
}

}  // namespace
}  // namespace sy
