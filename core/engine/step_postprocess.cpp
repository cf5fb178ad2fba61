// Postprocessing, the step's last part: each planned sequence's rows of
// logits into tokens (sampled, or drafts verified), every token emitted to
// the request, and the stops and limits checked.
#include <algorithm>

#include "engine/step_engine.h"

namespace sy {

void StepEngine::postprocess(const StepPlan& plan, const SampledRows& sampled, const Tensor& logits, double now) {
  const int64_t V = logits.dim(1);
  const TokenMasker* masker = constrainer_.masker();
  if (masker && V != masker->vocab_size())
    for (const auto& e : plan.entries)
      if (e.seq->constrained)
        finish(e.seq, FinishReason::Error, masker->label() + " masks " + std::to_string(masker->vocab_size()) +
                                               " tokens; the model's logits have " + std::to_string(V));
  for (size_t i = 0; i < plan.entries.size(); ++i) {
    Sequence* s = plan.entries[i].seq;
    const float* rows = sampled.first[i] >= 0 ? logits.data<float>() + sampled.first[i] * V : nullptr;
    if (s->finished()) continue;  // its masks failed
    if (s->drafts.empty()) {
      advance(plan.entries[i], rows, V, now);
      if (rows) keep_hidden(s, sampled.rows[static_cast<size_t>(sampled.first[i])]);
      continue;
    }
    // Token j was chosen from row from_rows[j] (j for a chain of drafts); a
    // stop token ends the sequence and the rest is dropped. The last
    // token's KV is computed next step.
    std::vector<int64_t> from_rows;
    const std::vector<int32_t> emitted = speculator_->verify(s, rows, V, from_rows);
    for (size_t j = 0; j < emitted.size() && !s->finished(); ++j) emit(s, emitted[j], now, rows + from_rows[j] * V, V);
    if (!from_rows.empty()) keep_hidden(s, sampled.rows[static_cast<size_t>(sampled.first[i] + from_rows.back())]);
  }
}

// For a drafter that reads hidden states: the one at the token position
// (flat in the step) whose logits chose s's last token.
void StepEngine::keep_hidden(Sequence* s, int64_t token) {
  if (!step_hidden_.defined() || s->finished()) return;
  const int64_t H = step_hidden_.dim(1);
  const float* h = step_hidden_.data<float>() + token * H;
  s->hidden.assign(h, h + H);
}

// A plain step of one sequence: its KV is now computed; a complete prompt
// (or a decode token) samples the next token.
void StepEngine::advance(const StepPlan::Entry& e, const float* row, int64_t V, double now) {
  Sequence* s = e.seq;
  s->computed += e.tokens;
  if (!contained(*this, s, [&] { cache_.commit(s->id, s->tokens.data(), s->computed); })) return;
  if (s->computed < static_cast<int32_t>(s->tokens.size())) return;  // more prompt chunks to go
  if (s->constrained) {
    if (!TokenMasker::any_allowed(s->masks.data(), static_cast<int32_t>(V))) {
      finish(s, FinishReason::Error, constrainer_.masker()->label() + ": the constraint allows no next token");
      return;
    }
    s->sampler.set_mask(s->masks.data());
  }
  emit(s, s->sampler.sample(row, static_cast<int>(V)), now, row, V);
}

// row: the logits the token was chosen from (for its logprobs).
void StepEngine::emit(Sequence* s, int tok, double now, const float* row, int64_t vocab) {
  if (s->constrained && !constrainer_.accept(s, tok)) return;
  GenerationResult& res = s->result;
  s->sampler.accept(tok);
  if (s->req.sampling.logprobs >= 0) {
    res.logprobs.push_back(token_logprobs(row, static_cast<int>(vocab), tok, s->req.sampling.logprobs));
    if (s->callbacks.on_logprobs) s->callbacks.on_logprobs(s->id, res.logprobs.back());
  }
  if (res.tokens.empty()) res.ttft_ms = now - s->arrival_ms;
  res.tokens.push_back(tok);
  res.e2e_ms = now - s->arrival_ms;
  res.token_ms.push_back(res.e2e_ms);
  s->tokens.push_back(tok);
  counters_.update([](StepEngineMetrics& m) { ++m.generated_tokens; });
  if (s->callbacks.on_token) s->callbacks.on_token(s->id, tok);
  const bool stop_id = std::find(s->req.stop_ids.begin(), s->req.stop_ids.end(), tok) != s->req.stop_ids.end();
  if (stop_id || (s->req.stop_at_eos && model_.is_eos(tok, s->req.eos_ids))) finish(s, FinishReason::Stop);
  else if (static_cast<int>(res.tokens.size()) >= s->req.max_tokens) finish(s, FinishReason::Length);
  else if (static_cast<int64_t>(s->tokens.size()) >= model_.max_context()) finish(s, FinishReason::Context);
  else if (s->constrained && s->constraint_done) finish(s, FinishReason::Stop);
}

}  // namespace sy
