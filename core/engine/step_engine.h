// The ragged step engine: every forward pass runs a flattened batch of
// prefill chunks and decode tokens from many sequences over the KV cache of
// a cache-manager plugin, through the PagedAttention nodes of a graph the
// attention-fusion pass rewrote. A built-in FCFS batcher admits requests per
// step within a token budget, splits long prompts into chunks, and preempts
// (by recompute) the newest sequence when the cache is full.
#pragma once
#include <memory>
#include <vector>

#include "engine/decoder_model.h"
#include "engine/generator.h"
#include "plugin_host/components.h"

namespace sy {

struct StepEngineOptions {
  int max_batch_tokens = 512;  // tokens per forward pass
  int max_seqs = 64;           // sequences per forward pass
};

struct StepEngineMetrics {
  int64_t steps = 0;
  int64_t prompt_tokens = 0;    // prompt tokens of all requests
  int64_t cached_tokens = 0;    // of those, found in the prefix cache
  int64_t computed_tokens = 0;  // tokens run through the model
  int64_t preemptions = 0;
  int64_t mixed_steps = 0;      // steps that ran prefill chunks and decode tokens together
  int32_t total_blocks = 0;
  int32_t peak_used_blocks = 0;
  // KV slots held but not holding a token, per sequence: the worst step's
  // average over its sequences, and the worst single sequence.
  double max_mean_waste_tokens = 0;
  int64_t max_waste_tokens = 0;
  double prefix_hit_rate() const { return prompt_tokens ? static_cast<double>(cached_tokens) / static_cast<double>(prompt_tokens) : 0.0; }
};

class StepEngine {
 public:
  StepEngine(DecoderModel& model, PluginCacheManager& cache, StepEngineOptions options = {});
  ~StepEngine();

  std::vector<GenerationResult> generate(const std::vector<GenerationRequest>& requests, const TokenCallback& on_token = {});
  std::vector<float> last_logits(const std::vector<int>& prompt);
  // Logits [tokens, vocab] at every position of one prompt, computed in one
  // forward (teacher forcing, for quality measurements).
  Tensor prompt_logits(const std::vector<int>& prompt);
  const StepEngineMetrics& metrics() const { return metrics_; }
  PluginCacheManager& cache() { return cache_; }

 private:
  struct Seq;
  struct Scheduled {
    Seq* seq;
    int32_t tokens;
  };
  Tensor forward(const std::vector<Scheduled>& batch);
  void validate(const GenerationRequest& r) const;

  DecoderModel& model_;
  PluginCacheManager& cache_;
  StepEngineOptions options_;
  StepEngineMetrics metrics_;
  std::vector<sy_tensor> key_cache_, value_cache_;
  int32_t block_size_ = 0;
  uint64_t next_id_ = 1;
};

}  // namespace sy
