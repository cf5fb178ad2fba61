#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "base/error.h"
#include "engine/sampler.h"

namespace sy {
namespace {

const std::vector<float> kLogits = {1.0f, 3.0f, 2.0f, 0.5f, 2.9f};

TEST(Sampler, GreedyIsArgmax) {
  Sampler s(SamplingParams{});
  EXPECT_EQ(s.sample(kLogits.data(), 5), 1);
}

TEST(Sampler, SeedReproduces) {
  SamplingParams p{1.0f, 0, 1.0f, 42};
  Sampler a(p), b(p);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.sample(kLogits.data(), 5), b.sample(kLogits.data(), 5));
}

TEST(Sampler, TopKOneAndTinyTopPAreGreedy) {
  Sampler k1(SamplingParams{1.0f, 1, 1.0f, 7});
  Sampler p(SamplingParams{1.0f, 0, 0.01f, 7});
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(k1.sample(kLogits.data(), 5), 1);
    EXPECT_EQ(p.sample(kLogits.data(), 5), 1);
  }
}

TEST(Sampler, FrequenciesFollowSoftmax) {
  // 20000 draws at temperature 1: each frequency within 4 standard errors.
  Sampler s(SamplingParams{1.0f, 0, 1.0f, 3});
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
  Sampler s(SamplingParams{2.0f, 2, 1.0f, 9});
  for (int i = 0; i < 200; ++i) {
    int t = s.sample(kLogits.data(), 5);
    EXPECT_TRUE(t == 1 || t == 4) << t;
  }
}

TEST(Sampler, RejectsBadParameters) {
  EXPECT_THROW(Sampler(SamplingParams{1.0f, -1, 1.0f, 0}), Error);
  EXPECT_THROW(Sampler(SamplingParams{1.0f, 0, 0.0f, 0}), Error);
  EXPECT_THROW(Sampler(SamplingParams{NAN, 0, 1.0f, 0}), Error);
}

}  // namespace
}  // namespace sy
