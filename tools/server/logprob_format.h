// Log-probabilities in OpenAI's two shapes: chat's list of {"token",
// "logprob", "bytes", "top_logprobs"} and completions' parallel lists
// ("tokens", "token_logprobs", "top_logprobs", "text_offset"). A token is
// named by its exact bytes: the text when they are valid UTF-8, else
// "bytes:\xNN..." (OpenAI's spelling for part of a character), or
// "token_id:N" when the client asks for ids (vLLM's
// return_tokens_as_token_ids); "bytes" are always the raw bytes.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "switchyard/switchyard.h"

namespace sy::server {

struct Logprobs {
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // most likely first
};

class TokenNames {
 public:
  TokenNames(const sy_engine* engine, bool as_ids) : engine_(engine), as_ids_(as_ids) {}
  std::string bytes(int32_t token) const;  // what the token adds to the text
  std::string name(int32_t token) const;
  // Characters the token adds to a choice's text: none for a special
  // token (BOS, EOS, a template's markers), which the text leaves out.
  size_t text_chars(int32_t token) const;

 private:
  bool special(int32_t token) const;
  const sy_engine* engine_;
  bool as_ids_;
  mutable std::unordered_map<int32_t, bool> special_;
};

bool valid_utf8(const std::string& s);
// Characters (code points) in s, counting a character by its first byte.
size_t utf8_chars(const std::string& s);

// One token in chat's shape.
nlohmann::json chat_logprob(const TokenNames& names, int32_t token, const Logprobs& lp);

// Completions' shape, built a token at a time; text_offset counts
// characters from the start of the choice's text.
class CompletionLogprobs {
 public:
  explicit CompletionLogprobs(size_t first_offset = 0) : offset_(first_offset) {}
  // A token with its logprob; nullopt: the prompt's first token, which has
  // none (echo). chars: what it adds to the text, when the caller knows
  // better than its bytes (an echoed prompt's dummy-prefix space).
  void add(const TokenNames& names, int32_t token, const std::optional<Logprobs>& lp, std::optional<size_t> chars = std::nullopt);
  nlohmann::json to_json() const;
  bool empty() const { return tokens_.empty(); }

 private:
  nlohmann::json tokens_ = nlohmann::json::array(), logprobs_ = nlohmann::json::array(), top_ = nlohmann::json::array(),
                 offsets_ = nlohmann::json::array();
  size_t offset_;
};

// vLLM's prompt_logprobs entry for one prompt position: {"<id>": {"logprob",
// "rank", "decoded_token"}} for the prompt token and the top alternatives.
nlohmann::json prompt_logprob_entry(const TokenNames& names, int32_t token, float logprob, int32_t rank,
                                    const std::vector<std::pair<int32_t, float>>& top);

// The prompt's log-probabilities (sy_prompt_logprobs): positions 1..n-1.
struct PromptLogprobs {
  std::vector<Logprobs> positions;  // positions[i]: the token at i + 1
  std::vector<int32_t> ranks;
};
PromptLogprobs prompt_logprobs(sy_engine* engine, const std::vector<int32_t>& prompt, int top);

}  // namespace sy::server
