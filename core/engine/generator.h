// Baseline generation: the imported graph run as-is on a padded batch, with
// the past/present KV tensors fed back each step (static batching with
// contiguous caches). Every other mode is compared against this one.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "engine/decoder_model.h"
#include "engine/sampler.h"

namespace sy {

struct GenerationRequest {
  std::vector<int> prompt;  // token ids, BOS included by the caller
  int max_tokens = 256;
  SamplingParams sampling;
  bool stop_at_eos = true;
  int eos_id = 2;
};

struct GenerationResult {
  std::vector<int> tokens;    // generated ids (the stop token included when hit)
  std::string finish_reason;  // "stop" (EOS), "length" (max_tokens), "context" (context limit)
  double ttft_ms = 0;         // start -> first token
  double e2e_ms = 0;          // start -> last token
  int32_t cached_tokens = 0;  // prompt tokens reused from the prefix cache
  double tpot_ms() const { return tokens.size() > 1 ? (e2e_ms - ttft_ms) / static_cast<double>(tokens.size() - 1) : 0; }
};

// Called for every generated token: (row in the batch, token id).
using TokenCallback = std::function<void(size_t, int)>;

class BaselineGenerator {
 public:
  explicit BaselineGenerator(DecoderModel& model, int pad_id = 0) : model_(model), pad_id_(pad_id) {}

  // Prompts of different lengths are left-padded into one batch.
  std::vector<GenerationResult> generate(const std::vector<GenerationRequest>& batch, const TokenCallback& on_token = {});

  // Logits [vocab] at the last prompt position of one unpadded prompt.
  std::vector<float> last_logits(const std::vector<int>& prompt);

 private:
  struct Batch;
  Tensor forward(Batch& b, const std::vector<std::vector<int64_t>>& new_tokens);
  void validate(const std::vector<int>& prompt) const;

  DecoderModel& model_;
  int pad_id_;
};

}  // namespace sy
