// Baseline generation: the imported graph run as-is on a padded batch, with
// the past/present KV tensors fed back each step (static batching with
// contiguous caches). Every other mode is compared against this one.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "engine/decoder_model.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/token_masker.h"

namespace sy {

class BaselineGenerator {
 public:
  explicit BaselineGenerator(DecoderModel& model, int pad_id = 0) : model_(model), pad_id_(pad_id) {}

  // Prompts of different lengths are padded into one batch: on the left, or
  // on the right for models that take positions from the mask sums.
  std::vector<GenerationResult> generate(const std::vector<GenerationRequest>& batch, const TokenCallback& on_token = {});

  // Structured output: requests with a constraint are masked by `masker`
  // (not owned; it outlives the generator). Without one they are refused.
  void set_token_masker(TokenMasker* masker, std::string unavailable = {}) {
    masker_ = masker;
    no_masker_ = std::move(unavailable);
  }

  // Logits [vocab] at the last prompt position of one unpadded prompt.
  std::vector<float> last_logits(const std::vector<int>& prompt);

 private:
  struct Batch;
  Tensor forward(Batch& b, const std::vector<std::vector<int64_t>>& new_tokens);
  void validate(const std::vector<int>& prompt) const;
  void init_past(Batch& b) const;

  DecoderModel& model_;
  int pad_id_;
  TokenMasker* masker_ = nullptr;
  std::string no_masker_;  // why there is no masker ("" : none was selected)
  uint64_t next_constrained_ = 1;  // ids the masker knows a generate call's requests by
};

}  // namespace sy
