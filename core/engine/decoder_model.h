// A decoder-only ONNX model made ready to run: imported, simplified, planned,
// with its decoder-with-past interface discovered (input_ids, attention_mask,
// position_ids, past_key_values.N.key/value -> logits, present.N.key/value).
#pragma once
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "graph/gguf_model.h"
#include "graph/model_io.h"
#include "model/model_folder.h"
#include "graph/onnx_import.h"
#include "passes/equivalence_probe.h"
#include "passes/pass.h"
#include "runtime/executor.h"

namespace sy {

struct ModelOptions {
  bool simplify = true;
  int64_t max_context = 0;  // 0: the model's metadata, else 4096
  ExecutorOptions executor;
  ImportOptions import;
  GgufModelOptions gguf;  // a GGUF model file (graph/gguf_model.h)
};

// Graph-rewrite passes run between import and planning, in order. The
// built-in simplification runs after them (and before, so passes see a
// clean graph).
struct PreparedGraphReport {
  size_t imported_nodes = 0;
  int64_t parameters = 0;       // stored initializer elements as imported
  int64_t parameter_bytes = 0;
  // The weights one forward pass reads, as prepared (after quantization;
  // gathered-from tables excluded): the bytes MBU divides by.
  int64_t weight_bytes = 0;
  std::vector<std::pair<std::string, std::map<std::string, int>>> op_counts_after;  // (stage, counts)
  std::vector<ProbeReport> probes;  // the equivalence probe of each plugin pass that changed the graph
  std::optional<GgufModelSummary> gguf;  // a GGUF model: what became of its tensors
};

// Import, simplify, run the passes, simplify again, plan: the graph as the
// executor will run it. Errors name the model file.
std::unique_ptr<Executor> prepare_executor(const ModelFolder& folder, const KernelRegistry& registry, ThreadPool* threads,
                                           const ModelOptions& options, const std::vector<GraphPass*>& passes,
                                           PreparedGraphReport* report);

class DecoderModel {
 public:
  static std::unique_ptr<DecoderModel> load(const ModelFolder& folder, const KernelRegistry& registry, ThreadPool* threads,
                                            const ModelOptions& options = {},
                                            const std::vector<GraphPass*>& passes = {},
                                            PreparedGraphReport* report = nullptr);
  // A model argument opened as its folder (ModelFolder::open).
  static std::unique_ptr<DecoderModel> load(const std::string& model, const KernelRegistry& registry, ThreadPool* threads,
                                            const ModelOptions& options = {},
                                            const std::vector<GraphPass*>& passes = {},
                                            PreparedGraphReport* report = nullptr) {
    return load(ModelFolder::open(model), registry, threads, options, passes, report);
  }

  Executor& executor() { return *executor_; }
  const Graph& graph() const { return executor_->graph(); }
  const std::string& path() const { return path_; }

  int num_layers() const { return paged_ ? num_paged_layers_ : static_cast<int>(past_key_inputs_.size()); }
  int64_t kv_heads() const { return kv_heads_; }
  int64_t head_dim() const { return head_dim_; }
  // The values' head size (an MLA export's cached rope key differs from its latent keys).
  int64_t value_dim() const { return value_dim_ > 0 ? value_dim_ : head_dim_; }
  int64_t max_context() const { return max_context_; }
  bool has_kv_cache() const { return !past_key_inputs_.empty(); }
  // True when the attention-fusion pass replaced attention with
  // PagedAttention nodes: the model then runs in the step engine only.
  bool paged_attention() const { return paged_; }
  int64_t vocab_size() const { return vocab_size_; }  // -1 if not static
  // End-of-sequence ids (ModelFolder::eos_ids).
  const std::vector<int>& eos_ids() const { return eos_ids_; }
  // Whether tok ends a sequence: a request's own list, else the model's.
  bool is_eos(int tok, const std::vector<int>& request_ids) const {
    const auto& ids = request_ids.empty() ? eos_ids_ : request_ids;
    return std::find(ids.begin(), ids.end(), tok) != ids.end();
  }
  // Throws for a prompt this model cannot take: empty, over the context
  // limit, or with a token id outside the vocabulary.
  void check_prompt(const std::vector<int>& prompt) const;
  DType kv_dtype() const { return kv_dtype_; }
  // The interface by role (graph/model_io.h) and genai_config.json if any.
  const ModelIO& io() const { return io_; }
  const std::optional<GenaiConfig>& genai_config() const { return genai_; }
  // Rows are right-padded and positions come from the mask sums
  // (onnxruntime-genai builder models); otherwise left-padded.
  bool right_padding() const { return io_.right_padding; }

  // Input/output slots (indices into the executor's input/output lists).
  int input_ids = -1, attention_mask = -1, position_ids = -1;
  int logits_indices = -1;  // step engine: rows the LM head computes (logits-selection pass)
  int logits = -1;
  int hidden_states = -1;  // step engine: the LM head's input, every token (logits-selection pass); -1 without
  const std::vector<int>& past_key_inputs() const { return past_key_inputs_; }
  const std::vector<int>& past_value_inputs() const { return past_value_inputs_; }
  const std::vector<int>& present_key_outputs() const { return present_key_outputs_; }
  const std::vector<int>& present_value_outputs() const { return present_value_outputs_; }
  // Step engine: past inputs the fused graph reads only the shape of, with
  // the empty one-row tensor to feed each.
  const std::vector<std::pair<int, Tensor>>& shape_only_inputs() const { return shape_only_inputs_; }

 private:
  void discover_interface();

  std::string path_;
  std::optional<GenaiConfig> genai_;
  ModelIO io_;
  std::unique_ptr<Executor> executor_;
  std::vector<int> past_key_inputs_, past_value_inputs_, present_key_outputs_, present_value_outputs_;
  std::vector<std::pair<int, Tensor>> shape_only_inputs_;
  int64_t kv_heads_ = 0, head_dim_ = 0, value_dim_ = 0, max_context_ = 4096, vocab_size_ = -1;
  int num_paged_layers_ = 0;
  std::vector<int> eos_ids_{2};
  bool paged_ = false;
  DType kv_dtype_ = DType::F32;
};

}  // namespace sy
