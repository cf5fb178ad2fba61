#include "engine/step/runner.h"

#include <algorithm>
#include <cstring>

#include "switchyard/plugin.h"

namespace sy {

StepRunner::StepRunner(DecoderModel& model, PluginCacheManager& cache, StepCounters& counters)
    : model_(model), cache_(cache), counters_(counters) {
  for (int l = 0; l < model_.num_layers(); ++l) {
    auto [k, v] = cache_.storage(l);
    // A quantized cache's rows carry their scale after the head's codes (SY_KV_ROW_* in plugin.h).
    const int64_t scale = SY_KV_ROW_QUANTIZED(k.dtype) ? SY_KV_ROW_SCALE_BYTES : 0;
    const int64_t row = model_.head_dim() + scale, value_row = model_.value_dim() + scale;
    SY_CHECK(k.rank == 4 && v.rank == 4 && k.data && v.data && k.dims[1] == model_.kv_heads() && v.dims[1] == model_.kv_heads() &&
                 k.dims[0] == v.dims[0] && k.dims[2] == v.dims[2] && k.dims[3] == row && v.dims[3] == value_row && k.dtype == v.dtype,
             "cache manager storage for layer " << l << " does not match the model ([blocks, " << model_.kv_heads() << ", block, "
                                                << row << "] keys and [.., " << value_row << "] values of one dtype expected"
                                                << (value_row != row ? "; a cache manager built before ABI 1.8 cannot hold values "
                                                                       "of another size than keys"
                                                                     : "")
                                                << ")");
    key_cache_.push_back(k);
    value_cache_.push_back(v);
  }
  block_size_ = static_cast<int32_t>(key_cache_[0].dims[2]);
}

Tensor StepRunner::forward(const StepPlan& plan, const std::vector<int64_t>& rows, Tensor* hidden) {
  const std::vector<StepPlan::Entry>& batch = plan.entries;
  int32_t T = 0;
  for (const auto& b : batch) T += b.tokens;
  Tensor ids = Tensor::empty(DType::I64, Shape{1, T});
  Tensor pos = Tensor::empty(DType::I64, Shape{1, T});
  std::vector<int32_t> query_start{0}, context_len;
  std::vector<uint64_t> seq_ids;
  std::vector<std::vector<int32_t>> tables;
  int32_t max_blocks = 1;
  int32_t t = 0;
  // Token trees (drafts with parents): each token's query index of the one
  // it follows (-1: the one before it), and its position by depth.
  std::vector<int32_t> token_parents;
  bool any_tree = false;
  for (const auto& b : batch) {
    const std::vector<int32_t>& parents = b.seq->draft_parents;
    const bool tree = !parents.empty() && b.tokens == 1 + static_cast<int32_t>(parents.size());
    any_tree = any_tree || tree;
    std::vector<int32_t> depth;  // per query token of a tree
    for (int32_t j = 0; j < b.tokens; ++j, ++t) {
      int32_t p = b.seq->computed + j;
      ids.data<int64_t>()[t] = b.seq->tokens[static_cast<size_t>(p)];
      int32_t parent = -1;
      if (tree && j > 0) {
        const int32_t up = parents[static_cast<size_t>(j - 1)] + 1;  // the parent's query index (0: the fed token)
        parent = up == j - 1 ? -1 : up;
        depth.push_back(depth[static_cast<size_t>(up)] + 1);
      } else if (tree) {
        depth.push_back(0);
      }
      token_parents.push_back(parent);
      pos.data<int64_t>()[t] = tree ? b.seq->computed + depth.back() : p;
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
  step.token_parents = any_tree ? token_parents.data() : nullptr;

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
  counters_.update([&](StepEngineMetrics& m) {
    ++m.steps;
    m.computed_tokens += T;
    for (int32_t c : context_len) m.kv_tokens_read += c;
    m.mixed_steps += any_prefill && any_decode;
    m.max_waste_tokens = std::max(m.max_waste_tokens, waste_max);
    m.max_mean_waste_tokens = std::max(m.max_mean_waste_tokens, static_cast<double>(waste_sum) / static_cast<double>(batch.size()));
  });
  Tensor logits = out[static_cast<size_t>(model_.logits)];
  if (hidden) {
    SY_CHECK(selected_in_graph && model_.hidden_states >= 0,
             "the model's LM head is not one the logits-selection pass can split off (a MatMul or quantized MatMul with constant "
             "weights), so its hidden states are not exposed");
    const Tensor& h = out[static_cast<size_t>(model_.hidden_states)];
    SY_CHECK(h.rank() == 3 && h.dim(0) == 1 && h.dim(1) == T, "hidden states have shape " << h.shape().str() << ", expected [1, " << T << ", hidden]");
    *hidden = h.reshaped(Shape{T, h.dim(2)});
  }
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

}  // namespace sy
