// vLLM's tokenizer endpoints, which eval harnesses use to count and split
// tokens without the model's tokenizer files (lm-eval's remote tokenizer):
// POST /tokenize {"prompt"} or {"messages"}, POST /detokenize {"tokens"},
// GET /tokenizer_info.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "request_parsing.h"
#include "switchyard/switchyard.h"

namespace sy::server {

// Throw ApiError naming the field.
nlohmann::json tokenize_request(sy_engine* engine, const std::string& body, const Tokenize& tokenize, const RenderChat& render_chat,
                                bool renders_tools);
nlohmann::json detokenize_request(sy_engine* engine, const std::string& body);

// The text of ids (sy_tokenizer_decode, its buffer grown to fit); throws
// ApiError naming 'tokens'.
std::string decode_ids(const sy_tokenizer* tokenizer, const std::vector<int32_t>& ids, bool skip_special);

}  // namespace sy::server
