// The OpenAI request body -> what the engine is asked: sampling settings and
// prompts as token ids (chat messages through the model's chat template).
// Separate from the HTTP server so the fuzzer drives exactly the code the
// server runs (tests/fuzz/fuzz_request.cpp).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat_messages.h"

namespace sy::server {

// An error shaped like OpenAI's (HTTP status, message, type, param, code).
struct ApiError {
  int status;
  std::string message, type, param, code;
};
ApiError bad_request(const std::string& message, const std::string& param = "", const std::string& code = "");

// OpenAI's defaults when a request names no max_tokens: a completion writes
// 16 tokens at most; a chat completion runs until the model stops or the
// context is full (vLLM's max_model_len - prompt), within the server's limit.
constexpr int kCompletionDefaultMaxTokens = 16;
constexpr int kUntilTheContextIsFull = -1;

struct Sampling {
  int max_tokens = kCompletionDefaultMaxTokens;  // kUntilTheContextIsFull: resolved per prompt (max_tokens_for)
  int n = 1;
  double temperature = 1.0, top_p = 1.0, min_p = 0.0;
  int top_k = 0;  // 0 (or vLLM's -1): off
  double presence_penalty = 0.0, frequency_penalty = 0.0;  // OpenAI's, [-2, 2]
  double repetition_penalty = 1.0;                         // vLLM's / Hugging Face's, > 0
  int64_t seed = -1;
  bool stream = false;
  bool ignore_eos = false;  // vLLM's extension: keep generating past end-of-sequence ids
  bool logprobs = false;
  int top_logprobs = 0;     // chat: top_logprobs; completions: the integer logprobs
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;  // vLLM's extension
  // Structured output: the engine's constraint kind and spec ("" = none),
  // and the request field they came from (named in errors).
  std::string constraint_kind, constraint_spec, constraint_param;
  // OpenAI's logit_bias: (token id, bias in [-100, 100]).
  std::vector<std::pair<int32_t, float>> logit_bias;
  // Completions: the prompt before the generated text, with its logprobs
  // (the first token has none) when logprobs are asked for.
  bool echo = false;
  // vLLM's prompt_logprobs: the k most likely tokens at each prompt
  // position (-1: none, 0: the prompt token's own only).
  int prompt_logprobs = -1;
  // vLLM's return_tokens_as_token_ids: logprob tokens as "token_id:N".
  bool tokens_as_ids = false;
  // stream_options.include_usage: a last chunk with usage before [DONE].
  bool include_usage = false;
  // stream_options.continuous_usage_stats (vLLM): every chunk carries the usage so far.
  bool continuous_usage = false;
};

// What the protocol needs to know of a chat template, read from its source
// and its tool-call family (one place, for the model's template and for one
// a request brings).
struct TemplateFacts {
  std::string tool_parser;            // the family its output is read in
  bool renders_tools = true;          // else tools go into a system message
  bool knows_reasoning_effort = false;  // gpt-oss's reads it
  bool short_tool_call_ids = false;   // Mistral's: nine letters and digits
  bool splits_reasoning = false;      // <think>, gpt-oss's analysis channel, Command-R's thinking
  static TemplateFacts of(const std::string& source, const std::string& tool_parser);
};

struct RequestLimits {
  std::string model_name;
  int vocab_size = 0;  // 0: unknown (logit_bias ids are then not checked)
  TemplateFacts template_facts;  // of the model's chat template
  bool has_chat_template = true;  // the model's own (a request may bring one: chat_template)
  // The tool-call family a template's source writes (null: "hermes").
  std::function<std::string(const std::string&)> tool_parser_of;
  // The constraint that keeps strict tool calls valid in a family's syntax
  // while text stays free (sy_tool_call_constraint): (family, tools JSON,
  // one call only) -> a "triggered_tags" spec. Unset: strict is refused.
  std::function<std::string(const std::string&, const std::string&, bool)> tool_call_constraint;
  int max_tokens = 4096;
  int max_n = 8;
  int max_prompt_tokens = 4096;
  int max_stop = 4;                  // OpenAI's limit on stop sequences
  size_t max_stop_bytes = 256;       // per stop sequence
  int max_logprobs = 20;
  // The model's recommended sampling (generation_config.json) for fields a
  // request leaves out; unset: OpenAI's defaults.
  std::optional<double> default_temperature, default_top_p, default_min_p, default_repetition_penalty;
  std::optional<int> default_top_k;
};

struct ParsedRequest {
  Sampling sampling;
  // vLLM's extension: the prompt and generated token ids in each choice
  // ("prompt_token_ids", "token_ids"; per chunk when streaming).
  bool return_token_ids = false;
  std::vector<std::vector<int32_t>> prompts;  // one or more, token ids
  // The text of each prompt as the client sent it ("" for token ids: the
  // server decodes them when it needs the text, for echo).
  std::vector<std::string> prompt_texts;
  // Chat: the tools offered and what tool_choice asks.
  ChatTools tools;
  // vLLM's chat_template field: a template for this request ("": the
  // model's), and the facts about it the protocol needs.
  std::string chat_template;
  TemplateFacts template_facts;  // of the template this request renders with
};

// A JSON array of token ids (a prompt given as ids); throws ApiError naming
// `field` for anything else.
std::vector<int32_t> token_ids_of(const nlohmann::json& array, const char* field);

// Text -> token ids; add_special: the tokenizer's BOS (plain prompts), not
// after a chat template, which writes its own. Throws ApiError.
using Tokenize = std::function<std::vector<int32_t>(const std::string&, bool add_special)>;
// The chat template: {messages (contents as text), tools, documents,
// add_generation_prompt, continue_final_message, chat_template_kwargs} ->
// the prompt text. Throws ApiError for conversations the template refuses.
// Empty: the model has none, and the messages' contents are joined by
// newlines for the model to continue.
using RenderChat = std::function<std::string(const nlohmann::ordered_json& request)>;

// Throws ApiError (400 / 404) naming the offending field.
ParsedRequest parse_request(const std::string& body, bool chat, const RequestLimits& limits, const Tokenize& tokenize,
                            const RenderChat& render_chat = nullptr);

// The max_tokens one prompt runs with: the request's own, else (a chat
// completion without one) what the context leaves after the prompt, within
// the server's max_tokens limit.
int max_tokens_for(const Sampling& s, size_t prompt_tokens, int64_t max_context, int limit);

}  // namespace sy::server
