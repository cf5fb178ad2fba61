// Writes Llama-style decoder-with-past ONNX models with deterministic random
// weights, in the export structure of the shared models (RMSNorm as
// Pow/ReduceMean/Add/Sqrt/Div/Mul, adjacent-pair RoPE by strided Slice, GQA
// head repeat by Unsqueeze/Expand/Reshape, KV Concat with past, causal and
// padding mask, SwiGLU), so every engine mode runs on them. Real weights
// cannot be downloaded here; these give realistic sizes for benchmarks.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace sy {

struct SynthConfig {
  std::string name;
  int64_t dim, layers, heads, kv_heads, hidden, vocab, max_context;
  bool tied_classifier = false;
};

// Presets: tiny, 15m, 42m, 110m, tinyllama-1.1b, llama3-8b.
const std::vector<SynthConfig>& synth_presets();
const SynthConfig& synth_preset(const std::string& name);  // throws listing the presets
int64_t synth_parameter_count(const SynthConfig& c);

// Writes `path`; weights over 1 GiB in total go to `path`.data (external
// data beside the model). Deterministic for a given config and seed.
void write_synth_model(const SynthConfig& c, const std::string& path, uint64_t seed = 1);

}  // namespace sy
