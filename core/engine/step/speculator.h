// Speculative decoding inside the step: drafts added to decode steps within
// the token budget (as far as the speculation policy says it pays), then
// verified against the target's rows of the same forward (greedy prefix
// match, or rejection sampling with the draft's distribution), the rejected
// drafts' KV rolled back.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/decoder_model.h"
#include "engine/drafter.h"
#include "engine/speculation_policy.h"
#include "engine/step/constrainer.h"
#include "engine/step/sequence.h"
#include "engine/step/step_counters.h"
#include "engine/step/step_plan.h"
#include "plugin_host/components.h"

namespace sy {

class Speculator {
 public:
  // `drafter` is not owned. adaptive_length: the policy chooses each
  // sequence's draft length per step; false: always max_k.
  // trees: the step can verify a drafter's trees (every PagedAttention kernel
  // reads token trees and the KV cache is in host memory); otherwise a
  // drafter that proposes trees is asked for chains.
  Speculator(Drafter& drafter, int32_t max_k, bool adaptive_length, DecoderModel& model, PluginCacheManager& cache,
             Constrainer& constrainer, SequenceEnds& ends, StepCounters& counters, int32_t max_batch_tokens, bool trees);

  // Adds drafts to the plan's decode entries (their tokens grow by them).
  void propose(StepPlan& plan);
  // Whether the step must keep the target's hidden states (Sequence::hidden).
  bool reads_hidden() const { return drafter_.reads_hidden(); }
  // The forward of `tokens` took `ms`: what the policy weighs drafts against.
  void record_step(int32_t tokens, double ms);
  // The tokens a drafted step emits (the accepted drafts and one more),
  // with s's drafts removed, its KV truncated to what was kept (a tree's
  // kept path moved to consecutive slots first) and the drafter told; token
  // j was chosen from row from_rows[j] of s's rows (j for a chain). Empty
  // when s failed (a plugin call threw).
  std::vector<int32_t> verify(Sequence* s, const float* rows, int64_t vocab, std::vector<int64_t>& from_rows);
  // s left the engine.
  void forget(Sequence* s);

 private:
  std::vector<int32_t> judge(Sequence* s, const float* logits, int64_t vocab);
  // A tree's kept path: at each node the target's choice (greedy, or its
  // sample) picks the child that continues. Returns the emitted tokens and
  // the rows they came from; path gets the kept nodes.
  std::vector<int32_t> judge_tree(Sequence* s, const float* logits, int64_t vocab, std::vector<int64_t>& from_rows,
                                  std::vector<int32_t>& path);
  // A drafter's tree for s (at most `depth` deep, `budget` nodes) into d and
  // s's draft_parents; false when it cannot be verified (the fault is
  // counted and named; s decodes plainly this step).
  bool take_tree(Sequence* s, int32_t depth, int32_t budget, std::vector<int32_t>& d);
  // Moves the KV of a kept tree path to the consecutive slots after `base`.
  void compact(Sequence* s, int32_t base, const std::vector<int32_t>& path);
  Drafter& drafter_;
  const int32_t max_k_;
  SpeculationPolicy policy_;
  DecoderModel& model_;
  PluginCacheManager& cache_;
  Constrainer& constrainer_;
  SequenceEnds& ends_;
  StepCounters& counters_;
  const int32_t max_batch_tokens_;
  const bool trees_;
};

}  // namespace sy
