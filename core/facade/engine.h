// The engine's public C++ facade: what a C++ program built with Switchyard
// (the CLI, the benchmark runner, an embedder that wants C++ types) uses
// instead of the engine's internals. It is to the core what llama.h is to
// llama.cpp: one class over the session, the step engine, the manifest and
// the plugin host, whose headers stay out of its callers' sight (the test
// cli_uses_only_the_facade holds tools/cli and tools/bench to it).
//
// Its vocabulary is plain data shared with the core: requests, results and
// sampling (engine/request.h), the step engine's counters and events
// (engine/step_metrics.h), the model folder with its tokenizer and chat
// template (model/model_folder.h) and sy::Error (base/error.h). The C API
// (switchyard.h, core/api) is a thin layer over this class, for programs in
// other languages and for the server, Python and Ray.
#pragma once
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/step_metrics.h"
#include "model/model_folder.h"

namespace sy {

// Where an engine's configuration comes from: a manifest profile, with the
// command line's overrides on top.
struct EngineOptions {
  std::string manifest;  // YAML manifest ("": none; then `model` is required)
  std::string profile;   // "" : the manifest's top level
  std::string model;     // overrides the manifest's
  std::string tokenizer;      // overrides the manifest's 'tokenizer:' (a file or a folder)
  std::string chat_template;  // overrides the manifest's 'chat_template:' (.jinja or .json)
  std::string tool_parser;    // overrides the manifest's 'tool_parser:' (text/tool_calls.h's family names)
  std::string device;    // cpu, cuda, cuda:N or auto; "" : the manifest's
  int threads = 0;       // 0: the manifest's, else one per core
  int64_t max_context = 0;  // 0: the manifest's, the model's metadata, else 4096
  // Passes of the profile to leave out (eval's baseline: the profile
  // without 'quantize'). Each must be in the profile.
  std::vector<std::string> without_passes;
  // The prepared graph only: no scheduler and no drafter (optimize).
  bool graph_only = false;
  // A GGUF model's weights all as float32 (graph/gguf_model.h).
  bool gguf_dequantize = false;
};

// Throws sy::Error naming a malformed device spec (before anything loads).
void check_device_spec(const std::string& spec);

// What `optimize` wrote.
struct OnnxExportSummary {
  size_t nodes = 0, initializers = 0;
  uint64_t initializer_bytes = 0;
  bool external_data = false;  // weights in <path>.data
};

// What a benchmark needs to know about the engine it drives, to compute
// MBU and KV usage.
struct EngineFootprint {
  int threads = 1;
  int64_t weight_bytes = 0;        // read by one forward pass as prepared
  int64_t kv_bytes_per_token = 0;  // keys and values of every layer
};

class Engine {
 public:
  // Loads plugins, runs the passes, plans the model and starts the step
  // engine. Throws sy::Error naming the manifest line, file or plugin.
  static std::unique_ptr<Engine> open(const EngineOptions& options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // The resolved configuration.
  const std::string& model_path() const;
  const std::string& manifest_path() const;  // "" without a manifest
  const std::string& profile() const;
  const std::string& tokenizer_path() const;  // the manifest's 'tokenizer:' ("" : none)
  // Why the top level's passes or cache manager were dropped for the graph
  // as exported (the manifest's `unfused_fallback`); "" when they were not.
  const std::string& fallback_reason() const;
  int64_t vocab_size() const;
  int64_t max_context() const;
  // The model argument with its tokenizer, chat template, eos ids and
  // recommended sampling (model/model_folder.h), the options' overrides on top.
  const ModelFolder& folder() const;
  // The sampling the model folder recommends (generation_config.json).
  SamplingDefaults recommended_sampling() const;

  // Runs requests to completion: on the step engine when the profile selects
  // a cache manager, else as one padded batch of the graph as exported.
  std::vector<GenerationResult> generate(const std::vector<GenerationRequest>& requests, const TokenCallback& on_token = {});
  // Logits [vocab] at the last position of one prompt.
  std::vector<float> last_logits(const std::vector<int>& prompt);
  // Logits [prompt.size() x vocab], row-major, at every position (teacher
  // forcing, one forward). Needs the step engine.
  std::vector<float> prompt_logits(const std::vector<int>& prompt);
  // Each prompt token's log-probability after the ones before it (positions
  // 1..n-1) with the `top` most likely alternatives: an eval harness's
  // loglikelihood (OpenAI's echo, vLLM's prompt_logprobs).
  std::vector<TokenLogprobs> prompt_logprobs(const std::vector<int>& prompt, int top);
  // One prompt's embedding: its final hidden states pooled and normalised by
  // the model's convention (ModelFolder::embedding_convention). Needs the
  // step engine and an LM head the logits-selection pass splits off.
  std::vector<float> embedding(const std::vector<int>& prompt);
  const EmbeddingConvention& embedding_convention() const;
  // Every prompt position's final hidden state (the LM head's input),
  // [prompt.size() x hidden] row-major, teacher-forced; *dim gets hidden.
  // And rows of hidden states [n x dim] through the model's own LM head:
  // logits [n x vocab]. What drafting heads are trained from and score with.
  std::vector<float> hidden_states(const std::vector<int>& prompt, int64_t* dim);
  std::vector<float> project_hidden(const float* rows, int64_t n, int64_t dim, int64_t* vocab);

  // The asynchronous interface of the step engine (a server's): is there one,
  // submit from any thread, the counters so far. submit throws sy::Error for
  // a request the engine refuses; on_finish runs on the engine thread.
  bool has_step_engine() const;
  std::future<GenerationResult> submit(const GenerationRequest& request, std::function<void(const GenerationResult&)> on_finish = {});
  // The same with streaming callbacks (on the engine thread); returns the
  // id cancel takes. Thread-safe.
  uint64_t submit(const GenerationRequest& request, RequestCallbacks callbacks);
  // Thread-safe; unknown or finished ids are ignored.
  void cancel(uint64_t id);
  StepEngineMetrics metrics() const;
  // Structured output's counters (zero without a logits processor).
  ConstraintMetrics constraint_metrics() const;

  // The step engine's KV cache, for routers and disaggregated serving: the
  // block size its hashes use, its events (kv_block_hashes names the
  // blocks), and the transfer of a cached prefix between engines.
  int32_t kv_block_size() const;
  // Throws Unsupported naming the cache manager when it reports no events.
  void enable_kv_events(size_t capacity);
  std::vector<KvEvent> poll_kv_events(size_t max);
  int32_t kv_events_device() const;
  std::string export_kv(const std::vector<int32_t>& ids);
  int32_t import_kv(const std::string& data);
  EngineFootprint footprint() const;

  // What the engine made of the model and the manifest: inputs, outputs,
  // plugins and their components, passes, op counts per stage, kernels
  // used, fused attention per layer, equivalence probes, the device.
  nlohmann::json describe() const;
  // The KV cache's bytes per token under each storage strategy, with the
  // seed's formula filled in and how many sequences of sequence_tokens fit
  // in memory_bytes (facade/kv_memory.h).
  nlohmann::json kv_memory(int64_t sequence_tokens, int64_t memory_bytes) const;
  // Writes the graph as the passes left it (optimize).
  OnnxExportSummary export_onnx(const std::string& path) const;

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The CPU and the accelerators this build can use: {"cpu", "cuda_build",
// "cuda_devices", "cuda_unavailable"?, "devices": [{"device",
// "description", "peak_bandwidth_gbs"?, "copy_bandwidth_gbs"?}]}.
nlohmann::json probe_devices(bool measure_copy_bandwidth);

// switchyard convert: a GGUF file as the model folder transformers and
// onnxruntime read: model.onnx (+ model.onnx.data), config.json,
// generation_config.json, tokenizer.json, tokenizer_config.json (with the
// chat template). Returns what was written and what became of the tensors:
// {"files": [...], "architecture", "stored_types", "kept_quantized", "dequantized"}.
nlohmann::json convert_gguf(const std::string& gguf_path, const std::string& out_dir, bool dequantize);

}  // namespace sy
