// Plain data ModelFolder reads from a model folder and the sampler applies.
#pragma once
#include <optional>
#include <string>

namespace sy {

// The sampling a model's authors recommend: generation_config.json's
// temperature, top_p, top_k, min_p and repetition_penalty (or
// genai_config.json's "search" section). Request fields left unset take
// these, as vLLM does; with do_sample false, only the repetition penalty
// applies (the model is meant to be decoded greedily).
struct SamplingDefaults {
  std::optional<float> temperature, top_p, min_p, repetition_penalty;
  std::optional<int> top_k;
  std::string source;  // the file they came from ("" when none)
  bool empty() const { return !temperature && !top_p && !min_p && !repetition_penalty && !top_k; }
};

}  // namespace sy
