// One choice of a completion, as OpenAI's protocol shows it: the engine's
// tokens and text in, the choice object (or, streamed, its deltas) out.
// Reads tool calls and reasoning out of chat output (sy_parse_output), puts
// the prompt before the text for echo, and lays out logprobs. Written
// against the C API only, like the rest of the server.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat_messages.h"
#include "logprob_format.h"
#include "switchyard/switchyard.h"

namespace sy::server {

struct ChoiceSettings {
  bool chat = false;
  bool logprobs = false;      // each generated token's logprob (and its top alternatives)
  bool echo = false;          // completions: the prompt first, with its logprobs
  bool token_ids = false;     // vLLM's return_token_ids
  bool prompt_logprobs = false;  // vLLM's prompt_logprobs
  // Chat: read the ids for reasoning (and, when tools are offered and not
  // forced, tool calls) rather than taking the engine's text as content.
  bool parse = false;
  ChatTools tools;
  std::vector<std::string> stops;  // parsed content ends before the first
  bool short_call_ids = false;      // Mistral's nine-character tool-call ids
  std::string parser;               // the tool-call family ("": the engine's)
};

class ChoiceOutput {
 public:
  // prompt_lps: the prompt's logprobs when echo or prompt_logprobs asked
  // for them (shared by the choices of one prompt).
  ChoiceOutput(sy_engine* engine, const TokenNames& names, const ChoiceSettings& settings, int index, const std::vector<int32_t>& prompt,
               std::string prompt_text, const PromptLogprobs* prompt_lps);

  // The engine's events, in order.
  void token(int32_t id, const std::string& text, std::optional<Logprobs> lp);
  void finish(const sy_request_info& info);

  bool finished() const { return finished_; }
  int completion_tokens() const { return static_cast<int>(ids_.size()); }
  int cached_tokens() const { return info_.cached_tokens; }
  // The choice object of a whole (non-streamed) response.
  nlohmann::json whole();
  // Streamed: the choice deltas for what arrived since the last call, the
  // last one carrying finish_reason once the choice has finished.
  std::vector<nlohmann::json> deltas();

 private:
  struct Parsed {
    std::string content, reasoning;
    bool has_reasoning = false;
    std::vector<nlohmann::json> calls;  // {"name", "arguments"}
    nlohmann::json partial;             // streaming: the call being written after them, or null
  };
  Parsed parse_now(bool final) const;
  std::string cut_at_stop(std::string text) const;
  nlohmann::json tool_call(size_t k, const nlohmann::json& call);
  std::string finish_reason(size_t calls) const;
  // Completions' logprobs of the whole choice (the prompt's first, with echo).
  nlohmann::json completion_logprobs() const;
  void add_prompt(CompletionLogprobs& out) const;

  sy_engine* engine_;
  const TokenNames& names_;
  ChoiceSettings s_;
  int index_;
  std::vector<int32_t> prompt_;
  std::string prompt_text_;
  const PromptLogprobs* prompt_lps_;
  // What the engine sent.
  std::vector<int32_t> ids_;
  std::vector<std::string> pieces_;  // text per token (may be empty)
  std::vector<std::optional<Logprobs>> lps_;
  std::string text_;  // the engine's text (stop strings applied)
  bool finished_ = false;
  sy_request_info info_{};
  std::string final_text_, error_;
  // Streaming progress.
  size_t streamed_tokens_ = 0;
  size_t stream_offset_ = std::string::npos;  // completions' text_offset of the next streamed token
  bool sent_first_ = false, sent_finish_ = false;
  std::string sent_content_, sent_reasoning_;
  size_t sent_calls_ = 0, sent_arguments_ = 0;
  std::vector<std::string> call_arguments_sent_;  // auto mode: per announced call, its arguments sent so far
  std::vector<std::string> call_ids_;
};

}  // namespace sy::server
