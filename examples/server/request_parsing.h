// The OpenAI request body -> what the engine is asked: sampling settings and
// prompts as token ids. Separate from the HTTP server so the fuzzer drives
// exactly the code the server runs (tests/fuzz/fuzz_request.cpp).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace sy::server {

// An error shaped like OpenAI's (HTTP status, message, type, param, code).
struct ApiError {
  int status;
  std::string message, type, param, code;
};
ApiError bad_request(const std::string& message, const std::string& param = "", const std::string& code = "");

struct Sampling {
  int max_tokens = 16, n = 1;
  double temperature = 1.0, top_p = 1.0;
  int64_t seed = -1;
  bool stream = false;
  bool ignore_eos = false;  // vLLM's extension: keep generating past end-of-sequence ids
  std::vector<std::string> stop;
};

struct RequestLimits {
  std::string model_name;
  int max_tokens = 4096;
  int max_n = 8;
  int max_prompt_tokens = 4096;
  int max_stop = 4;                  // OpenAI's limit on stop sequences
  size_t max_stop_bytes = 256;       // per stop sequence
};

struct ParsedRequest {
  Sampling sampling;
  // vLLM's extension: the prompt and generated token ids in each choice
  // ("prompt_token_ids", "token_ids"; per chunk when streaming).
  bool return_token_ids = false;
  std::vector<std::vector<int32_t>> prompts;  // one or more, token ids
};

// Text -> token ids (BOS first); throws ApiError.
using Tokenize = std::function<std::vector<int32_t>(const std::string&)>;

// Throws ApiError (400 / 404) naming the offending field.
ParsedRequest parse_request(const std::string& body, bool chat, const RequestLimits& limits, const Tokenize& tokenize);

}  // namespace sy::server
