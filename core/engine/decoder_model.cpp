#include "engine/decoder_model.h"
#include "passes/pass.h"
#include "switchyard/plugin.h"

#include <set>

namespace sy {

std::unique_ptr<Executor> prepare_executor(const ModelFolder& folder, const KernelRegistry& registry, ThreadPool* threads,
                                           const ModelOptions& options, const std::vector<GraphPass*>& passes,
                                           PreparedGraphReport* report) {
  const std::string& path = folder.model_file();
  // One door for both formats: a GGUF file becomes the ONNX graph an
  // exporter would have written (graph/gguf_model.h).
  GgufModelSummary gguf;
  const bool is_gguf = folder.is_gguf();
  auto graph = std::make_shared<Graph>(is_gguf ? import_gguf_file(path, options.import, options.gguf, &gguf)
                                               : import_onnx_file(path, options.import));
  if (report && is_gguf) report->gguf = gguf;
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
  // Half-precision exports compute in float32 on the CPU.
  if (make_half_to_float_pass()->run(*graph, pctx) && report) report->op_counts_after.emplace_back("half-to-float", graph->op_counts());
  if (options.simplify) {
    simplify_graph(*graph, pctx);
    if (report) report->op_counts_after.emplace_back("simplify", graph->op_counts());
  }
  for (GraphPass* p : passes) {
    // Plugin passes get the model's facts and subgraph evaluation, and their
    // rewrites are proven against the original before they are accepted.
    PassEnv env = make_pass_env(*graph, path, folder.genai(), folder.config_context_length(), registry, threads);
    pctx.env = &env;
    const std::optional<Graph> before = p->probed() ? std::optional<Graph>(*graph) : std::nullopt;
    bool changed = false;
    try {
      changed = p->run(*graph, pctx);
    } catch (const std::exception& e) {
      SY_THROW_KIND(kind_of(e), path << ": pass '" << p->name() << "' failed: " << e.what());
    }
    pctx.env = nullptr;
    if (before && changed) {
      try {
        ProbeReport probe = prove_rewrite(p->name(), *before, *graph, env);
        if (report) report->probes.push_back(probe);
      } catch (const std::exception& e) {
        SY_THROW_KIND(kind_of(e), path << ": " << e.what());
      }
    }
    graph->compact();
    if (report) report->op_counts_after.emplace_back(p->name(), graph->op_counts());
  }
  if (options.simplify && !passes.empty()) {
    simplify_graph(*graph, pctx);
    if (report) report->op_counts_after.emplace_back("simplify (after passes)", graph->op_counts());
  }
  if (report) {
    // The weights a forward pass reads: constants the remaining nodes use
    // (int8/int4 codes and scales after a quantize pass, not the float
    // weights they replaced), each counted once; a table only gathered from
    // (an untied embedding) is read a row per token, and is not counted.
    std::set<ValueId> used;
    for (const Node& n : graph->nodes) {
      if (n.dead) continue;
      const bool gather = n.op_type == "Gather" || n.op_type == "GatherBlockQuantized";
      for (size_t i = gather ? 1 : 0; i < n.inputs.size(); ++i) {
        const ValueId v = n.inputs[i];
        if (v != kNoValue && graph->values[static_cast<size_t>(v)].constant && used.insert(v).second)
          report->weight_bytes += static_cast<int64_t>(graph->values[static_cast<size_t>(v)].constant->bytes());
      }
    }
  }
  try {
    return std::make_unique<Executor>(graph, registry, threads, options.executor);
  } catch (const Error& e) {
    SY_THROW_KIND(e.kind(), path << ": " << e.what());
  }
}

std::unique_ptr<DecoderModel> DecoderModel::load(const ModelFolder& folder, const KernelRegistry& registry,
                                                 ThreadPool* threads, const ModelOptions& options,
                                                 const std::vector<GraphPass*>& passes, PreparedGraphReport* report) {
  auto m = std::unique_ptr<DecoderModel>(new DecoderModel());
  const std::string& path = folder.argument();
  m->path_ = folder.model_file();
  if (folder.genai()) m->genai_ = *folder.genai();
  m->executor_ = prepare_executor(folder, registry, threads, options, passes, report);
  const Graph* graph = &m->executor_->graph();
  m->discover_interface();
  m->eos_ids_ = folder.eos_ids();
  if (options.max_context > 0) {
    m->max_context_ = options.max_context;
  } else if (folder.context_length() > 0) {
    m->max_context_ = folder.context_length();
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
  // Paged mode: attention fused into PagedAttention nodes that carry their
  // layer and KV geometry; past inputs stay declared but unused.
  std::set<int64_t> layers;
  for (const Node& n : g.nodes) {
    if (n.dead || n.domain != SY_OP_DOMAIN || n.op_type != SY_OP_PAGED_ATTENTION) continue;
    layers.insert(n.attr_int("layer", -1));
    kv_heads_ = n.attr_int("kv_heads", 0);
    head_dim_ = n.attr_int("head_dim", 0);
    value_dim_ = n.attr_int("value_head_dim", 0);  // the cached value rows, where they differ from the keys
  }
  paged_ = !layers.empty();
  io_ = discover_model_io(g, path_, genai_ ? &*genai_ : nullptr, {"logits_indices"}, paged_);
  input_ids = io_.input_ids;
  attention_mask = io_.attention_mask;
  position_ids = io_.position_ids;
  logits = io_.logits;
  logits_indices = executor_->input_index("logits_indices");
  hidden_states = executor_->output_index(kHiddenStates);
  const Value& lv = g.values[static_cast<size_t>(g.outputs[static_cast<size_t>(logits)].value)];
  if (lv.shape && !lv.shape->empty() && lv.shape->back().is_static()) vocab_size_ = lv.shape->back().value;
  if (vocab_size_ < 0 && genai_ && genai_->vocab_size > 0) vocab_size_ = genai_->vocab_size;
  if (paged_) {
    num_paged_layers_ = static_cast<int>(*layers.rbegin() + 1);
    SY_CHECK(static_cast<int>(layers.size()) == num_paged_layers_ && *layers.begin() == 0,
             path_ << ": PagedAttention nodes do not cover layers 0.." << num_paged_layers_ - 1);
    SY_CHECK(kv_heads_ > 0 && head_dim_ > 0, path_ << ": PagedAttention nodes lack kv_heads/head_dim attributes");
    // Past inputs the fused graph still reads for their shape only (an
    // exporter that takes the batch size from a past tensor) get an empty
    // past of one row: the step engine's batch is one flattened row.
    std::set<int> past_slots;
    for (const KvLayer& l : io_.layers) past_slots.insert({l.past_key, l.past_value});
    std::vector<int> uses_by_data(g.values.size(), 0);
    for (const Node& n : g.nodes)
      if (!n.dead && !(n.domain.empty() && (n.op_type == "Shape" || n.op_type == "Size")))
        for (ValueId v : n.inputs)
          if (v != kNoValue) ++uses_by_data[static_cast<size_t>(v)];
    for (size_t i = 0; i < g.inputs.size(); ++i) {
      const int slot = static_cast<int>(i);
      if (slot == input_ids || slot == position_ids || slot == logits_indices || !executor_->input_used(i)) continue;
      const Value& v = g.values[static_cast<size_t>(g.inputs[i])];
      SY_CHECK(past_slots.count(slot) && uses_by_data[static_cast<size_t>(g.inputs[i])] == 0,
               path_ << ": after attention fusion graph input '" << v.name << "' is still read; some attention subgraph was not fused");
      // Their exported geometry (a latent layer's fused op caches what the export did).
      const int64_t kvh = io_.kv_heads > 0 ? io_.kv_heads : kv_heads_;
      const int64_t kd = io_.head_dim > 0 ? io_.head_dim : head_dim_, vd = io_.value_dim > 0 ? io_.value_dim : kd;
      Shape s{1, kvh, 0, vd};
      for (const KvLayer& l : io_.layers) {
        if (l.past_key == slot) s = Shape{1, kvh, 0, kd};
        if (l.past_key == slot && l.key_seq_axis == 3) s = Shape{1, kvh, kd, 0};
      }
      shape_only_inputs_.emplace_back(slot, Tensor::empty(v.dtype == DType::Undefined ? DType::F32 : v.dtype, s));
    }
    return;
  }
  kv_heads_ = io_.kv_heads;
  head_dim_ = io_.head_dim;
  value_dim_ = io_.value_dim;
  kv_dtype_ = io_.kv_dtype;
  for (const KvLayer& l : io_.layers) {
    past_key_inputs_.push_back(l.past_key);
    past_value_inputs_.push_back(l.past_value);
    present_key_outputs_.push_back(l.present_key);
    present_value_outputs_.push_back(l.present_value);
  }
}

}  // namespace sy
