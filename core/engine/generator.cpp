#include "engine/generator.h"

#include <algorithm>
#include <chrono>
#include <climits>

namespace sy {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }
}  // namespace

struct BaselineGenerator::Batch {
  size_t rows = 0;
  std::vector<std::vector<int64_t>> mask;  // [rows][past + new]
  std::vector<int64_t> next_pos;           // position of each row's next token
  std::vector<Tensor> past_k, past_v;      // per layer [rows, H, past, D]
  std::vector<std::vector<int64_t>> all_tokens;  // used when the model has no KV cache
};

void BaselineGenerator::validate(const std::vector<int>& prompt) const {
  SY_CHECK(!model_.paged_attention(), model_.path() << ": attention is fused; this model runs in the step engine only");
  model_.check_prompt(prompt);
}

void BaselineGenerator::init_past(Batch& b) const {
  // Empty past tensors, [rows, kv_heads, 0, head_dim] (keys stored
  // transposed: [rows, kv_heads, head_dim, 0]).
  for (const KvLayer& l : model_.io().layers) {
    const auto rows = static_cast<int64_t>(b.rows);
    Shape v{rows, model_.kv_heads(), 0, model_.value_dim()};
    Shape k = l.key_seq_axis == 3 ? Shape{rows, model_.kv_heads(), model_.head_dim(), 0} : Shape{rows, model_.kv_heads(), 0, model_.head_dim()};
    b.past_k.push_back(Tensor::empty(model_.kv_dtype(), k));
    b.past_v.push_back(Tensor::empty(model_.kv_dtype(), v));
  }
}

Tensor BaselineGenerator::forward(Batch& b, const std::vector<std::vector<int64_t>>& new_tokens) {
  Executor& ex = model_.executor();
  const bool kv = model_.has_kv_cache();
  if (!kv) {
    // No cache in the export: recompute the whole sequence every step.
    for (size_t r = 0; r < b.rows; ++r) b.all_tokens[r].insert(b.all_tokens[r].end(), new_tokens[r].begin(), new_tokens[r].end());
  }
  const auto& feed = kv ? new_tokens : b.all_tokens;
  int64_t S = static_cast<int64_t>(feed[0].size());
  auto R = static_cast<int64_t>(b.rows);
  std::vector<Tensor> inputs(ex.graph().inputs.size());

  Tensor ids = Tensor::empty(DType::I64, Shape{R, S});
  Tensor pos = Tensor::empty(DType::I64, Shape{R, S});
  for (size_t r = 0; r < b.rows; ++r) {
    for (int64_t j = 0; j < S; ++j) ids.data<int64_t>()[static_cast<int64_t>(r) * S + j] = feed[r][static_cast<size_t>(j)];
    // Positions count real tokens only (cumsum(mask) - 1); pads get 1, as
    // the reference exports do.
    size_t total = b.mask[r].size();
    int64_t p = kv ? b.next_pos[r] : 0;
    for (int64_t j = 0; j < S; ++j) {
      size_t mi = kv ? total - static_cast<size_t>(S - j) : static_cast<size_t>(j);
      bool real = b.mask[r][mi] != 0;
      pos.data<int64_t>()[static_cast<int64_t>(r) * S + j] = real ? p++ : 1;
    }
    if (kv) b.next_pos[r] = p;
  }
  inputs[static_cast<size_t>(model_.input_ids)] = ids;
  if (model_.position_ids >= 0) inputs[static_cast<size_t>(model_.position_ids)] = pos;
  if (model_.attention_mask >= 0) {
    auto T = static_cast<int64_t>(b.mask[0].size());
    Tensor mask = Tensor::empty(DType::I64, Shape{R, T});
    for (size_t r = 0; r < b.rows; ++r) std::copy(b.mask[r].begin(), b.mask[r].end(), mask.data<int64_t>() + static_cast<int64_t>(r) * T);
    inputs[static_cast<size_t>(model_.attention_mask)] = mask;
  }
  for (int l = 0; l < model_.num_layers(); ++l) {
    inputs[static_cast<size_t>(model_.past_key_inputs()[static_cast<size_t>(l)])] = b.past_k[static_cast<size_t>(l)];
    inputs[static_cast<size_t>(model_.past_value_inputs()[static_cast<size_t>(l)])] = b.past_v[static_cast<size_t>(l)];
  }
  std::vector<Tensor> out = ex.run(inputs);
  for (int l = 0; l < model_.num_layers(); ++l) {
    // present becomes next step's past without a copy.
    b.past_k[static_cast<size_t>(l)] = out[static_cast<size_t>(model_.present_key_outputs()[static_cast<size_t>(l)])];
    b.past_v[static_cast<size_t>(l)] = out[static_cast<size_t>(model_.present_value_outputs()[static_cast<size_t>(l)])];
  }
  Tensor logits = out[static_cast<size_t>(model_.logits)];
  SY_CHECK(logits.dtype() == DType::F32 && logits.rank() == 3 && logits.dim(0) == R && logits.dim(1) == S,
           "logits have shape " << logits.shape().str() << ", expected [" << R << ", " << S << ", vocab] float32");
  return logits;
}

std::vector<GenerationResult> BaselineGenerator::generate(const std::vector<GenerationRequest>& batch,
                                                          const TokenCallback& on_token) {
  SY_CHECK(!batch.empty(), "no requests to generate");
  auto t0 = Clock::now();
  Batch b;
  b.rows = batch.size();
  size_t longest = 0;
  for (const auto& req : batch) {
    validate(req.prompt);
    SY_CHECK(req.max_tokens >= 0, "max_tokens must be >= 0, got " << req.max_tokens);
    SY_CHECK(req.constraint.empty() || masker_, "the request asks for structured output (" << req.constraint.kind << ") but "
                                                    << (no_masker_.empty() ? "this profile has no logits processor ('logits_processor:' in the manifest)"
                                                                           : no_masker_));
    longest = std::max(longest, req.prompt.size());
  }
  // Structured output: each constrained row's processor state, ended however
  // the call ends.
  std::vector<uint64_t> constraint_id(batch.size(), 0);
  struct EndAll {
    TokenMasker* masker;
    const std::vector<uint64_t>& ids;
    ~EndAll() {
      for (uint64_t id : ids)
        if (id) masker->end(id);
    }
  } end_all{masker_, constraint_id};
  for (size_t r = 0; r < batch.size(); ++r) {
    if (batch[r].constraint.empty()) continue;
    const int64_t room = model_.max_context() - static_cast<int64_t>(batch[r].prompt.size());
    masker_->begin(next_constrained_, batch[r].constraint, static_cast<int32_t>(std::clamp<int64_t>(std::min<int64_t>(batch[r].max_tokens, room), 0, INT32_MAX)));
    constraint_id[r] = next_constrained_++;
  }
  std::vector<uint32_t> masks;
  std::vector<std::vector<int64_t>> first(b.rows);
  b.mask.resize(b.rows);
  b.next_pos.assign(b.rows, 0);
  b.all_tokens.resize(b.rows);
  // Left padding, or right padding for models that take positions from the
  // mask sums (onnxruntime-genai's convention).
  const bool right = model_.right_padding();
  for (size_t r = 0; r < b.rows; ++r) {
    size_t pad = longest - batch[r].prompt.size();
    const auto& p = batch[r].prompt;
    if (right) {
      first[r].assign(p.begin(), p.end());
      first[r].insert(first[r].end(), pad, pad_id_);
      b.mask[r].assign(p.size(), 1);
      b.mask[r].insert(b.mask[r].end(), pad, 0);
    } else {
      first[r].assign(pad, pad_id_);
      first[r].insert(first[r].end(), p.begin(), p.end());
      b.mask[r].assign(pad, 0);
      b.mask[r].insert(b.mask[r].end(), p.size(), 1);
    }
  }
  init_past(b);
  std::vector<Sampler> samplers;
  std::vector<GenerationResult> results(b.rows);
  std::vector<bool> done(b.rows, false);
  for (size_t r = 0; r < b.rows; ++r) {
    samplers.emplace_back(batch[r].sampling);
    samplers.back().set_prompt(batch[r].prompt);
    if (batch[r].max_tokens == 0) {
      done[r] = true;
      results[r].finish_reason = FinishReason::Length;
    }
  }
  auto remaining = [&] { return std::count(done.begin(), done.end(), false); };
  if (remaining() == 0) return results;

  std::vector<std::vector<int64_t>> step_tokens = first;
  auto context_len = static_cast<int64_t>(longest);
  while (remaining() > 0) {
    Tensor logits = forward(b, step_tokens);
    int64_t S = logits.dim(1), V = logits.dim(2);
    double now = ms_since(t0);
    std::vector<uint64_t> constrained;
    std::vector<size_t> mask_row(b.rows, 0);
    for (size_t r = 0; r < b.rows; ++r)
      if (!done[r] && constraint_id[r]) {
        mask_row[r] = constrained.size();
        constrained.push_back(constraint_id[r]);
      }
    if (!constrained.empty()) {
      SY_CHECK(V == masker_->vocab_size(), masker_->label() << " masks " << masker_->vocab_size() << " tokens; the model's logits have " << V);
      masks.assign(constrained.size() * static_cast<size_t>(masker_->words_per_row()), 0u);
      masker_->fill(constrained, masks.data());
    }
    for (size_t r = 0; r < b.rows; ++r) {
      step_tokens[r].assign(1, pad_id_);
      if (done[r]) continue;
      // The row's last real token: the end, or with right padding on the
      // first step the end of its prompt.
      const int64_t at = right && results[r].tokens.empty() ? static_cast<int64_t>(batch[r].prompt.size()) - 1 : S - 1;
      const float* row = logits.data<float>() + (static_cast<int64_t>(r) * S + at) * V;
      if (constraint_id[r]) {
        const uint32_t* m = masks.data() + mask_row[r] * static_cast<size_t>(masker_->words_per_row());
        SY_CHECK(TokenMasker::any_allowed(m, static_cast<int32_t>(V)), masker_->label() << ": the constraint allows no next token");
        samplers[r].set_mask(m);
      }
      int tok = samplers[r].sample(row, static_cast<int>(V));
      samplers[r].accept(tok);
      bool constraint_done = false;
      if (constraint_id[r]) {
        SY_CHECK_KIND(masker_->accept(constraint_id[r], tok), ErrorKind::PluginFailure,
                      masker_->label() << ": refused token " << tok << ", which its own mask allowed");
        constraint_done = masker_->terminated(constraint_id[r]);
      }
      GenerationResult& res = results[r];
      if (batch[r].sampling.logprobs >= 0) res.logprobs.push_back(token_logprobs(row, static_cast<int>(V), tok, batch[r].sampling.logprobs));
      if (res.tokens.empty()) res.ttft_ms = now;
      res.tokens.push_back(tok);
      res.token_ms.push_back(now);
      res.e2e_ms = now;
      if (on_token) on_token(r, tok);
      step_tokens[r][0] = tok;
      const auto& stop_ids = batch[r].stop_ids;
      if (std::find(stop_ids.begin(), stop_ids.end(), tok) != stop_ids.end() || (batch[r].stop_at_eos && model_.is_eos(tok, batch[r].eos_ids))) {
        done[r] = true;
        res.finish_reason = FinishReason::Stop;
      } else if (static_cast<int>(res.tokens.size()) >= batch[r].max_tokens) {
        done[r] = true;
        res.finish_reason = FinishReason::Length;
      } else if (static_cast<int64_t>(batch[r].prompt.size() + res.tokens.size()) >= model_.max_context()) {
        done[r] = true;
        res.finish_reason = FinishReason::Context;
      } else if (constraint_done) {
        done[r] = true;
        res.finish_reason = FinishReason::Stop;
      }
    }
    if (remaining() == 0) break;
    ++context_len;
    for (size_t r = 0; r < b.rows; ++r) b.mask[r].push_back(1);
  }
  return results;
}

std::vector<float> BaselineGenerator::last_logits(const std::vector<int>& prompt) {
  validate(prompt);
  Batch b;
  b.rows = 1;
  b.mask.assign(1, std::vector<int64_t>(prompt.size(), 1));
  b.next_pos.assign(1, 0);
  b.all_tokens.resize(1);
  init_past(b);
  Tensor logits = forward(b, {std::vector<int64_t>(prompt.begin(), prompt.end())});
  int64_t S = logits.dim(1), V = logits.dim(2);
  const float* row = logits.data<float>() + (S - 1) * V;
  return std::vector<float>(row, row + V);
}

}  // namespace sy
