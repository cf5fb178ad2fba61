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
  Speculator(Drafter& drafter, int32_t max_k, bool adaptive_length, DecoderModel& model, PluginCacheManager& cache,
             Constrainer& constrainer, SequenceEnds& ends, StepCounters& counters, int32_t max_batch_tokens);

  // Adds drafts to the plan's decode entries (their tokens grow by them).
  void propose(StepPlan& plan);
  // The forward of `tokens` took `ms`: what the policy weighs drafts against.
  void record_step(int32_t tokens, double ms);
  // The tokens a drafted step emits (the accepted drafts and one more, token
  // j chosen from row j), with s's drafts removed, its KV truncated to what
  // was kept and the drafter told. Empty when s failed (a plugin call threw).
  std::vector<int32_t> verify(Sequence* s, const float* rows, int64_t vocab);
  // s left the engine.
  void forget(Sequence* s);

 private:
  std::vector<int32_t> judge(Sequence* s, const float* logits, int64_t vocab);

  Drafter& drafter_;
  const int32_t max_k_;
  SpeculationPolicy policy_;
  DecoderModel& model_;
  PluginCacheManager& cache_;
  Constrainer& constrainer_;
  SequenceEnds& ends_;
  StepCounters& counters_;
  const int32_t max_batch_tokens_;
};

}  // namespace sy
