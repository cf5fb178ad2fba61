// An OpenAI-compatible HTTP server over the embedding API (switchyard.h):
// /v1/completions and /v1/chat/completions (streaming as server-sent
// events; tool calls, reasoning, echo and prompt logprobs), /v1/models,
// vLLM's /tokenize, /detokenize and /tokenizer_info, /health, /metrics
// (Prometheus: switchyard:* and vLLM's vllm:* names). Optional API key,
// CORS, limits on body size, prompt length and max_tokens, OpenAI-shaped
// JSON errors, cancellation when a streaming client disconnects, graceful
// shutdown on SIGTERM.
#pragma once
#include <string>

#include "switchyard/switchyard.h"

namespace sy::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;              // empty: no authentication
  std::string model_name;           // served model id (default: the model file's stem)
  size_t max_body_bytes = 1 << 20;  // larger bodies get 413
  int max_prompt_tokens = 0;        // 0: the model's context limit
  int max_tokens_limit = 4096;      // max_tokens above this get 400
  int max_n = 8;
  double shutdown_timeout_s = 10;   // SIGTERM: finish in-flight requests for this long, then cancel
  int http_threads = 128;
  std::string allowed_origins = "*";  // CORS: "*", a comma-separated list, or "" (no CORS headers)
};

// Serves until SIGTERM or SIGINT; returns the process exit code.
int serve(sy_engine* engine, const ServerOptions& options);

}  // namespace sy::server
