#include "engine/decoder_model.h"

#include <charconv>
#include <set>

namespace sy {

std::unique_ptr<Executor> prepare_executor(const std::string& path, const KernelRegistry& registry, ThreadPool* threads,
                                           const ModelOptions& options, const std::vector<GraphPass*>& passes,
                                           PreparedGraphReport* report) {
  auto graph = std::make_shared<Graph>(import_onnx_file(path, options.import));
  PassContext pctx{registry, threads, {}};
  if (report) {
    report->imported_nodes = graph->live_node_count();
    for (const Value& v : graph->values)
      if (v.constant) {
        report->parameters += v.constant->numel();
        report->parameter_bytes += static_cast<int64_t>(v.constant->bytes());
      }
    report->op_counts_after.emplace_back("import", graph->op_counts());
  }
  if (options.simplify) {
    simplify_graph(*graph, pctx);
    if (report) report->op_counts_after.emplace_back("simplify", graph->op_counts());
  }
  for (GraphPass* p : passes) {
    try {
      p->run(*graph, pctx);
    } catch (const std::exception& e) {
      SY_THROW(path << ": pass '" << p->name() << "' failed: " << e.what());
    }
    graph->compact();
    if (report) report->op_counts_after.emplace_back(p->name(), graph->op_counts());
  }
  if (options.simplify && !passes.empty()) {
    simplify_graph(*graph, pctx);
    if (report) report->op_counts_after.emplace_back("simplify (after passes)", graph->op_counts());
  }
  try {
    return std::make_unique<Executor>(graph, registry, threads, options.executor);
  } catch (const Error& e) {
    SY_THROW(path << ": " << e.what());
  }
}

std::unique_ptr<DecoderModel> DecoderModel::load(const std::string& path, const KernelRegistry& registry,
                                                 ThreadPool* threads, const ModelOptions& options,
                                                 const std::vector<GraphPass*>& passes, PreparedGraphReport* report) {
  auto m = std::unique_ptr<DecoderModel>(new DecoderModel());
  m->path_ = path;
  m->executor_ = prepare_executor(path, registry, threads, options, passes, report);
  const Graph* graph = &m->executor_->graph();
  m->discover_interface();
  if (options.max_context > 0) {
    m->max_context_ = options.max_context;
  } else {
    for (const char* key : {"max_position_embeddings", "context_length", "max_seq_len", "n_ctx"}) {
      auto it = graph->metadata.find(key);
      if (it != graph->metadata.end()) {
        try {
          m->max_context_ = std::stoll(it->second);
        } catch (const std::exception&) {
          SY_THROW(path << ": metadata '" << key << "' is not a number: '" << it->second << "'");
        }
      }
    }
  }
  return m;
}

void DecoderModel::check_prompt(const std::vector<int>& prompt) const {
  SY_CHECK(!prompt.empty(), "the prompt is empty");
  SY_CHECK(static_cast<int64_t>(prompt.size()) <= max_context_,
           "the prompt has " << prompt.size() << " tokens, over the context limit of " << max_context_);
  for (int t : prompt)
    SY_CHECK(t >= 0 && (vocab_size_ < 0 || t < vocab_size_),
             "prompt token id " << t << " is outside the vocabulary (0.." << vocab_size_ - 1 << ")");
}

void DecoderModel::discover_interface() {
  const Graph& g = executor_->graph();
  input_ids = executor_->input_index("input_ids");
  attention_mask = executor_->input_index("attention_mask");
  position_ids = executor_->input_index("position_ids");
  logits_indices = executor_->input_index("logits_indices");
  logits = executor_->output_index("logits");
  SY_CHECK(input_ids >= 0, path_ << ": not a decoder export: no graph input named 'input_ids'");
  SY_CHECK(logits >= 0, path_ << ": not a decoder export: no graph output named 'logits'");
  // past_key_values.N.key / .value inputs pair with present.N.key / .value outputs.
  auto parse_past = [](const std::string& name, int& layer, bool& is_key) {
    const std::string prefix = "past_key_values.";
    if (name.rfind(prefix, 0) != 0) return false;
    const char* p = name.data() + prefix.size();
    const char* end = name.data() + name.size();
    auto [rest, ec] = std::from_chars(p, end, layer);
    if (ec != std::errc() || rest == p) return false;
    std::string_view tail(rest, static_cast<size_t>(end - rest));
    is_key = tail == ".key";
    return is_key || tail == ".value";
  };
  std::map<int, std::pair<int, int>> past;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const Value& v = g.values[static_cast<size_t>(g.inputs[i])];
    int layer = 0;
    bool is_key = false;
    if (!parse_past(v.name, layer, is_key)) {
      SY_CHECK(static_cast<int>(i) == input_ids || static_cast<int>(i) == attention_mask || static_cast<int>(i) == position_ids ||
                   static_cast<int>(i) == logits_indices,
               path_ << ": graph input '" << v.name << "' is not part of the decoder-with-past interface "
                     << "(input_ids, attention_mask, position_ids, past_key_values.N.key/value)");
      continue;
    }
    auto& slot = past.emplace(layer, std::make_pair(-1, -1)).first->second;
    (is_key ? slot.first : slot.second) = static_cast<int>(i);
  }
  const Value& lv = g.values[static_cast<size_t>(g.outputs[static_cast<size_t>(logits)].value)];
  if (lv.shape && !lv.shape->empty() && lv.shape->back().is_static()) vocab_size_ = lv.shape->back().value;
  // Paged mode: attention fused into PagedAttention nodes that carry their
  // layer and KV geometry; past inputs stay declared but unused.
  std::set<int64_t> layers;
  for (const Node& n : g.nodes) {
    if (n.dead || n.domain != "switchyard" || n.op_type != "PagedAttention") continue;
    layers.insert(n.attr_int("layer", -1));
    kv_heads_ = n.attr_int("kv_heads", 0);
    head_dim_ = n.attr_int("head_dim", 0);
  }
  if (!layers.empty()) {
    paged_ = true;
    num_paged_layers_ = static_cast<int>(*layers.rbegin() + 1);
    SY_CHECK(static_cast<int>(layers.size()) == num_paged_layers_ && *layers.begin() == 0,
             path_ << ": PagedAttention nodes do not cover layers 0.." << num_paged_layers_ - 1);
    SY_CHECK(kv_heads_ > 0 && head_dim_ > 0, path_ << ": PagedAttention nodes lack kv_heads/head_dim attributes");
    for (size_t i = 0; i < g.inputs.size(); ++i)
      SY_CHECK(static_cast<int>(i) == input_ids || static_cast<int>(i) == position_ids || static_cast<int>(i) == logits_indices ||
                   !executor_->input_used(i),
               path_ << ": after attention fusion graph input '" << g.values[static_cast<size_t>(g.inputs[i])].name
                     << "' is still read; some attention subgraph was not fused (see the attention-fusion warnings)");
    return;
  }
  int expect = 0;
  for (const auto& [layer, kv] : past) {
    SY_CHECK(layer == expect++, path_ << ": past_key_values layers are not numbered 0..N-1 (missing layer " << expect - 1 << ")");
    SY_CHECK(kv.first >= 0 && kv.second >= 0, path_ << ": layer " << layer << " lacks a past key or value input");
    const Value& v = g.values[static_cast<size_t>(g.inputs[static_cast<size_t>(kv.first)])];
    SY_CHECK(v.shape && v.shape->size() == 4 && (*v.shape)[1].is_static() && (*v.shape)[3].is_static(),
             path_ << ": '" << v.name << "' must have shape [batch, kv_heads, past, head_dim] with static heads and head_dim");
    kv_heads_ = (*v.shape)[1].value;
    head_dim_ = (*v.shape)[3].value;
    kv_dtype_ = v.dtype;
    int pk = executor_->output_index("present." + std::to_string(layer) + ".key");
    int pv = executor_->output_index("present." + std::to_string(layer) + ".value");
    SY_CHECK(pk >= 0 && pv >= 0, path_ << ": layer " << layer << " has past inputs but no present." << layer << ".key/value outputs");
    past_key_inputs_.push_back(kv.first);
    past_value_inputs_.push_back(kv.second);
    present_key_outputs_.push_back(pk);
    present_value_outputs_.push_back(pv);
  }
}

}  // namespace sy
