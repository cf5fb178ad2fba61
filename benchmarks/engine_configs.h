// Engine configurations the benchmarks compare: baseline mode and fused
// attention over each cache manager (first-party plugins of this build), and
// the batch-1 measurements the per-model benchmarks share.
#pragma once
#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "base/half.h"
#include "engine/session.h"
#include "switchyard/plugin.h"

namespace sy::bench {

inline std::string shared_model(const std::string& stem) { return std::string(SWITCHYARD_SHARED_DIR) + "/models/" + stem + ".onnx"; }

inline EngineConfig mode_config(const std::string& model_path, const std::string& cache,
                                const std::map<std::string, std::string>& cache_options = {},
                                const std::map<std::string, std::string>& pass_options = {}, int threads = 2) {
  EngineConfig c;
  c.model = model_path;
  c.threads = threads;
  c.max_context = 8192;
  c.plugins = {PluginSpec{SY_ATTENTION_PLUGIN, std::nullopt, "bench"}, PluginSpec{SY_CACHE_PLUGIN, std::nullopt, "bench"}};
  if (cache.empty()) return c;
  ComponentSelection pass{"attention-fusion", {}, "bench"};
  for (const auto& [k, v] : pass_options) pass.options[k] = RawOption{v, "bench"};
  c.passes.push_back(pass);
  ComponentSelection cs{cache, {}, "bench"};
  for (const auto& [k, v] : cache_options) cs.options[k] = RawOption{v, "bench"};
  c.cache = cs;
  return c;
}

// Bytes of the constants a decode step streams, as the kernel that reads them
// stores them: an embedding Gather reads one row, not the table; the cuBLAS
// kernels keep fp32 weights as bf16 (half the bytes); the quantized kernels
// keep group scales that are fp16 values (what the quantize pass writes) as
// halves, though the graph holds them as float32 (MatMulNBits' layout).
// Whether every value of a float32 tensor is an fp16 value.
inline bool half_valued(const Tensor& t) {
  if (t.dtype() != DType::F32) return false;
  for (int64_t i = 0; i < t.numel(); ++i)
    if (half_to_float(float_to_half(t.data<float>()[i])) != t.data<float>()[i]) return false;
  return true;
}

// A mixture of experts' expert ops (switchyard::ExpertMatMul and
// ExpertMatMulNBits, plugins/moe) read, per token, the experts it selects:
// k of E matrices of each stack, k being the K of the TopK whose indices
// the op reads (followed up through reshapes). 0 when there is none.
inline int64_t experts_per_token(const Graph& g, const std::vector<NodeId>& producers, ValueId v) {
  for (int hops = 0; hops < 8 && v != kNoValue; ++hops) {
    const NodeId p = producers[static_cast<size_t>(v)];
    if (p < 0) return 0;
    const Node& n = g.nodes[static_cast<size_t>(p)];
    if (n.op_type == "TopK" && n.inputs.size() > 1 && g.values[static_cast<size_t>(n.inputs[1])].constant)
      return g.values[static_cast<size_t>(n.inputs[1])].constant->data<int64_t>()[0];
    if (n.op_type != "Reshape" && n.op_type != "Unsqueeze" && n.op_type != "Squeeze" && n.op_type != "Flatten" && n.op_type != "Cast")
      return 0;
    v = n.inputs[0];
  }
  return 0;
}

inline int64_t weight_bytes_per_token(const Executor& ex) {
  const Graph& g = ex.graph();
  const std::vector<NodeId> producers = g.producers();
  std::set<std::string> half_weight_nodes;
  for (const auto& p : ex.placements())
    if (p.device == Device::CUDA && p.provider == "builtin" && (p.op == "MatMul" || p.op == "Gemm")) half_weight_nodes.insert(p.node);
  std::map<ValueId, int64_t> streamed;
  for (const auto& n : g.nodes) {
    if (n.dead) continue;
    const bool half = half_weight_nodes.count(n.name) > 0;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      ValueId v = n.inputs[i];
      if (v == kNoValue || !g.values[static_cast<size_t>(v)].constant || (n.op_type == "Gather" && i == 0)) continue;
      const Tensor& c = *g.values[static_cast<size_t>(v)].constant;
      const int64_t b = static_cast<int64_t>(c.bytes());
      const bool quantized = n.op_type == SY_OP_QMATMUL || n.op_type == SY_ORT_OP_MATMUL_NBITS;
      const bool experts = n.op_type == "ExpertMatMul" || n.op_type == "ExpertMatMulNBits";
      const bool scales = (quantized && i == 2) || (n.op_type == "ExpertMatMulNBits" && i == 3);  // codes come first
      int64_t read = (half && i == 1) || (scales && half_valued(c)) ? b / 2 : b;
      if (experts && i >= 2) {
        const int64_t k = experts_per_token(g, producers, n.inputs[1]);
        const int64_t E = n.op_type == "ExpertMatMul" ? c.shape()[0] : std::get<int64_t>(n.attrs.at("experts"));
        if (k > 0 && E > 0) read = read * std::min(k, E) / E;
      }
      streamed[v] = std::max(streamed[v], read);
    }
  }
  int64_t bytes = 0;
  for (const auto& [v, b] : streamed) bytes += b;
  return bytes;
}

struct Batch1 {
  double decode_tps = 0, prefill_tps = 0;
};

// Batch-1 decode tokens/s (`decode` tokens after a `depth`-token prompt,
// 8 by default) and prefill tokens/s (`prefill`-token prompt; 0 skips it),
// best of 3 after a warm-up: noise on a shared machine only ever adds time.
// Past 1024 tokens of depth, one measurement (each costs a long prefill;
// the callers interleave rounds instead).
inline Batch1 measure_batch1(Session& session, int decode, int prefill, int depth = 8) {
  const int64_t vocab = session.model().vocab_size() > 0 ? session.model().vocab_size() : 512;
  auto request = [&](int prompt_len, int max_tokens, int seed) {
    GenerationRequest r;
    for (int i = 0; i < prompt_len; ++i) r.prompt.push_back(static_cast<int>(1 + (i * 7919 + seed * 104729) % (vocab - 1)));
    r.max_tokens = max_tokens;
    r.stop_at_eos = false;
    return r;
  };
  session.generate({request(8, 4, 0)});  // warm up: pools, first-touch pages, device caches
  Batch1 f;
  const int reps = depth > 1024 ? 1 : 3;
  for (int rep = 0; rep < reps; ++rep) {
    auto d = session.generate({request(depth, decode, rep + 1)})[0];
    f.decode_tps = std::max(f.decode_tps, 1000.0 / d.tpot_ms());
    if (prefill <= 0) continue;
    auto p = session.generate({request(prefill, 1, rep + 11)})[0];
    f.prefill_tps = std::max(f.prefill_tps, prefill / (p.ttft_ms / 1000.0));
  }
  return f;
}

// Batched decode as llama-batched-bench measures it (S_TG): `batch`
// sequences of a `prompt`-token prompt each, submitted together, generating
// `decode` tokens; the generation phase runs from the moment every sequence
// has its first token to the last token, and its throughput is the tokens
// generated in it over its length. Best of 2 after a warm-up. Also the
// prompt phase's tokens/s (all prompts over the last first token's time).
inline Batch1 measure_batched(Session& session, int batch, int prompt, int decode) {
  const int64_t vocab = session.model().vocab_size() > 0 ? session.model().vocab_size() : 512;
  auto requests = [&](int seed) {
    std::vector<GenerationRequest> out;
    for (int b = 0; b < batch; ++b) {
      GenerationRequest r;
      for (int i = 0; i < prompt; ++i) r.prompt.push_back(static_cast<int>(1 + (i * 7919 + (seed * 131 + b) * 104729) % (vocab - 1)));
      r.max_tokens = decode;
      r.stop_at_eos = false;
      out.push_back(r);
    }
    return out;
  };
  session.generate(requests(0));  // warm up
  Batch1 f;
  for (int rep = 1; rep <= 2; ++rep) {
    const auto results = session.generate(requests(rep));
    double start = 0, end = 0;
    for (const auto& r : results) {
      start = std::max(start, r.ttft_ms);
      end = std::max(end, r.e2e_ms);
    }
    int64_t tokens = 0;
    for (const auto& r : results)
      for (double t : r.token_ms) tokens += t > start;
    if (end > start) f.decode_tps = std::max(f.decode_tps, 1000.0 * static_cast<double>(tokens) / (end - start));
    f.prefill_tps = std::max(f.prefill_tps, 1000.0 * batch * prompt / start);
  }
  return f;
}

}  // namespace sy::bench
