#include "engine/step/constrainer.h"

#include "base/error.h"

#include <algorithm>
#include <climits>

namespace sy {

void Constrainer::check(const GenerationRequest& r) const {
  SY_CHECK(r.constraint.empty() || masker_, "the request asks for structured output (" << r.constraint.kind << ") but "
                                                << (unavailable_.empty() ? "this profile has no logits processor ('logits_processor:' in the manifest)"
                                                                         : unavailable_));
}

void Constrainer::begin(Sequence* s, int64_t max_context) {
  if (s->req.constraint.empty()) return;
  const int64_t room = max_context - static_cast<int64_t>(s->req.prompt.size());
  const int64_t budget = std::min<int64_t>(s->req.max_tokens, room);
  masker_->begin(s->id, s->req.constraint, static_cast<int32_t>(std::clamp<int64_t>(budget, 0, INT32_MAX)));
  s->constrained = true;
}

void Constrainer::end(Sequence* s) {
  if (s->constrained) masker_->end(s->id);
}

std::vector<Sequence*> Constrainer::undrafted(const StepPlan& plan, const SampledRows& sampled) const {
  const std::vector<StepPlan::Entry>& batch = plan.entries;
  std::vector<Sequence*> out;
  for (size_t i = 0; i < batch.size(); ++i) {
    Sequence* s = batch[i].seq;
    if (s->constrained && s->drafts.empty() && sampled.first[i] >= 0) out.push_back(s);
  }
  return out;
}

void Constrainer::fill(const std::vector<Sequence*>& seqs) {
  const auto W = static_cast<size_t>(masker_->words_per_row());
  std::vector<uint64_t> ids;
  for (Sequence* s : seqs) ids.push_back(s->id);
  std::vector<uint32_t> rows(seqs.size() * W);
  masker_->fill(ids, rows.data());
  for (size_t i = 0; i < seqs.size(); ++i)
    seqs[i]->masks.assign(rows.begin() + static_cast<std::ptrdiff_t>(i * W), rows.begin() + static_cast<std::ptrdiff_t>((i + 1) * W));
}

int32_t Constrainer::constrain_drafts(Sequence* s, const std::vector<int32_t>& drafts) {
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

bool Constrainer::accept(Sequence* s, int tok) {
  bool ok = false;
  if (!contained(ends_, s, [&] {
        ok = masker_->accept(s->id, tok);
        if (ok) s->constraint_done = masker_->terminated(s->id);
      }))
    return false;
  if (!ok) ends_.finish(s, FinishReason::Error, masker_->label() + ": refused token " + std::to_string(tok) + ", which its own mask allowed");
  return ok;
}

}  // namespace sy
