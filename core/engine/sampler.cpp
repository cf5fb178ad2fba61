#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/error.h"

namespace sy {

TokenLogprobs token_logprobs(const float* logits, int n, int token, int top) {
  float m = logits[0];
  for (int i = 1; i < n; ++i) m = std::max(m, logits[i]);
  double total = 0;
  for (int i = 0; i < n; ++i) total += std::exp(static_cast<double>(logits[i] - m));
  const double log_z = static_cast<double>(m) + std::log(total);
  TokenLogprobs out;
  out.token = token;
  out.logprob = static_cast<float>(logits[token] - log_z);
  for (int i = 0; i < n; ++i) out.rank += logits[i] > logits[token] ? 1 : 0;
  if (top > 0) {
    std::vector<int> ids(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = i;
    const auto k = static_cast<size_t>(std::min(top, n));
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(),
                      [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    for (size_t i = 0; i < k; ++i) out.top.emplace_back(ids[i], static_cast<float>(logits[ids[i]] - log_z));
  }
  return out;
}

Sampler::Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {
  SY_CHECK(std::isfinite(p.temperature), "temperature must be a finite number");
  SY_CHECK(p.top_k >= 0, "top_k must be >= 0, got " << p.top_k);
  SY_CHECK(p.top_p > 0.f && p.top_p <= 1.f, "top_p must be in (0, 1], got " << p.top_p);
  SY_CHECK(p.min_p >= 0.f && p.min_p <= 1.f, "min_p must be in [0, 1], got " << p.min_p);
  SY_CHECK(p.presence_penalty >= -2.f && p.presence_penalty <= 2.f, "presence_penalty must be in [-2, 2], got " << p.presence_penalty);
  SY_CHECK(p.frequency_penalty >= -2.f && p.frequency_penalty <= 2.f, "frequency_penalty must be in [-2, 2], got " << p.frequency_penalty);
  SY_CHECK(p.repetition_penalty > 0.f && std::isfinite(p.repetition_penalty), "repetition_penalty must be > 0, got " << p.repetition_penalty);
  SY_CHECK(p.logprobs >= -1 && p.logprobs <= 20, "logprobs must be in [0, 20], got " << p.logprobs);
  for (const auto& [t, bias] : p.logit_bias)
    SY_CHECK(t >= 0 && bias >= -100.f && bias <= 100.f, "logit_bias: token " << t << " with bias " << bias << " (tokens >= 0, biases in [-100, 100])");
}

void Sampler::set_prompt(const std::vector<int>& prompt) {
  prompt_tokens_ = prompt;
  std::sort(prompt_tokens_.begin(), prompt_tokens_.end());
  prompt_tokens_.erase(std::unique(prompt_tokens_.begin(), prompt_tokens_.end()), prompt_tokens_.end());
}

void Sampler::accept(int token) {
  if (p_.penalized()) ++generated_[token];
}

const float* Sampler::penalize(const float* logits, int n, const std::vector<int>& pending) {
  if (!p_.changes_logits() && !mask_) return logits;
  penalized_.assign(logits, logits + n);
  for (const auto& [t, bias] : p_.logit_bias)
    if (t >= 0 && t < n) penalized_[static_cast<size_t>(t)] += bias;
  if (mask_) {
    for (int t = 0; t < n; ++t)
      if (!mask_allows(mask_, t)) penalized_[static_cast<size_t>(t)] = -std::numeric_limits<float>::infinity();
  }
  if (!p_.penalized()) return penalized_.data();
  std::unordered_map<int, int> counts = generated_;
  for (int t : pending) ++counts[t];
  auto in_range = [n](int t) { return t >= 0 && t < n; };
  if (p_.repetition_penalty != 1.f) {
    auto repeat = [&](int t) {
      float& l = penalized_[static_cast<size_t>(t)];
      l = l > 0 ? l / p_.repetition_penalty : l * p_.repetition_penalty;
    };
    for (int t : prompt_tokens_)
      if (in_range(t)) repeat(t);
    for (const auto& [t, c] : counts)
      if (in_range(t) && !std::binary_search(prompt_tokens_.begin(), prompt_tokens_.end(), t)) repeat(t);
  }
  for (const auto& [t, c] : counts)
    if (in_range(t) && c > 0) penalized_[static_cast<size_t>(t)] -= p_.frequency_penalty * static_cast<float>(c) + p_.presence_penalty;
  return penalized_.data();
}

int Sampler::argmax(const float* logits, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

int Sampler::greedy_choice(const float* logits, int n, const std::vector<int>& pending) { return argmax(penalize(logits, n, pending), n); }

int Sampler::sample(const float* logits, int n, const std::vector<int>& pending) {
  if (greedy()) return greedy_choice(logits, n, pending);
  distribution(logits, n, probs_, pending);
  return sample_from(probs_);
}

void Sampler::distribution(const float* raw, int n, std::vector<double>& p, const std::vector<int>& pending) {
  const float* logits = penalize(raw, n, pending);
  p.assign(static_cast<size_t>(n), 0.0);
  if (greedy()) {
    p[static_cast<size_t>(argmax(logits, n))] = 1.0;
    return;
  }
  // Temperature, top-k, top-p, min-p (Hugging Face's warper order), then
  // normalisation. Only the kept head of the vocabulary needs an order:
  // sorting all of it (49k entries for SmolLM2) cost more per token than a
  // small model's decode step, so the sorted prefix grows only as far as
  // top-p and min-p read it.
  scratch_.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) scratch_[static_cast<size_t>(i)] = {logits[i] / p_.temperature, i};
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  size_t keep = static_cast<size_t>(n), sorted = 0;
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < keep) {
    keep = static_cast<size_t>(p_.top_k);
    std::partial_sort(scratch_.begin(), scratch_.begin() + static_cast<std::ptrdiff_t>(keep), scratch_.end(), by_logit);
    sorted = keep;
  }
  // [0, sorted) holds the largest entries in order; the next ones come from
  // the rest, which holds nothing larger.
  auto sort_at_least = [&](size_t need) {
    if (need <= sorted) return;
    const size_t upto = std::min(keep, std::max(need, std::max<size_t>(2 * sorted, 64)));
    std::partial_sort(scratch_.begin() + static_cast<std::ptrdiff_t>(sorted), scratch_.begin() + static_cast<std::ptrdiff_t>(upto),
                      scratch_.end(), by_logit);
    sorted = upto;
  };
  float m = sorted > 0 ? scratch_[0].first : -std::numeric_limits<float>::infinity();
  if (sorted == 0)
    for (const auto& e : scratch_) m = std::max(m, e.first);
  // exp once per token, by token id (the sort moves scratch_'s entries).
  weights_.resize(static_cast<size_t>(n));
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += weights_[static_cast<size_t>(scratch_[i].second)] = std::exp(static_cast<double>(scratch_[i].first - m));
  auto weight = [&](size_t i) { return weights_[static_cast<size_t>(scratch_[i].second)]; };
  if (p_.top_p < 1.f) {
    double acc = 0;
    size_t cut = keep;
    for (size_t i = 0; i < keep; ++i) {
      sort_at_least(i + 1);
      acc += weight(i) / total;
      if (acc >= p_.top_p) {
        cut = i + 1;
        break;
      }
    }
    keep = cut;
    total = 0;
    for (size_t i = 0; i < keep; ++i) total += weight(i);
  }
  if (p_.min_p > 0.f) {
    // The most likely token's weight is exp(0) = 1: keep those within min_p of it.
    sort_at_least(1);
    size_t cut = 1;
    for (; cut < keep; ++cut) {
      sort_at_least(cut + 1);
      if (weight(cut) / total < static_cast<double>(p_.min_p) * (weight(0) / total)) break;
    }
    keep = cut;
    total = 0;
    for (size_t i = 0; i < keep; ++i) total += weight(i);
  }
  for (size_t i = 0; i < keep; ++i) p[static_cast<size_t>(scratch_[i].second)] = weight(i) / total;
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
