// Structured output in the step engine: the masks of the constrained
// sequences that sample in a step, and the processor told of every emitted
// token. Drafts are walked through the processor before the forward (a row
// per draft position, the draft cut where the constraint refuses it) and
// rolled back, so verification judges each position against exactly the
// mask plain constrained decoding would have used there.
#include "engine/step_sequence.h"

namespace sy {

std::vector<StepEngine::Seq*> StepEngine::undrafted_constrained(const std::vector<Scheduled>& batch,
                                                                 const SampledRows& sampled) const {
  std::vector<Seq*> out;
  for (size_t i = 0; i < batch.size(); ++i) {
    Seq* s = batch[i].seq;
    if (s->constrained && s->drafts.empty() && sampled.first[i] >= 0) out.push_back(s);
  }
  return out;
}

// Runs beside the forward: touches only the masks of `seqs`.
void StepEngine::fill_masks(const std::vector<Seq*>& seqs) {
  const auto W = static_cast<size_t>(masker_->words_per_row());
  std::vector<uint64_t> ids;
  for (Seq* s : seqs) ids.push_back(s->id);
  std::vector<uint32_t> rows(seqs.size() * W);
  masker_->fill(ids, rows.data());
  for (size_t i = 0; i < seqs.size(); ++i)
    seqs[i]->masks.assign(rows.begin() + static_cast<std::ptrdiff_t>(i * W), rows.begin() + static_cast<std::ptrdiff_t>((i + 1) * W));
}

int32_t StepEngine::constrain_drafts(Seq* s, const std::vector<int32_t>& drafts) {
  const auto W = static_cast<size_t>(masker_->words_per_row());
  s->masks.assign((drafts.size() + 1) * W, 0u);
  int32_t walked = 0;
  for (size_t i = 0;; ++i) {
    uint32_t* row = s->masks.data() + i * W;
    masker_->fill({s->id}, row);
    if (i == drafts.size() || !TokenMasker::allowed(row, drafts[i]) || !masker_->accept(s->id, drafts[i])) break;
    ++walked;
  }
  masker_->rollback(s->id, walked);
  s->masks.resize((static_cast<size_t>(walked) + 1) * W);
  return walked;
}

bool StepEngine::accept_constrained(Seq* s, int tok) {
  bool ok = false;
  if (!contained(s, [&] {
        ok = masker_->accept(s->id, tok);
        if (ok) s->constraint_done = masker_->terminated(s->id);
      }))
    return false;
  if (!ok) finish(s, FinishReason::Error, masker_->label() + ": refused token " + std::to_string(tok) + ", which its own mask allowed");
  return ok;
}

}  // namespace sy
