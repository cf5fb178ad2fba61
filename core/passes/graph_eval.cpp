#include "passes/graph_eval.h"

#include "switchyard/plugin.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

namespace sy {

SubgraphRunner::SubgraphRunner(const Graph& g, const KernelRegistry& registry, ThreadPool* threads,
                               const std::vector<ValueId>& fed, const std::vector<ValueId>& want) {
  auto copy = std::make_shared<Graph>(g);
  Graph& c = *copy;
  // Kernels with a rounding fast path take their exact one here (SY_ATTR_PROBE).
  for (Node& n : c.nodes)
    if (!n.dead && !n.domain.empty() && n.domain != "ai.onnx") n.attrs[SY_ATTR_PROBE] = int64_t{1};
  // Each fed value becomes a fresh graph input that its readers use instead.
  std::vector<ValueId> fresh(fed.size());
  for (size_t i = 0; i < fed.size(); ++i) {
    const Value& v = c.values[static_cast<size_t>(fed[i])];
    Value in;
    in.name = "fed:" + v.name;
    in.dtype = v.dtype;
    in.is_graph_input = true;
    fresh[i] = c.add_value(std::move(in));
    c.replace_all_uses(fed[i], fresh[i]);
  }
  std::vector<ValueId> wanted = want;
  for (ValueId& w : wanted)
    for (size_t i = 0; i < fed.size(); ++i)
      if (w == fed[i]) w = fresh[i];
  c.outputs.clear();
  for (size_t i = 0; i < wanted.size(); ++i) c.outputs.push_back({"want" + std::to_string(i), wanted[i]});
  c.inputs = fresh;
  // Keep only the nodes the wanted values depend on.
  std::vector<NodeId> producer = c.producers();
  std::vector<bool> needed_value(c.values.size(), false), live(c.nodes.size(), false);
  std::vector<ValueId> stack(wanted.begin(), wanted.end());
  while (!stack.empty()) {
    ValueId v = stack.back();
    stack.pop_back();
    if (v == kNoValue || needed_value[static_cast<size_t>(v)]) continue;
    needed_value[static_cast<size_t>(v)] = true;
    NodeId p = producer[static_cast<size_t>(v)];
    if (p < 0 || live[static_cast<size_t>(p)]) continue;
    live[static_cast<size_t>(p)] = true;
    for (ValueId in : c.nodes[static_cast<size_t>(p)].inputs) stack.push_back(in);
  }
  for (size_t n = 0; n < c.nodes.size(); ++n)
    if (!live[n]) c.nodes[n].dead = true;
  fed_ = fed;
  reads_.resize(fed.size());
  for (size_t i = 0; i < fed.size(); ++i) reads_[i] = needed_value[static_cast<size_t>(fresh[i])];
  // Graph inputs nobody feeds stay declared (a node reading one fails clearly).
  for (ValueId in : g.inputs)
    if (std::find(fed.begin(), fed.end(), in) == fed.end() && needed_value[static_cast<size_t>(in)])
      SY_THROW("evaluating the graph needs graph input '" << g.values[static_cast<size_t>(in)].name << "', which was not given");
  c.compact();
  graph_ = copy;
  executor_ = std::make_unique<Executor>(graph_, registry, threads);
  input_of_fed_.assign(fed.size(), -1);
  for (size_t i = 0; i < fed.size(); ++i) input_of_fed_[i] = static_cast<int>(i);
}

std::vector<Tensor> SubgraphRunner::run(const std::vector<Tensor>& feeds, const void* step) {
  SY_CHECK(feeds.size() == input_of_fed_.size(), "subgraph runner: " << feeds.size() << " feeds for " << input_of_fed_.size() << " inputs");
  std::vector<Tensor> inputs(graph_->inputs.size());
  for (size_t i = 0; i < feeds.size(); ++i)
    if (reads_[i]) inputs[static_cast<size_t>(input_of_fed_[i])] = feeds[i];
  return executor_->run(inputs, step);
}

bool SubgraphRunner::reads_input(ValueId fed_value) const {
  for (size_t i = 0; i < fed_.size(); ++i)
    if (fed_[i] == fed_value) return reads_[i];
  return false;
}

int64_t ProbeCase::width() const { return lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end()); }

const Tensor* ProbeInputs::find(ValueId v) const {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] == v) return &tensors[i];
  return nullptr;
}

ProbeInputs synthetic_decoder_inputs(const Graph& g, const ModelIO& io, const ProbeCase& c, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t B = c.batch(), L = c.width(), P = c.past;
  ProbeInputs out;
  auto add = [&](int slot, Tensor t) {
    if (slot < 0) return;
    out.ids.push_back(g.inputs[static_cast<size_t>(slot)]);
    out.tensors.push_back(std::move(t));
  };
  std::uniform_int_distribution<int64_t> token(0, std::max<int64_t>(vocab, 2) - 1);
  Tensor ids = Tensor::empty(DType::I64, Shape{B, L});
  Tensor mask = Tensor::empty(DType::I64, Shape{B, P + L});
  Tensor pos = Tensor::empty(DType::I64, Shape{B, L});
  out.tokens.resize(static_cast<size_t>(B));
  for (int64_t r = 0; r < B; ++r) {
    const int64_t n = c.lengths[static_cast<size_t>(r)], pad = L - n;
    const int64_t first = c.right_pad ? 0 : pad;  // where the row's real tokens start
    for (int64_t j = 0; j < P; ++j) mask.data<int64_t>()[r * (P + L) + j] = 1;
    int64_t p = P;
    for (int64_t j = 0; j < L; ++j) {
      const bool real = j >= first && j < first + n;
      const int64_t t = real ? token(rng) : 0;
      ids.data<int64_t>()[r * L + j] = t;
      mask.data<int64_t>()[r * (P + L) + P + j] = real ? 1 : 0;
      // Padded positions get 1, as Hugging Face's exports compute them.
      pos.data<int64_t>()[r * L + j] = real ? p++ : 1;
      if (real) out.tokens[static_cast<size_t>(r)].push_back(t);
    }
  }
  add(io.input_ids, ids);
  add(io.attention_mask, mask);
  add(io.position_ids, pos);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (const KvLayer& l : io.layers) {
    for (int slot : {l.past_key, l.past_value}) {
      const bool key = slot == l.past_key;
      const int64_t d = key || io.value_dim == 0 ? io.head_dim : io.value_dim;
      Shape s = key && l.key_seq_axis == 3 ? Shape{B, io.kv_heads, d, P} : Shape{B, io.kv_heads, P, d};
      SY_CHECK(io.kv_dtype == DType::F32, "synthetic past inputs: KV dtype " << dtype_name(io.kv_dtype) << " is not supported");
      Tensor t = Tensor::empty(DType::F32, s);
      for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = normal(rng);
      (key ? out.past_keys : out.past_values).push_back(t);
      add(slot, t);
    }
  }
  return out;
}

ScratchStep::ScratchStep(const ModelIO& io, const ProbeCase& c, const ProbeInputs& inputs, int32_t block_size) {
  const int64_t B = c.batch(), P = c.past, KVH = io.kv_heads, BS = block_size;
  int32_t max_blocks = 1;
  for (int64_t r = 0; r < B; ++r) max_blocks = std::max<int32_t>(max_blocks, static_cast<int32_t>((P + c.lengths[static_cast<size_t>(r)] + BS - 1) / BS));
  const int64_t NB = B * max_blocks;
  tables_.assign(static_cast<size_t>(B * max_blocks), 0);
  query_start_.push_back(0);
  for (int64_t r = 0; r < B; ++r) {
    for (int32_t k = 0; k < max_blocks; ++k) tables_[static_cast<size_t>(r * max_blocks + k)] = static_cast<int32_t>(r * max_blocks + k);
    const auto& toks = inputs.tokens[static_cast<size_t>(r)];
    for (size_t j = 0; j < toks.size(); ++j) {
      flat_tokens_.push_back(toks[j]);
      positions_.push_back(P + static_cast<int64_t>(j));
    }
    query_start_.push_back(static_cast<int32_t>(flat_tokens_.size()));
    context_len_.push_back(static_cast<int32_t>(P + static_cast<int64_t>(toks.size())));
    seq_ids_.push_back(static_cast<uint64_t>(r));
  }
  // Each layer's cache holds the rows' past keys and values in their blocks.
  for (size_t layer = 0; layer < io.layers.size(); ++layer) {
    for (bool key : {true, false}) {
      const int64_t D = key || io.value_dim == 0 ? io.head_dim : io.value_dim;
      Tensor cache = Tensor::empty(DType::F32, Shape{NB, KVH, BS, D});
      std::memset(cache.raw(), 0, cache.bytes());
      const Tensor& past = (key ? inputs.past_keys : inputs.past_values)[layer];
      const bool transposed = key && io.layers[layer].key_seq_axis == 3;
      float* dst = cache.data<float>();
      const float* src = past.data<float>();
      for (int64_t r = 0; r < B; ++r)
        for (int64_t g = 0; g < KVH; ++g)
          for (int64_t p = 0; p < P; ++p) {
            const int64_t block = tables_[static_cast<size_t>(r * max_blocks + p / BS)];
            float* d = dst + ((block * KVH + g) * BS + p % BS) * D;
            for (int64_t i = 0; i < D; ++i)
              d[i] = transposed ? src[((r * KVH + g) * D + i) * P + p] : src[((r * KVH + g) * P + p) * D + i];
          }
      (key ? keys_ : values_).push_back(cache);
    }
  }
  for (size_t layer = 0; layer < keys_.size(); ++layer) {
    auto view = [](Tensor& t) {
      return sy_tensor{static_cast<int32_t>(t.dtype()), t.rank(), t.shape().begin(), t.raw(), SY_DEVICE_CPU, 0};
    };
    key_views_.push_back(view(keys_[layer]));
    value_views_.push_back(view(values_[layer]));
  }
  step_.num_layers = static_cast<int32_t>(keys_.size());
  step_.key_cache = key_views_.data();
  step_.value_cache = value_views_.data();
  step_.struct_size = sizeof(step_);
  step_.num_seqs = static_cast<int32_t>(B);
  step_.num_tokens = static_cast<int32_t>(flat_tokens_.size());
  step_.query_start = query_start_.data();
  step_.context_len = context_len_.data();
  step_.positions = positions_.data();
  step_.seq_ids = seq_ids_.data();
  step_.block_tables = tables_.data();
  step_.max_blocks_per_seq = max_blocks;
  step_.block_size = block_size;
}

int64_t model_context_length(const Graph& g, const GenaiConfig* genai, int64_t config_context, const std::string& model_path) {
  if (genai && genai->context_length > 0) return genai->context_length;
  for (const char* key : {"max_position_embeddings", "context_length", "max_seq_len", "n_ctx"}) {
    auto it = g.metadata.find(key);
    if (it == g.metadata.end()) continue;
    try {
      return std::stoll(it->second);
    } catch (const std::exception&) {
      SY_THROW(model_path << ": metadata '" << key << "' is not a number: '" << it->second << "'");
    }
  }
  return config_context;
}

int64_t model_vocab_size(const Graph& g, const ModelIO& io) {
  if (io.logits < 0) return 0;
  const Value& v = g.values[static_cast<size_t>(g.outputs[static_cast<size_t>(io.logits)].value)];
  return v.shape && !v.shape->empty() && v.shape->back().is_static() ? v.shape->back().value : 0;
}

}  // namespace sy
