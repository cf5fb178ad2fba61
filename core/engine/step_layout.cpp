// Batch layout: the planned sequences flattened into one ragged forward
// (token ids, positions, the sy_step_context the PagedAttention kernels and
// the cache manager read), and which rows of logits are sampled from.
#include <algorithm>
#include <cstring>

#include "engine/step_sequence.h"

namespace sy {

// Only rows that are sampled from: a sequence's last token when its prompt
// is complete, or every position of a drafted step.
StepEngine::SampledRows StepEngine::sampled_rows(const std::vector<Scheduled>& batch) const {
  SampledRows out;
  out.first.assign(batch.size(), -1);
  int64_t at = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const Seq* s = batch[i].seq;
    const bool samples = !s->drafts.empty() || s->computed + batch[i].tokens == static_cast<int32_t>(s->tokens.size());
    if (samples) {
      out.first[i] = static_cast<int64_t>(out.rows.size());
      for (int64_t r = s->drafts.empty() ? at + batch[i].tokens - 1 : at; r < at + batch[i].tokens; ++r) out.rows.push_back(r);
    }
    at += batch[i].tokens;
  }
  return out;
}

Tensor StepEngine::forward(const std::vector<Scheduled>& batch, const std::vector<int64_t>& rows) {
  int32_t T = 0;
  for (const auto& b : batch) T += b.tokens;
  Tensor ids = Tensor::empty(DType::I64, Shape{1, T});
  Tensor pos = Tensor::empty(DType::I64, Shape{1, T});
  std::vector<int32_t> query_start{0}, context_len;
  std::vector<uint64_t> seq_ids;
  std::vector<std::vector<int32_t>> tables;
  int32_t max_blocks = 1;
  int32_t t = 0;
  for (const auto& b : batch) {
    for (int32_t j = 0; j < b.tokens; ++j, ++t) {
      int32_t p = b.seq->computed + j;
      ids.data<int64_t>()[t] = b.seq->tokens[static_cast<size_t>(p)];
      pos.data<int64_t>()[t] = p;
    }
    query_start.push_back(t);
    context_len.push_back(b.seq->computed + b.tokens);
    seq_ids.push_back(b.seq->id);
    tables.push_back(cache_.block_table(b.seq->id));
    max_blocks = std::max(max_blocks, static_cast<int32_t>(tables.back().size()));
  }
  // Paging waste: slots held in blocks minus tokens stored (windowed-out
  // blocks, marked -1, hold nothing).
  int64_t waste_sum = 0, waste_max = 0;
  bool any_prefill = false, any_decode = false;
  for (size_t i = 0; i < batch.size(); ++i) {
    int64_t held = 0, first_kept = -1;
    for (size_t k = 0; k < tables[i].size(); ++k)
      if (tables[i][k] >= 0) {
        ++held;
        if (first_kept < 0) first_kept = static_cast<int64_t>(k);
      }
    int64_t stored = context_len[i] - std::max<int64_t>(first_kept, 0) * block_size_;
    int64_t waste = held * block_size_ - stored;
    waste_sum += waste;
    waste_max = std::max(waste_max, waste);
    const bool decode = batch[i].seq->decodes(batch[i].tokens);
    (decode ? any_decode : any_prefill) = true;
  }
  std::vector<int32_t> flat(static_cast<size_t>(max_blocks) * batch.size(), 0);
  for (size_t i = 0; i < tables.size(); ++i)
    std::copy(tables[i].begin(), tables[i].end(), flat.begin() + static_cast<ptrdiff_t>(i * static_cast<size_t>(max_blocks)));
  std::vector<int64_t> positions(pos.data<int64_t>(), pos.data<int64_t>() + T);

  sy_step_context step{};
  step.struct_size = sizeof(step);
  step.num_seqs = static_cast<int32_t>(batch.size());
  step.num_tokens = T;
  step.query_start = query_start.data();
  step.context_len = context_len.data();
  step.positions = positions.data();
  step.seq_ids = seq_ids.data();
  step.block_tables = flat.data();
  step.max_blocks_per_seq = max_blocks;
  step.block_size = block_size_;
  step.num_layers = static_cast<int32_t>(key_cache_.size());
  step.key_cache = key_cache_.data();
  step.value_cache = value_cache_.data();

  Executor& ex = model_.executor();
  std::vector<Tensor> inputs(ex.graph().inputs.size());
  inputs[static_cast<size_t>(model_.input_ids)] = ids;
  for (const auto& [slot, empty] : model_.shape_only_inputs()) inputs[static_cast<size_t>(slot)] = empty;
  if (model_.position_ids >= 0 && ex.input_used(static_cast<size_t>(model_.position_ids)))
    inputs[static_cast<size_t>(model_.position_ids)] = pos;
  const bool selected_in_graph = model_.logits_indices >= 0;
  if (selected_in_graph)
    inputs[static_cast<size_t>(model_.logits_indices)] =
        Tensor::from<int64_t>(Shape{static_cast<int64_t>(rows.size())}, std::span<const int64_t>(rows));
  std::vector<Tensor> out = ex.run(inputs, &step);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++metrics_.steps;
    metrics_.computed_tokens += T;
    for (int32_t c : context_len) metrics_.kv_tokens_read += c;
    metrics_.mixed_steps += any_prefill && any_decode;
    metrics_.max_waste_tokens = std::max(metrics_.max_waste_tokens, waste_max);
    metrics_.max_mean_waste_tokens = std::max(metrics_.max_mean_waste_tokens, static_cast<double>(waste_sum) / static_cast<double>(batch.size()));
  }
  Tensor logits = out[static_cast<size_t>(model_.logits)];
  const int64_t expect = selected_in_graph ? static_cast<int64_t>(rows.size()) : T;
  SY_CHECK(logits.rank() == 3 && logits.dim(0) == 1 && logits.dim(1) == expect,
           "logits have shape " << logits.shape().str() << ", expected [1, " << expect << ", vocab]");
  const int64_t V = logits.dim(2);
  if (selected_in_graph) return logits.reshaped(Shape{expect, V});
  // The graph computed every row: keep the selected ones.
  Tensor picked = Tensor::empty(DType::F32, Shape{static_cast<int64_t>(rows.size()), V});
  for (size_t i = 0; i < rows.size(); ++i)
    std::memcpy(picked.data<float>() + static_cast<int64_t>(i) * V, logits.data<float>() + rows[i] * V, static_cast<size_t>(V) * sizeof(float));
  return picked;
}

Tensor StepEngine::prompt_logits(const std::vector<int>& prompt) {
  GenerationRequest r;
  r.prompt = prompt;
  validate(r);
  Seq s;
  s.req = r;
  s.tokens.assign(prompt.begin(), prompt.end());
  {
    std::lock_guard<std::mutex> lock(mu_);
    s.id = next_id_++;
  }
  // One forward over the whole prompt, without the prefix cache, so every
  // position is computed; serialised with the engine thread's steps.
  std::lock_guard<std::mutex> lock(forward_mu_);
  SY_CHECK(cache_.allocate(s.id, static_cast<int32_t>(prompt.size())), "the prompt does not fit the KV cache");
  Tensor logits;
  std::vector<int64_t> rows(prompt.size());
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(i);
  try {
    logits = forward({{&s, static_cast<int32_t>(prompt.size())}}, rows);
  } catch (...) {
    cache_.release(s.id);
    throw;
  }
  cache_.release(s.id);
  return logits;
}

std::vector<float> StepEngine::last_logits(const std::vector<int>& prompt) {
  Tensor logits = prompt_logits(prompt);
  const int64_t V = logits.dim(1);
  const float* row = logits.data<float>() + (logits.dim(0) - 1) * V;
  return std::vector<float>(row, row + V);
}

}  // namespace sy
