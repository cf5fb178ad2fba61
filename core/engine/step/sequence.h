// A request inside the step engine: its tokens, how many of them have KV in
// the cache, its sampler and this step's drafts. Shared by the step's parts
// (engine/step/); nothing outside the step engine sees it.
#pragma once
#include <cstdint>
#include <exception>
#include <future>
#include <string>
#include <vector>

#include "engine/request.h"
#include "engine/sampler.h"

namespace sy {

// Where a sequence is: queued for admission (new, or preempted and to be
// recomputed), running (holding KV in the cache), or finished (its promise
// is set; the engine drops it at the end of the step). The planner keeps
// the waiting and running ones in order; the state says which list.
enum class SeqState { Waiting, Running, Finished };

struct Sequence {
  uint64_t id = 0;
  SeqState state = SeqState::Waiting;
  GenerationRequest req;
  RequestCallbacks callbacks;
  std::promise<GenerationResult> promise;
  std::vector<int32_t> tokens;  // prompt + generated
  int32_t computed = 0;         // tokens whose KV is in the cache
  bool holds_cache = false;  // the cache manager has blocks for it (running, or matched a prefix while being admitted)
  double arrival_ms = 0;
  Sampler sampler{SamplingParams{}};
  GenerationResult result;
  std::vector<int32_t> drafts;               // this step's proposals (appended to tokens)
  std::vector<std::vector<double>> draft_q;  // their draft distributions (empty: point masses)
  // A tree of drafts (1.9): draft i follows draft draft_parents[i], or the
  // last token for -1. Empty: the drafts are a chain.
  std::vector<int32_t> draft_parents;
  // The target's final hidden state at the position whose logits chose the
  // last token (kept only for a drafter that reads hidden states).
  std::vector<float> hidden;
  bool has_drafted = false;                  // the drafter has seen it (its first proposal also catches up on the prompt)
  bool constrained = false;                  // structured output: the token masker began it
  std::vector<uint32_t> masks;               // this step's allowed tokens: a row per sampled position
  bool constraint_done = false;              // the processor accepted a stop token: nothing may follow
  int32_t remaining() const { return static_cast<int32_t>(tokens.size()) - computed; }
  // A step of `step_tokens` for it is a decode step: one token after its
  // first generated one (not a prompt chunk, not a recompute after preemption).
  bool decodes(int32_t step_tokens) const {
    return step_tokens == 1 && !result.tokens.empty() && computed + 1 == static_cast<int32_t>(tokens.size());
  }
  bool finished() const { return state == SeqState::Finished; }
};

// How a part of the step ends a sequence: the step engine's finish (the
// cache released, the masker and drafter told, the result counted and
// delivered). Parts hold a reference; only the engine implements it.
class SequenceEnds {
 public:
  virtual void finish(Sequence* s, FinishReason reason, const std::string& error = {}) = 0;

 protected:
  virtual ~SequenceEnds() = default;
};

// Runs f, a plugin call that concerns only s (its cache allocation, commit,
// release or drafts): if it throws, s fails with the plugin's message and
// the step goes on without it. Returns false then.
template <typename F>
bool contained(SequenceEnds& ends, Sequence* s, F&& f) {
  try {
    f();
    return true;
  } catch (const std::exception& e) {
    ends.finish(s, FinishReason::Error, e.what());
    return false;
  }
}

}  // namespace sy
