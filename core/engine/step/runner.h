// The model runner: a plan laid out as one ragged forward (token ids,
// positions, and the sy_step_context the PagedAttention kernels and the
// cache manager read) and run; the logits of the sampled rows come back.
#pragma once
#include <cstdint>
#include <vector>

#include "base/tensor.h"
#include "engine/decoder_model.h"
#include "engine/step/step_counters.h"
#include "engine/step/step_plan.h"
#include "plugin_host/components.h"

namespace sy {

class StepRunner {
 public:
  // Throws naming the layer when the cache manager's storage does not match
  // the model's KV geometry.
  StepRunner(DecoderModel& model, PluginCacheManager& cache, StepCounters& counters);

  // Logits [rows.size(), vocab] for the flattened token positions in `rows`;
  // with `hidden`, also every token's final hidden state [tokens, hidden]
  // (throws when the graph does not expose them: DecoderModel::hidden_states).
  Tensor forward(const StepPlan& plan, const std::vector<int64_t>& rows, Tensor* hidden = nullptr);

  int32_t block_size() const { return block_size_; }
  // Each layer's KV storage as the cache manager lays it out.
  const std::vector<sy_tensor>& key_cache() const { return key_cache_; }
  const std::vector<sy_tensor>& value_cache() const { return value_cache_; }

 private:
  DecoderModel& model_;
  PluginCacheManager& cache_;
  StepCounters& counters_;
  std::vector<sy_tensor> key_cache_, value_cache_;
  int32_t block_size_ = 0;
};

}  // namespace sy
