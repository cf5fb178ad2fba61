// What a caller asks of the engine and what it gets back.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/sampler.h"

namespace sy {

// Structured output: what the request's text must match, interpreted by the
// session's logits processor. kind: "json_object", "json_schema" (spec: the
// schema), "regex", "grammar" (EBNF/GBNF), or a processor's own; "" = none.
struct OutputConstraint {
  std::string kind;
  std::string spec;
  bool empty() const { return kind.empty(); }
};

struct GenerationRequest {
  std::vector<int> prompt;  // token ids, BOS included by the caller
  int max_tokens = 256;
  SamplingParams sampling;
  bool stop_at_eos = true;
  std::vector<int> eos_ids;  // empty: the model's (genai_config.json, generation_config.json, else 2)
  std::vector<int> stop_ids;  // more ids that end generation ("stop"), honoured even when stop_at_eos is off
  int priority = 0;         // lower runs first, for schedulers that honour it
  double timeout_ms = 0;    // 0: none; else the request ends with "timeout" after this long
  OutputConstraint constraint;  // structured output (needs a logits processor in the profile)
};

// Why a request ended. Its name (finish_reason_name) is OpenAI's spelling
// where OpenAI has one.
enum class FinishReason {
  None,       // still running
  Stop,       // end-of-sequence, a stop token or a stop string
  Length,     // max_tokens
  Context,    // the context limit
  Cancelled,  // the caller cancelled (or the engine shut down)
  Timeout,    // the request's own time limit
  Error,      // see GenerationResult::error
};
inline const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::None: return "";
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Context: return "context";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Timeout: return "timeout";
    case FinishReason::Error: return "error";
  }
  return "";
}
// The reason a name stands for (a server's "finish_reason"); Error for an unknown name.
inline FinishReason finish_reason_from_name(const std::string& name) {
  for (FinishReason r : {FinishReason::Stop, FinishReason::Length, FinishReason::Context, FinishReason::Cancelled,
                         FinishReason::Timeout, FinishReason::Error})
    if (name == finish_reason_name(r)) return r;
  return name == "abort" ? FinishReason::Cancelled : FinishReason::Error;
}

struct GenerationResult {
  std::vector<int> tokens;     // generated ids (the stop token included when hit)
  FinishReason finish_reason = FinishReason::None;
  std::string error;
  double queue_ms = 0;         // arrival -> first admitted into a step (vLLM's queue time)
  double ttft_ms = 0;          // arrival -> first token
  double e2e_ms = 0;           // arrival -> last token
  std::vector<double> token_ms;  // arrival -> each token (inter-token latencies)
  int32_t cached_tokens = 0;   // prompt tokens reused from the prefix cache
  std::vector<TokenLogprobs> logprobs;  // one per token when sampling.logprobs >= 0
  double tpot_ms() const { return tokens.size() > 1 ? (e2e_ms - ttft_ms) / static_cast<double>(tokens.size() - 1) : 0; }
};

// What the step engine calls as a submitted request runs (on its thread):
// each token, its log-probabilities first when sampling.logprobs >= 0, and
// the result when the request ends for whatever reason.
struct RequestCallbacks {
  std::function<void(uint64_t id, int token)> on_token;
  std::function<void(uint64_t id, const TokenLogprobs&)> on_logprobs;
  std::function<void(uint64_t id, const GenerationResult&)> on_finish;
};

// Called for every generated token: (request index, token id).
using TokenCallback = std::function<void(size_t, int)>;

}  // namespace sy
