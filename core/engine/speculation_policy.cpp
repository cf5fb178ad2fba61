#include "engine/speculation_policy.h"

#include <algorithm>
#include <cmath>

namespace sy {
namespace {
// Weight of a new step-time sample: noise on a shared machine only ever adds
// time (and the first steps pay for warm-up), so a faster sample moves the
// estimate more than a slower one.
constexpr double kFaster = 0.5, kSlower = 0.1;
constexpr double kAcceptDecay = 0.9;  // weight kept by older acceptance counts
// Every this many decisions that stopped short of the most drafts, one draft
// token more than the estimates want: the step size that stopped the policy
// is measured again (an estimate from a slow first step would otherwise stop
// speculation for good). At most one token per this many steps: cheap.
constexpr int64_t kExploreEvery = 32;
constexpr double kTreeWeight = 0.25;   // weight of a new tree's nodes per draft length
double smooth(double old, double sample) { return old + (sample < old ? kFaster : kSlower) * (sample - old); }
}  // namespace

int32_t StepCostModel::bucket(int32_t tokens) {
  if (tokens <= 64) return tokens;
  // Quarter octaves above 64: 64 + 4 * log2(tokens / 64).
  return 64 + static_cast<int32_t>(std::floor(4.0 * std::log2(static_cast<double>(tokens) / 64.0)));
}

void StepCostModel::record(int32_t tokens, double ms) {
  if (tokens <= 0 || !(ms >= 0)) return;
  const auto b = static_cast<size_t>(bucket(tokens));
  if (points_.size() <= b) points_.resize(b + 1);
  Point& p = points_[b];
  if (p.samples == 0) {
    p.tokens = tokens;
    p.ms = ms;
  } else if (p.samples == 1) {  // the first sample of a size often paid for warm-up
    p.tokens = 0.5 * (p.tokens + tokens);
    p.ms = std::min(p.ms, ms);
  } else {
    p.tokens += 0.5 * (tokens - p.tokens);
    p.ms = smooth(p.ms, ms);
  }
  ++p.samples;
}

double StepCostModel::estimate(int32_t tokens) const {
  const Point* below = nullptr;
  const Point* above = nullptr;
  for (const Point& p : points_) {
    if (p.samples < 2) continue;  // not yet trusted
    if (p.tokens <= tokens) below = &p;
    else if (!above) above = &p;
  }
  // Fewer tokens than any measured step: unknown (a step of this size runs
  // without drafts first, and so is measured).
  if (!below) return -1;
  // Beyond every measured size: as the largest until measured (optimistic,
  // so the policy tries it and learns).
  if (!above) return below->ms;
  const double f = (tokens - below->tokens) / (above->tokens - below->tokens);
  return below->ms + f * (above->ms - below->ms);
}

double SpeculationPolicy::rate(const Counts& c, double prior_rate, double prior_weight) {
  return (c.accepted + prior_rate * prior_weight) / (c.accepted + c.rejected + prior_weight);
}

double SpeculationPolicy::acceptance(uint64_t seq) const {
  const double engine = rate(global_);
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? engine : rate(it->second, engine, 2.0);
}

void SpeculationPolicy::record_drafting(int32_t proposed, double ms) {
  // A proposal of nothing (a lookup that found no match) took its time all
  // the same: counted as one token.
  if (!(ms >= 0)) return;
  const double per = ms / std::max(proposed, 1);
  draft_ms_per_token_ = draft_cost_known_ ? smooth(draft_ms_per_token_, per) : per;
  draft_cost_known_ = true;
}

void SpeculationPolicy::record_verification(uint64_t seq, int32_t proposed, int32_t accepted) {
  if (proposed <= 0) return;
  for (Counts* c : {&global_, &seqs_[seq]}) {
    c->accepted = kAcceptDecay * c->accepted + accepted;
    c->rejected = kAcceptDecay * c->rejected + (accepted < proposed ? 1 : 0);
  }
}

void SpeculationPolicy::record_tree(int32_t depth, int32_t nodes) {
  if (depth <= 0 || nodes <= 0) return;
  rows_per_draft_ += kTreeWeight * (static_cast<double>(nodes) / depth - rows_per_draft_);
}

void SpeculationPolicy::explore_one(const std::vector<uint64_t>& seqs, std::vector<int32_t>& k) const {
  // The sequence with the best acceptance among those that drafted before
  // (a drafter has their context already: one more token costs one token);
  // none while no sequence of the step has drafted.
  size_t pick = seqs.size();
  for (size_t i = 0; i < seqs.size(); ++i)
    if (k[i] < max_k_ && seqs_.count(seqs[i]) && (pick == seqs.size() || acceptance(seqs[i]) > acceptance(seqs[pick]))) pick = i;
  if (pick < seqs.size()) ++k[pick];
}

std::vector<int32_t> SpeculationPolicy::draft_lengths(const std::vector<uint64_t>& seqs, int32_t base_tokens, int32_t budget,
                                                     const std::vector<bool>& trees) {
  std::vector<int32_t> k(seqs.size(), 0);
  if (!adaptive_) {
    for (auto& x : k) {
      x = std::clamp(budget, 0, max_k_);
      budget -= x;
    }
    return k;
  }
  const double base_ms = cost_.estimate(base_tokens);
  if (base_ms <= 0) return k;  // nothing measured yet: steps without drafts first
  std::vector<double> a(seqs.size()), next_gain(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) next_gain[i] = a[i] = acceptance(seqs[i]);
  double tokens = static_cast<double>(seqs.size());  // each decoding sequence emits at least one
  double ms = base_ms;
  // A draft token must yield more tokens per ms than the step so far, and
  // more than the same sequences decoding without drafts would (a step that
  // also carries prefill chunks is slow anyway; a draft model's time spent
  // there is still time the batch could have decoded in).
  const double plain_ms = cost_.estimate(static_cast<int32_t>(seqs.size()));
  if (plain_ms <= 0) return k;  // not measured yet: a plain decode step of this batch comes first
  const double plain_rate = static_cast<double>(seqs.size()) / plain_ms;
  int32_t drafted = 0;
  double rows = 0;  // the rows the drafts so far verify (a tree's nodes), each also proposed by the drafter
  const bool explore = ++decisions_ % kExploreEvery == 0;
  // Until the drafter's time is measured (from a sequence's second proposal:
  // a first one also catches a draft model up on the whole context), one
  // sequence drafts, one that drafted before if any: a large batch would
  // otherwise pay every sequence's catch-up before learning that drafting
  // does not pay there.
  const size_t none = seqs.size();
  size_t only = none;
  if (!draft_cost_known_)
    for (size_t i = 0; i < seqs.size(); ++i)
      if (seqs_.count(seqs[i]) && (only == none || next_gain[i] > next_gain[only])) only = i;
  while (drafted < budget) {
    size_t best = none;
    for (size_t i = 0; i < seqs.size(); ++i)
      if (k[i] < max_k_ && (only == none || i == only) && (best == none || next_gain[i] > next_gain[best])) best = i;
    if (best == none) break;
    const double new_rows = rows + (best < trees.size() && trees[best] ? rows_per_draft_ : 1.0);
    const double new_ms = cost_.estimate(base_tokens + static_cast<int32_t>(std::lround(new_rows))) + new_rows * draft_ms_per_token_;
    const double new_tokens = tokens + next_gain[best];
    const double marginal_ms = new_ms - ms;
    const bool pays = marginal_ms <= 0 || next_gain[best] / marginal_ms > std::max(tokens / ms, plain_rate);
    if (!pays) {
      if (explore) explore_one(seqs, k);
      break;
    }
    tokens = new_tokens;
    ms = new_ms;
    rows = new_rows;
    ++k[best];
    ++drafted;
    next_gain[best] *= a[best];
    if (!draft_cost_known_) only = best;
  }
  return k;
}

}  // namespace sy
