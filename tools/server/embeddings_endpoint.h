// POST /v1/embeddings, as OpenAI's and vLLM's clients send it: `input` a
// string, a list of strings, token ids or lists of token ids;
// `encoding_format` "float" or "base64" (little-endian float32, what the
// openai client asks for by default); `dimensions` only as the model's own
// size. The vectors are sy_embed's (the model's pooling and normalisation).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "request_parsing.h"
#include "switchyard/switchyard.h"

namespace sy::server {

// Throws ApiError: 400 naming the field, 404 for another model.
nlohmann::json embeddings_request(sy_engine* engine, const std::string& body, const RequestLimits& limits, const Tokenize& tokenize);

// RFC 4648 base64 of raw bytes.
std::string base64_encode(const void* data, size_t size);

}  // namespace sy::server
