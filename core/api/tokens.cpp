// The C API's token-level views for servers and eval harnesses (1.6): a
// token's exact bytes, the tokenizer's facts, and prompt log-probabilities.
#include <cmath>

#include "api/api_internal.h"

namespace sy::api {

std::string describe_tokenizer(const sy::Engine& engine, const sy::Tokenizer& tokenizer, const sy::ChatTemplate* chat_template) {
  nlohmann::ordered_json info = nlohmann::ordered_json::object();
  auto name_of = [&](int id) -> nlohmann::ordered_json {
    const std::string t = tokenizer.token(id);
    return t.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(t);
  };
  // BOS is what the tokenizer's own additions put first (nothing for
  // tokenizers that add none).
  const std::vector<int> added = tokenizer.encode("", true);
  info["bos_token"] = added.empty() ? nlohmann::ordered_json(nullptr) : name_of(added.front());
  const std::vector<int> eos = engine.folder().eos_ids();
  info["eos_token"] = eos.empty() ? nlohmann::ordered_json(nullptr) : name_of(eos.front());
  info["eos_token_ids"] = eos;
  info["pad_token"] = nullptr;
  info["chat_template"] = chat_template ? nlohmann::ordered_json(chat_template->source()) : nlohmann::ordered_json(nullptr);
  info["chat_template_name"] = chat_template ? nlohmann::ordered_json(chat_template->name()) : nlohmann::ordered_json(nullptr);
  info["model_max_length"] = engine.max_context();
  info["vocab_size"] = tokenizer.vocab_size();
  info["tokenizer_class"] = tokenizer.kind();
  return info.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace sy::api

using namespace sy::api;

extern "C" {

sy_api_status sy_token_bytes(const sy_engine* engine, int32_t token, char* bytes, int32_t capacity, int32_t* length) {
  return guarded([&]() -> sy_api_status {
    if (!engine || !length || capacity < 0 || (capacity > 0 && !bytes))
      return fail(SY_API_INVALID_ARGUMENT, "sy_token_bytes: engine and length are required (bytes when capacity > 0)");
    const sy::Tokenizer* tok = engine->tok.tokenizer.get();
    if (!tok) return fail(SY_API_NOT_FOUND, "sy_token_bytes: the model has no tokenizer");
    if (token < 0 || token >= tok->vocab_size())
      return fail(SY_API_INVALID_ARGUMENT, "sy_token_bytes: token " + std::to_string(token) + " is outside the tokenizer's vocabulary of " +
                                               std::to_string(tok->vocab_size()));
    // Special tokens add no bytes to a decoded text; a logprob list still
    // names them, as their vocabulary string.
    const std::string piece = tok->is_special(token) ? tok->token(token) : tok->token_bytes(token);
    *length = static_cast<int32_t>(piece.size());
    if (capacity > 0) std::memcpy(bytes, piece.data(), std::min<size_t>(piece.size(), static_cast<size_t>(capacity)));
    return static_cast<sy_api_status>(SY_API_OK);
  });
}

const char* sy_engine_tokenizer_info(const sy_engine* engine) { return engine ? engine->tokenizer_info.c_str() : "{}"; }

sy_api_status sy_prompt_logprobs(sy_engine* engine, const int32_t* ids, int32_t num_ids, int32_t top_k, float* logprobs, int32_t* ranks,
                                 int32_t* top_ids, float* top_logprobs) {
  return guarded([&]() -> sy_api_status {
    if (!engine || !ids || num_ids < 1 || (num_ids > 1 && !logprobs))
      return fail(SY_API_INVALID_ARGUMENT, "sy_prompt_logprobs: engine, ids (num_ids >= 1) and logprobs are required");
    if (top_k < 0 || top_k > 20) return fail(SY_API_INVALID_ARGUMENT, "sy_prompt_logprobs: top_k must be in [0, 20], got " + std::to_string(top_k));
    if (top_k > 0 && num_ids > 1 && (!top_ids || !top_logprobs))
      return fail(SY_API_INVALID_ARGUMENT, "sy_prompt_logprobs: top_k > 0 needs top_ids and top_logprobs");
    const std::vector<sy::TokenLogprobs> lps = engine->engine->prompt_logprobs(std::vector<int>(ids, ids + num_ids), top_k);
    for (size_t i = 0; i < lps.size(); ++i) {
      logprobs[i] = lps[i].logprob;
      if (ranks) ranks[i] = lps[i].rank;
      for (int32_t j = 0; j < top_k; ++j) {
        const size_t at = i * static_cast<size_t>(top_k) + static_cast<size_t>(j);
        const bool have = static_cast<size_t>(j) < lps[i].top.size();
        top_ids[at] = have ? lps[i].top[static_cast<size_t>(j)].first : -1;
        top_logprobs[at] = have ? lps[i].top[static_cast<size_t>(j)].second : -INFINITY;
      }
    }
    return static_cast<sy_api_status>(SY_API_OK);
  });
}

}  // extern "C"
