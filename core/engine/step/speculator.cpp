#include "engine/step/speculator.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace sy {

namespace {
// A tree of drafts may hold this many alternatives of the policy's chain.
constexpr int32_t kTreeWidth = 4;
}  // namespace

Speculator::Speculator(Drafter& drafter, int32_t max_k, bool adaptive_length, DecoderModel& model, PluginCacheManager& cache,
                       Constrainer& constrainer, SequenceEnds& ends, StepCounters& counters, int32_t max_batch_tokens, bool trees)
    : drafter_(drafter),
      max_k_(std::max(1, max_k)),
      policy_(max_k_, adaptive_length),
      model_(model),
      cache_(cache),
      constrainer_(constrainer),
      ends_(ends),
      counters_(counters),
      max_batch_tokens_(max_batch_tokens),
      trees_(trees && drafter.proposes_trees()) {}

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
  std::vector<bool> trees;  // whose drafts come as trees (structured output checks chains)
  for (auto& b : plan.entries) {
    Sequence* s = b.seq;
    if (!s->decodes(b.tokens)) continue;
    int32_t room = std::min({max_k_, s->req.max_tokens - static_cast<int32_t>(s->result.tokens.size()) - 1,
                             static_cast<int32_t>(model_.max_context() - static_cast<int64_t>(s->tokens.size())) - 1});
    if (room <= 0) continue;
    decoding.push_back(&b);
    limit.push_back(room);
    ids.push_back(s->id);
    trees.push_back(trees_ && !s->constrained);
  }
  if (decoding.empty()) return;
  // How far speculating pays this step (the policy), within the step budget.
  const std::vector<int32_t> want = policy_.draft_lengths(ids, used, max_batch_tokens_ - used, trees);
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
    const bool tree = trees[i];
    s->draft_parents.clear();
    // A drafter that reads hidden states drafts once the target has chosen a
    // token here (not on a sequence that arrived with its KV computed).
    if (drafter_.reads_hidden()) {
      if (s->hidden.empty()) continue;
      if (!contained(ends_, s, [&] { drafter_.hidden_state(s->id, s->hidden.data(), static_cast<int64_t>(s->hidden.size())); })) continue;
    }
    if (tree) {
      bool ok = false;
      if (!contained(ends_, s, [&] { ok = take_tree(s, room, max_batch_tokens_ - used, d); })) continue;
      if (!ok) continue;
      policy_.record_tree(room, static_cast<int32_t>(d.size()));
    } else if (!contained(ends_, s, [&] { d = drafter_.propose(s->id, s->tokens, room, s->req.sampling, &q); })) {
      continue;
    }
    // Drafting time per token (after a sequence's first proposal, which also
    // brings a draft model up to date with the prompt).
    if (s->has_drafted)
      policy_.record_drafting(static_cast<int32_t>(d.size()),
                                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    s->has_drafted = true;
    if (d.empty()) continue;
    // (A tree was cut to `room` deep already; its nodes may be more.)
    if (!tree && static_cast<int32_t>(d.size()) > room) d.resize(static_cast<size_t>(room));
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
    if (!room_for_drafts) {  // no room: decode without drafts
      s->draft_parents.clear();
      continue;
    }
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

bool Speculator::take_tree(Sequence* s, int32_t depth, int32_t budget, std::vector<int32_t>& d) {
  // The tree may hold kTreeWidth alternatives of the chain the policy chose
  // (`depth` tokens), within the step's token budget; nodes deeper than
  // `depth` are cut off (they would pass the request's limits).
  const int32_t room = std::min(depth * kTreeWidth, budget);
  DraftTreeProposal t = drafter_.propose_tree(s->id, s->tokens, room);
  // A drafter is a plugin: its tree is input like any other. One the step
  // cannot verify is dropped, its fault counted and named.
  std::string fault;
  const int64_t V = model_.vocab_size();
  if (t.count < 0 || t.count > room) {
    fault = "proposed a tree of " + std::to_string(t.count) + " nodes, more than the " + std::to_string(room) + " asked for";
  } else {
    for (int32_t i = 0; i < t.count && fault.empty(); ++i) {
      const int32_t p = t.parents[static_cast<size_t>(i)], tok = t.tokens[static_cast<size_t>(i)];
      if (p < -1 || p >= i) fault = "tree node " + std::to_string(i) + " follows node " + std::to_string(p) + ", not an earlier node";
      else if (tok < 0 || (V >= 0 && tok >= V))
        fault = "tree node " + std::to_string(i) + " proposes token id " + std::to_string(tok) + ", outside the vocabulary of " + std::to_string(V);
    }
  }
  if (!fault.empty()) {
    counters_.update([&](StepEngineMetrics& m) {
      ++m.spec_invalid_drafts;
      m.spec_last_invalid = drafter_.label() + " " + fault + "; draft dropped";
    });
    return false;
  }
  // Keep the nodes within `depth` (a kept node's parent is kept: it is shallower).
  std::vector<int32_t> node_depth, index(static_cast<size_t>(t.count), -1), parents;
  for (int32_t i = 0; i < t.count; ++i) {
    const int32_t p = t.parents[static_cast<size_t>(i)];
    node_depth.push_back(p < 0 ? 1 : node_depth[static_cast<size_t>(p)] + 1);
    if (node_depth.back() > depth) continue;
    index[static_cast<size_t>(i)] = static_cast<int32_t>(d.size());
    d.push_back(t.tokens[static_cast<size_t>(i)]);
    parents.push_back(p < 0 ? -1 : index[static_cast<size_t>(p)]);
  }
  bool chain = true;
  for (size_t i = 0; i < parents.size(); ++i) chain = chain && parents[i] == static_cast<int32_t>(i) - 1;
  // A chain verifies as one (the same rows and bits as propose's drafts).
  if (!chain) s->draft_parents = std::move(parents);
  return true;
}

std::vector<int32_t> Speculator::judge_tree(Sequence* s, const float* logits, int64_t V, std::vector<int64_t>& from_rows,
                                            std::vector<int32_t>& path) {
  std::vector<int32_t> out;
  std::vector<int> pending;
  const auto n = static_cast<int>(V);
  // Row 0 is the fed token's; row 1 + i node i's. At each row the target's
  // own choice is emitted, and continues down the child that proposed it.
  int64_t row = 0;
  for (;;) {
    const float* r = logits + row * V;
    const int t = s->sampler.greedy() ? s->sampler.greedy_choice(r, n, pending) : s->sampler.sample(r, n, pending);
    out.push_back(t);
    from_rows.push_back(row);
    pending.push_back(t);
    const int32_t parent = static_cast<int32_t>(row) - 1;  // the node whose children come next (-1: the root)
    int32_t next = -1;
    for (size_t i = 0; i < s->drafts.size() && next < 0; ++i)
      if (s->draft_parents[i] == parent && s->drafts[i] == t) next = static_cast<int32_t>(i);
    if (next < 0) return out;
    path.push_back(next);
    row = 1 + next;
  }
}

void Speculator::compact(Sequence* s, int32_t base, const std::vector<int32_t>& path) {
  const std::vector<int32_t> table = cache_.block_table(s->id);
  for (size_t k = 0; k < path.size(); ++k) {
    const int64_t from = base + 1 + path[k], to = base + 1 + static_cast<int64_t>(k);
    if (from == to) continue;
    for (int32_t l = 0; l < model_.num_layers(); ++l) {
      const auto [kt, vt] = cache_.storage(l);
      for (const sy_tensor* t : {&kt, &vt}) {
        const int64_t KVH = t->dims[1], BS = t->dims[2];
        const size_t row = static_cast<size_t>(t->dims[3]) * dtype_size(static_cast<DType>(t->dtype));
        auto at = [&](int64_t slot, int64_t g) {
          return static_cast<char*>(t->data) + static_cast<size_t>((table[static_cast<size_t>(slot / BS)] * KVH + g) * BS + slot % BS) * row;
        };
        for (int64_t g = 0; g < KVH; ++g) std::memcpy(at(to, g), at(from, g), row);
      }
    }
  }
}

std::vector<int32_t> Speculator::verify(Sequence* s, const float* rows, int64_t V, std::vector<int64_t>& from_rows) {
  const int32_t base = s->computed;  // KV before this step
  from_rows.clear();
  std::vector<int32_t> path;  // a tree's kept nodes
  std::vector<int32_t> emitted;
  const bool tree = !s->draft_parents.empty();
  if (tree) {
    emitted = judge_tree(s, rows, V, from_rows, path);
  } else {
    emitted = judge(s, rows, V);
    for (size_t j = 0; j < emitted.size(); ++j) from_rows.push_back(static_cast<int64_t>(j));
  }
  const auto accepted = static_cast<int32_t>(emitted.size()) - 1;
  // What verification saw, for drafters that learn from it: the target's
  // greedy next token after the last token and after each proposal.
  std::vector<int32_t> target_next;
  if (drafter_.observes())
    for (size_t r = 0; r <= s->drafts.size(); ++r) target_next.push_back(Sampler::argmax(rows + static_cast<int64_t>(r) * V, static_cast<int>(V)));
  const std::vector<int32_t> proposals = s->drafts, proposal_parents = s->draft_parents;
  s->tokens.resize(s->tokens.size() - s->drafts.size());
  s->computed = base + 1 + accepted;  // the fed token and the accepted drafts
  const auto proposed = static_cast<int32_t>(s->drafts.size());
  s->drafts.clear();
  s->draft_q.clear();
  s->draft_parents.clear();
  const bool rolled_back = contained(ends_, s, [&] {
    if (tree) compact(s, base, path);     // the kept path's KV to consecutive slots
    cache_.truncate(s->id, s->computed);  // rolls the rejected drafts' KV back
    cache_.commit(s->id, s->tokens.data(), std::min<int32_t>(s->computed, static_cast<int32_t>(s->tokens.size())));
    if (!target_next.empty()) drafter_.observe(s->id, proposals, proposal_parents, target_next);
    drafter_.accepted(s->id, proposed, accepted);
  });
  policy_.record_verification(s->id, proposed, accepted);
  if (!rolled_back) return {};
  counters_.update([&](StepEngineMetrics& m) {
    ++m.spec_drafts;
    m.spec_tree_drafts += tree;
    m.spec_draft_tokens += proposed;
    m.spec_accepted_tokens += accepted;
    if (m.spec_accepted_per_pos.size() < static_cast<size_t>(proposed)) m.spec_accepted_per_pos.resize(static_cast<size_t>(proposed));
    for (int32_t pos = 0; pos < accepted; ++pos) ++m.spec_accepted_per_pos[static_cast<size_t>(pos)];
  });
  return emitted;
}

}  // namespace sy
