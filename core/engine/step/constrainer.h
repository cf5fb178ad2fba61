// Structured output in the step: the masks of the constrained sequences
// that sample (filled while the forward runs), drafts walked through the
// processor before the forward (a row per draft position, the draft cut
// where the constraint refuses it, then rolled back, so verification judges
// each position under exactly the mask plain decoding would use there), and
// the processor told of every emitted token.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/step/sequence.h"
#include "engine/step/step_plan.h"
#include "engine/token_masker.h"

namespace sy {

class Constrainer {
 public:
  explicit Constrainer(SequenceEnds& ends) : ends_(ends) {}

  // The processor (not owned; it outlives the engine), or null with the
  // reason constrained requests are refused ("" : none was selected).
  void set(TokenMasker* masker, std::string unavailable) {
    masker_ = masker;
    unavailable_ = std::move(unavailable);
  }
  TokenMasker* masker() const { return masker_; }
  // Throws naming why a request with a constraint cannot be served.
  void check(const GenerationRequest& r) const;
  // Compiles s's constraint (on the submitting thread: a refused one is the
  // caller's error) / lets it go when s leaves the engine. max_context: the
  // model's, which with max_tokens bounds what s may emit (the processor's
  // token budget).
  void begin(Sequence* s, int64_t max_context);
  void end(Sequence* s);

  // The constrained sequences that sample this step without drafts.
  std::vector<Sequence*> undrafted(const StepPlan& plan, const SampledRows& sampled) const;
  // Runs beside the forward: touches only the masks of `seqs`.
  void fill(const std::vector<Sequence*>& seqs);
  // Fills s->masks for each draft position and the one after the last kept
  // draft; returns how many leading drafts the constraint allows.
  int32_t constrain_drafts(Sequence* s, const std::vector<int32_t>& drafts);
  // Tells the processor of an emitted token; false when s finished (the
  // processor failed, or refused a token its own mask allowed).
  bool accept(Sequence* s, int tok);
  // Row i of s's masks (a drafted step: the mask after drafts 0..i-1).
  const uint32_t* mask_row(const Sequence* s, size_t i) const {
    return s->masks.data() + i * static_cast<size_t>(masker_->words_per_row());
  }

 private:
  SequenceEnds& ends_;
  TokenMasker* masker_ = nullptr;
  std::string unavailable_;
};

}  // namespace sy
