#include "engine/step/speculator.h"

#include <algorithm>
#include <chrono>

namespace sy {

Speculator::Speculator(Drafter& drafter, int32_t max_k, bool adaptive_length, DecoderModel& model, PluginCacheManager& cache,
                       Constrainer& constrainer, SequenceEnds& ends, StepCounters& counters, int32_t max_batch_tokens)
    : drafter_(drafter),
      max_k_(std::max(1, max_k)),
      policy_(max_k_, adaptive_length),
      model_(model),
      cache_(cache),
      constrainer_(constrainer),
      ends_(ends),
      counters_(counters),
      max_batch_tokens_(max_batch_tokens) {}

void Speculator::record_step(int32_t tokens, double ms) { policy_.record_step(tokens, ms); }

void Speculator::forget(Sequence* s) {
  policy_.forget(s->id);
  try {
    drafter_.release(s->id);
  } catch (const std::exception& e) {
    counters_.plugin_failure(e.what());
  }
}

void Speculator::propose(StepPlan& plan) {
  int32_t used = plan.tokens();
  // The decoding sequences and how far each may draft at most: never past
  // the request's limits or the model's context.
  std::vector<StepPlan::Entry*> decoding;
  std::vector<int32_t> limit;
  std::vector<uint64_t> ids;
  for (auto& b : plan.entries) {
    Sequence* s = b.seq;
    if (!s->decodes(b.tokens)) continue;
    int32_t room = std::min({max_k_, s->req.max_tokens - static_cast<int32_t>(s->result.tokens.size()) - 1,
                             static_cast<int32_t>(model_.max_context() - static_cast<int64_t>(s->tokens.size())) - 1});
    if (room <= 0) continue;
    decoding.push_back(&b);
    limit.push_back(room);
    ids.push_back(s->id);
  }
  if (decoding.empty()) return;
  // How far speculating pays this step (the policy), within the step budget.
  const std::vector<int32_t> want = policy_.draft_lengths(ids, used, max_batch_tokens_ - used);
  int64_t declined = 0;
  for (size_t i = 0; i < decoding.size(); ++i) {
    StepPlan::Entry& b = *decoding[i];
    Sequence* s = b.seq;
    const int32_t room = std::min({limit[i], want[i], max_batch_tokens_ - used});
    if (room <= 0) {
      declined += want[i] == 0;
      continue;
    }
    std::vector<std::vector<double>> q;
    std::vector<int32_t> d;
    // A failing drafter fails the sequence it drafted for, not the step.
    const auto t0 = std::chrono::steady_clock::now();
    if (!contained(ends_, s, [&] { d = drafter_.propose(s->id, s->tokens, room, s->req.sampling, &q); })) continue;
    // Drafting time per token (after a sequence's first proposal, which also
    // brings a draft model up to date with the prompt).
    if (s->has_drafted)
      policy_.record_drafting(static_cast<int32_t>(d.size()),
                                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    s->has_drafted = true;
    if (d.empty()) continue;
    if (static_cast<int32_t>(d.size()) > room) d.resize(static_cast<size_t>(room));
    // A drafter is a plugin: its proposals are input like any other. An id
    // outside the vocabulary would index past the embedding table; the draft
    // is dropped and the sequence decodes normally (outputs unchanged).
    auto bad = std::find_if(d.begin(), d.end(), [&](int32_t t) { return t < 0 || (model_.vocab_size() >= 0 && t >= model_.vocab_size()); });
    if (bad != d.end()) {
      counters_.update([&](StepEngineMetrics& m) {
        ++m.spec_invalid_drafts;
        m.spec_last_invalid = "drafter proposed token id " + std::to_string(*bad) + ", outside the vocabulary of " +
                              std::to_string(model_.vocab_size()) + "; draft dropped";
      });
      continue;
    }
    const bool well_formed = contained(ends_, s, [&] {
      SY_CHECK_KIND(q.empty() || q.size() >= d.size(), ErrorKind::PluginFailure,
                    "drafter returned " << q.size() << " draft distributions for " << d.size() << " tokens");
      for (const auto& row : q)
        SY_CHECK_KIND(static_cast<int64_t>(row.size()) == model_.vocab_size(), ErrorKind::PluginFailure,
                      "drafter returned a draft distribution over " << row.size() << " tokens; the model's vocabulary has "
                                                                     << model_.vocab_size());
    });
    if (!well_formed) continue;
    if (s->constrained) {
      // Drafts past the first one the constraint refuses could never be accepted.
      int32_t allowed = 0;
      if (!contained(ends_, s, [&] { allowed = constrainer_.constrain_drafts(s, d); })) continue;
      d.resize(static_cast<size_t>(allowed));
      if (d.empty()) continue;  // decodes plainly; its mask is filled with the others'
    }
    bool room_for_drafts = false;
    if (!contained(ends_, s, [&] { room_for_drafts = cache_.allocate(s->id, static_cast<int32_t>(d.size())); })) continue;
    if (!room_for_drafts) continue;  // no room: decode without drafts
    s->drafts = d;
    s->draft_q = std::move(q);
    s->tokens.insert(s->tokens.end(), d.begin(), d.end());
    b.tokens += static_cast<int32_t>(d.size());
    used += static_cast<int32_t>(d.size());
  }
  if (declined > 0) {
    counters_.update([&](StepEngineMetrics& m) { m.spec_declined += declined; });
  }
}

std::vector<int32_t> Speculator::judge(Sequence* s, const float* logits, int64_t V) {
  std::vector<int32_t> out;
  std::vector<double> p;
  const auto n = static_cast<int>(V);
  // Position i is judged as if drafts 0..i-1 had been generated: penalties
  // count them, as plain decoding would have.
  std::vector<int> pending;
  // Structured output: row i is judged under the mask after drafts 0..i-1.
  auto mask_row = [&](size_t i) {
    if (s->constrained) s->sampler.set_mask(constrainer_.mask_row(s, i));
  };
  for (size_t i = 0; i < s->drafts.size(); ++i) {
    const float* row = logits + static_cast<int64_t>(i) * V;
    int32_t d = s->drafts[i];
    mask_row(i);
    if (s->sampler.greedy()) {
      // Greedy: the longest prefix the target would have produced itself.
      int t = s->sampler.greedy_choice(row, n, pending);
      pending.push_back(t);
      out.push_back(t);
      if (t != d) return out;
      continue;
    }
    // Rejection sampling (Leviathan et al.): accept d with probability
    // min(1, p(d) / q(d)); else draw from max(0, p - q), renormalised.
    s->sampler.distribution(row, n, p, pending);
    double qd = s->draft_q.empty() ? 1.0 : s->draft_q[i][static_cast<size_t>(d)];
    if (qd > 0 && s->sampler.uniform() < std::min(1.0, p[static_cast<size_t>(d)] / qd)) {
      out.push_back(d);
      pending.push_back(d);
      continue;
    }
    for (size_t t = 0; t < p.size(); ++t) {
      double qt = s->draft_q.empty() ? (static_cast<int32_t>(t) == d ? 1.0 : 0.0) : s->draft_q[i][t];
      p[t] = std::max(0.0, p[t] - qt);
    }
    out.push_back(s->sampler.sample_from(p));
    return out;
  }
  // Every draft accepted: a bonus token from the last row.
  mask_row(s->drafts.size());
  out.push_back(s->sampler.sample(logits + static_cast<int64_t>(s->drafts.size()) * V, n, pending));
  return out;
}

std::vector<int32_t> Speculator::verify(Sequence* s, const float* rows, int64_t V) {
  const int32_t base = s->computed;  // KV before this step
  std::vector<int32_t> emitted = judge(s, rows, V);
  const auto accepted = static_cast<int32_t>(emitted.size()) - 1;
  s->tokens.resize(s->tokens.size() - s->drafts.size());
  s->computed = base + 1 + accepted;  // the fed token and the accepted drafts
  const auto proposed = static_cast<int32_t>(s->drafts.size());
  s->drafts.clear();
  s->draft_q.clear();
  const bool rolled_back = contained(ends_, s, [&] {
    cache_.truncate(s->id, s->computed);  // rolls the rejected drafts' KV back
    cache_.commit(s->id, s->tokens.data(), std::min<int32_t>(s->computed, static_cast<int32_t>(s->tokens.size())));
    drafter_.accepted(s->id, proposed, accepted);
  });
  policy_.record_verification(s->id, proposed, accepted);
  if (!rolled_back) return {};
  counters_.update([&](StepEngineMetrics& m) {
    ++m.spec_drafts;
    m.spec_draft_tokens += proposed;
    m.spec_accepted_tokens += accepted;
    if (m.spec_accepted_per_pos.size() < static_cast<size_t>(proposed)) m.spec_accepted_per_pos.resize(static_cast<size_t>(proposed));
    for (int32_t pos = 0; pos < accepted; ++pos) ++m.spec_accepted_per_pos[static_cast<size_t>(pos)];
  });
  return emitted;
}

}  // namespace sy
