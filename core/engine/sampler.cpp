#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"

namespace sy {

Sampler::Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {
  SY_CHECK(std::isfinite(p.temperature), "temperature must be a finite number");
  SY_CHECK(p.top_k >= 0, "top_k must be >= 0, got " << p.top_k);
  SY_CHECK(p.top_p > 0.f && p.top_p <= 1.f, "top_p must be in (0, 1], got " << p.top_p);
}

int Sampler::argmax(const float* logits, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

int Sampler::sample(const float* logits, int n) {
  if (greedy()) return argmax(logits, n);
  std::vector<double>& p = probs_;
  distribution(logits, n, p);
  return sample_from(p);
}

}  // namespace sy

namespace sy {

void Sampler::distribution(const float* logits, int n, std::vector<double>& p) {
  p.assign(static_cast<size_t>(n), 0.0);
  if (greedy()) {
    p[static_cast<size_t>(argmax(logits, n))] = 1.0;
    return;
  }
  // The same steps as sample(): temperature, top-k, top-p, normalisation.
  scratch_.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) scratch_[static_cast<size_t>(i)] = {logits[i] / p_.temperature, i};
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  size_t keep = static_cast<size_t>(n);
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < keep) keep = static_cast<size_t>(p_.top_k);
  std::partial_sort(scratch_.begin(), scratch_.begin() + static_cast<std::ptrdiff_t>(keep), scratch_.end(), by_logit);
  float m = scratch_[0].first;
  std::vector<double> w(keep);
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += w[i] = std::exp(static_cast<double>(scratch_[i].first - m));
  if (p_.top_p < 1.f) {
    double acc = 0;
    size_t cut = keep;
    for (size_t i = 0; i < keep; ++i) {
      acc += w[i] / total;
      if (acc >= p_.top_p) {
        cut = i + 1;
        break;
      }
    }
    keep = cut;
    total = 0;
    for (size_t i = 0; i < keep; ++i) total += w[i];
  }
  for (size_t i = 0; i < keep; ++i) p[static_cast<size_t>(scratch_[i].second)] = w[i] / total;
}

int Sampler::sample_from(const std::vector<double>& p) {
  double total = 0;
  for (double x : p) total += x;
  SY_CHECK(total > 0, "sampling from an empty distribution");
  double r = std::uniform_real_distribution<double>(0.0, total)(rng_);
  int last = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] <= 0) continue;
    last = static_cast<int>(i);
    r -= p[i];
    if (r < 0) return last;
  }
  return last;
}

double Sampler::uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); }

}  // namespace sy
