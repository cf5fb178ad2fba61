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
  // A mixture of experts in every layer instead of the dense MLP when
  // experts > 0: softmax routing, the top experts_per_token renormalised
  // (Qwen3-MoE's and Mixtral's), each expert a SwiGLU of width `hidden`,
  // written as transformers' batched experts export them (a Gather of the
  // stacked expert weights by index, then a batched MatMul).
  int64_t experts = 0, experts_per_token = 0;
};

// Presets: tiny, 15m, 42m, 110m, tinyllama-1.1b, llama3-8b, and the
// mixtures of experts moe-tiny, moe-small and qwen3-30b-a3b-2l (the expert
// shapes of Qwen3-30B-A3B in two layers).
const std::vector<SynthConfig>& synth_presets();
const SynthConfig& synth_preset(const std::string& name);  // throws listing the presets
int64_t synth_parameter_count(const SynthConfig& c);
// The parameters one token's decode multiplies by: the selected experts
// only (equal to synth_parameter_count for dense presets, less the
// embedding table it gathers one row of).
int64_t synth_active_parameter_count(const SynthConfig& c);

// Writes `path`; weights over 1 GiB in total go to `path`.data (external
// data beside the model). Deterministic for a given config and seed.
void write_synth_model(const SynthConfig& c, const std::string& path, uint64_t seed = 1);

}  // namespace sy
