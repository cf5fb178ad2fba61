// The manifest: a YAML file naming the model, the plugins, the passes in
// order with options, the kernel policy, the scheduler, cache manager,
// drafter and logits processor, and named profiles that override any of those keys. Paths are
// relative to the manifest; ${VAR} and ${VAR:-default} expand from the
// environment; every error names the file, line and key.
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "plugin_host/options.h"

namespace sy {

struct ComponentSelection {
  std::string name;
  std::map<std::string, RawOption> options;
  std::string where;  // "m.yaml:12: passes[0]"
  // Schedulers only: what the engine does when the plugin's plan keeps
  // failing (limits.max_plugin_failures in a row): "fail" the queued
  // requests with its message, or fall back to the "builtin" batcher.
  std::string on_failure = "fail";
  // Drafters only: "adaptive" (the engine's speculation policy chooses each
  // sequence's draft length per step, up to the drafter's k, and drafts
  // nothing when it would not pay) or "fixed" (always k).
  std::string draft_length = "adaptive";
};

struct PluginSpec {
  std::string path;  // resolved against the manifest's folder
  std::optional<std::string> sha256;
  std::string where;
};

struct KernelPolicy {
  std::set<std::string> forbid;             // providers never used
  std::map<std::string, std::string> pin;   // op type -> the only provider allowed
};

// Resource limits (manifest `limits:`), refused with an error naming the
// limit. Defaults are generous for real models and finite for hostile ones.
struct ResourceLimits {
  uint64_t max_model_bytes = uint64_t{64} << 30;  // the .onnx file
  int64_t max_tensors = 1'000'000;                // initializers plus nodes
  int64_t max_graph_depth = 100'000;              // longest node chain
  int64_t max_prompt_tokens = 0;                  // 0: the model's context
  int64_t max_kv_mb = 64 * 1024;                  // the cache manager's KV storage
  int64_t max_queue = 4096;                       // requests waiting or running in the step engine
  int64_t max_plugin_failures = 3;                // failed steps in a row before a scheduler is out of service
};

struct EngineConfig {
  std::string manifest_path;
  std::string profile;  // "" = the top level
  std::string model;
  std::string tokenizer;      // "" : the model folder's (model/model_folder.h)
  std::string chat_template;  // a .jinja or .json template file; "" : the model folder's
  std::string tool_parser;    // the tool-call family (text/tool_calls.h); "" : the chat template's
  std::vector<PluginSpec> plugins;
  std::vector<ComponentSelection> passes;
  std::optional<ComponentSelection> scheduler, cache, drafter;
  // Structured output: the processor that masks constrained requests'
  // logits (in every mode; requests without a constraint never reach it).
  std::optional<ComponentSelection> logits_processor;
  KernelPolicy kernels;
  int threads = 0;
  // cpu, cuda, cuda:N or auto (CUDA when present). On CUDA, nodes with a CUDA
  // kernel run there and the rest on the CPU, with the copies planned.
  std::string device = "cpu";
  int64_t max_context = 0;
  int max_batch_tokens = 512;  // step engine: tokens per forward pass
  int max_seqs = 64;           // step engine: sequences per forward pass
  bool simplify = true;
  // A GGUF model: every weight as float32 (transformers' view of the file)
  // instead of keeping Q8_0/Q4_0/Q4_1 blocks quantized.
  bool gguf_dequantize = false;
  // The top level's `unfused_fallback: true`: when its passes or cache
  // manager cannot take the model (a pass refuses it, attention does not
  // fuse), the session runs the graph as exported instead (no passes, no
  // cache manager) and says why (Session::fallback_reason). The default
  // manifest's: the fastest exact mode where the model allows it.
  bool unfused_fallback = false;
  ResourceLimits limits;
};

class Manifest {
 public:
  static Manifest load(const std::string& path);
  static Manifest parse(const std::string& text, const std::string& path);  // path: for messages and relative paths
  // The configuration of a profile ("" = top level only). Unknown profiles
  // are an error listing the known ones.
  EngineConfig resolve(const std::string& profile) const;
  std::vector<std::string> profile_names() const;
  const std::string& path() const { return path_; }

 private:
  static Manifest parse_unchecked(const std::string& text, const std::string& path);
  struct Impl;
  std::shared_ptr<const Impl> impl_;
  std::string path_;
};

}  // namespace sy
