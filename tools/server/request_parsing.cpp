#include "request_parsing.h"

#include <algorithm>
#include <limits>
#include <string_view>

namespace sy::server {

// Ordered: a chat template prints the client's objects (tool schemas, call
// arguments) with their keys in the order sent.
using json = nlohmann::ordered_json;

ApiError bad_request(const std::string& message, const std::string& param, const std::string& code) {
  return {400, message, "invalid_request_error", param, code};
}

namespace {

template <typename T>
T field(const json& body, const char* key, T fallback, const char* type_name) {
  if (!body.contains(key) || body[key].is_null()) return fallback;
  const json& v = body[key];
  bool ok = false;
  if constexpr (std::is_same_v<T, bool>) ok = v.is_boolean();
  else if constexpr (std::is_integral_v<T>) ok = v.is_number_integer() && v.get<int64_t>() >= std::numeric_limits<T>::min() &&
                                                 v.get<int64_t>() <= std::numeric_limits<T>::max() && !(v.is_number_unsigned() && v.get<uint64_t>() > INT64_MAX);
  else if constexpr (std::is_floating_point_v<T>) ok = v.is_number();
  else ok = v.is_string();
  if (!ok) throw bad_request(std::string("invalid type for '") + key + "': expected " + type_name, key);
  return v.get<T>();
}

double number_in(const json& body, const char* key, double fallback, double lo, double hi, const char* range) {
  const double v = field<double>(body, key, fallback, "a number");
  if (!(v >= lo && v <= hi)) throw bad_request(std::string(key) + " must be in " + range + ", got " + std::to_string(v), key);
  return v;
}

// Fields that would change the output and that this server cannot honour:
// refused by name rather than silently ignored.
void refuse_unsupported(const json& body, bool chat) {
  auto refuse = [](const std::string& key, const std::string& why) { throw bad_request("'" + key + "' is not supported: " + why, key); };
  if (body.contains("guided_decoding_backend") && !body["guided_decoding_backend"].is_null())
    refuse("guided_decoding_backend", "the backend is the manifest's logits processor");
  if (body.contains("suffix") && !body["suffix"].is_null()) refuse("suffix", "insertion (fill-in-the-middle) is not implemented");
  if (chat && body.contains("echo") && body["echo"] == true) refuse("echo", "echo is a completions field (chat: continue_final_message)");
  if (body.contains("best_of") && !body["best_of"].is_null() && !(body["best_of"].is_number_integer() && body["best_of"] == body.value("n", 1)))
    refuse("best_of", "best_of other than n is not implemented");
  for (const char* key : {"functions", "function_call", "prediction", "audio"})
    if (body.contains(key) && !body[key].is_null()) refuse(key, "not implemented");
  if (body.contains("modalities") && !body["modalities"].is_null() && body["modalities"] != json::array({"text"}))
    refuse("modalities", "only text is produced");
  if (!chat)
    for (const char* key : {"tools", "tool_choice", "messages"})
      if (body.contains(key) && !body[key].is_null()) refuse(key, "a chat completions field (/v1/chat/completions)");
}

// A regular expression matching exactly one of the strings (vLLM's guided_choice).
std::string choice_regex(const json& choices, const std::string& param) {
  if (!choices.is_array() || choices.empty()) throw bad_request("'" + param + "' must be a non-empty list of strings", param);
  std::string re = "(";
  for (size_t i = 0; i < choices.size(); ++i) {
    if (!choices[i].is_string()) throw bad_request("'" + param + "' must be a list of strings", param);
    if (i) re += "|";
    for (char ch : choices[i].get<std::string>()) {
      if (std::string_view("\\^$.|?*+()[]{}/").find(ch) != std::string_view::npos) re += '\\';
      re += ch;
    }
  }
  return re + ")";
}

// Structured output: OpenAI's response_format, the regex and grammar
// extension fields, and vLLM's guided_* / structured_outputs spellings. At
// most one per request.
void parse_constraint(const json& body, Sampling& s) {
  auto set = [&](const std::string& param, std::string kind, std::string spec) {
    if (!s.constraint_param.empty())
      throw bad_request("'" + param + "' and '" + s.constraint_param + "' both constrain the output: give one", param);
    s.constraint_param = param;
    s.constraint_kind = std::move(kind);
    s.constraint_spec = std::move(spec);
  };
  auto text = [&](const json& v, const std::string& param) {
    if (!v.is_string() || v.get<std::string>().empty()) throw bad_request("'" + param + "' must be a non-empty string", param);
    return v.get<std::string>();
  };
  // A schema as an object, or as JSON text (vLLM accepts both).
  auto schema = [&](const json& v, const std::string& param) {
    if (v.is_object()) return v.dump();
    if (v.is_string()) {
      const json parsed = json::parse(v.get<std::string>(), nullptr, false);
      if (parsed.is_object()) return parsed.dump();
    }
    throw bad_request("'" + param + "' must be a JSON schema (an object)", param);
  };
  if (body.contains("response_format") && !body["response_format"].is_null()) {
    const json& rf = body["response_format"];
    const std::string type = rf.is_object() && rf.contains("type") && rf["type"].is_string() ? rf["type"].get<std::string>() : "";
    if (type == "json_object" && rf.contains("schema") && !rf["schema"].is_null()) {
      // llama.cpp's spelling of a schema-constrained JSON object.
      set("response_format", "json_schema", schema(rf["schema"], "response_format.schema"));
    } else if (type == "json_object") {
      set("response_format", "json_object", "");
    } else if (type == "json_schema") {
      if (!rf.contains("json_schema") || !rf["json_schema"].is_object() || !rf["json_schema"].contains("schema"))
        throw bad_request("response_format of type json_schema needs json_schema.schema", "response_format");
      set("response_format", "json_schema", schema(rf["json_schema"]["schema"], "response_format.json_schema.schema"));
    } else if (type != "text") {
      throw bad_request("response_format.type must be 'text', 'json_object' or 'json_schema'", "response_format");
    }
  }
  auto given = [&](const char* key) { return body.contains(key) && !body[key].is_null(); };
  if (given("regex")) set("regex", "regex", text(body["regex"], "regex"));
  if (given("grammar")) set("grammar", "grammar", text(body["grammar"], "grammar"));
  if (given("guided_json")) set("guided_json", "json_schema", schema(body["guided_json"], "guided_json"));
  if (given("guided_regex")) set("guided_regex", "regex", text(body["guided_regex"], "guided_regex"));
  if (given("guided_grammar")) set("guided_grammar", "grammar", text(body["guided_grammar"], "guided_grammar"));
  if (given("guided_choice")) set("guided_choice", "regex", choice_regex(body["guided_choice"], "guided_choice"));
  if (given("structured_outputs")) {
    const json& so = body["structured_outputs"];
    if (!so.is_object()) throw bad_request("'structured_outputs' must be an object", "structured_outputs");
    for (const auto& [key, v] : so.items()) {
      if (v.is_null()) continue;
      const std::string param = "structured_outputs." + key;
      if (key == "json") set(param, "json_schema", schema(v, param));
      else if (key == "regex") set(param, "regex", text(v, param));
      else if (key == "grammar") set(param, "grammar", text(v, param));
      else if (key == "choice") set(param, "regex", choice_regex(v, param));
      else if (key == "json_object") {
        if (v == true) set(param, "json_object", "");
      } else throw bad_request("'" + param + "' is not supported (json, regex, grammar, choice, json_object)", param);
    }
  }
}

// OpenAI's logit_bias: {"token id": bias in [-100, 100]}.
void parse_logit_bias(const json& body, const RequestLimits& limits, Sampling& s) {
  if (!body.contains("logit_bias") || body["logit_bias"].is_null()) return;
  const json& lb = body["logit_bias"];
  if (!lb.is_object()) throw bad_request("invalid type for 'logit_bias': expected an object of token ids to biases", "logit_bias");
  if (lb.size() > 300) throw bad_request("logit_bias has " + std::to_string(lb.size()) + " entries; at most 300", "logit_bias");
  for (const auto& [key, v] : lb.items()) {
    size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(key, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != key.size() || id < 0 || id > INT32_MAX || (limits.vocab_size > 0 && id >= limits.vocab_size))
      throw bad_request("logit_bias: '" + key + "' is not a token id of this model" +
                            (limits.vocab_size > 0 ? " (0 to " + std::to_string(limits.vocab_size - 1) + ")" : std::string()),
                        "logit_bias");
    if (!v.is_number() || !(v.get<double>() >= -100 && v.get<double>() <= 100))
      throw bad_request("logit_bias: the bias of token " + key + " must be a number in [-100, 100]", "logit_bias");
    s.logit_bias.emplace_back(static_cast<int32_t>(id), v.get<float>());
  }
}

Sampling parse_sampling(const json& body, bool chat, const RequestLimits& limits) {
  Sampling s;
  const int fallback = chat ? kUntilTheContextIsFull : kCompletionDefaultMaxTokens;
  const bool given = (body.contains("max_tokens") && !body["max_tokens"].is_null()) ||
                     (body.contains("max_completion_tokens") && !body["max_completion_tokens"].is_null());
  s.max_tokens = field<int>(body, "max_tokens", fallback, "an integer");
  if (body.contains("max_completion_tokens") && !body["max_completion_tokens"].is_null())
    s.max_tokens = field<int>(body, "max_completion_tokens", fallback, "an integer");
  // Completions take max_tokens 0 (with echo: the prompt's logprobs only,
  // what eval harnesses ask for); a chat completion writes at least one.
  if (given && s.max_tokens < (chat ? 1 : 0))
    throw bad_request("max_tokens must be >= " + std::string(chat ? "1" : "0") + ", got " + std::to_string(s.max_tokens), "max_tokens");
  if (s.max_tokens > limits.max_tokens)
    throw bad_request("max_tokens is " + std::to_string(s.max_tokens) + ", over this server's limit of " + std::to_string(limits.max_tokens),
                      "max_tokens");
  s.temperature = number_in(body, "temperature", limits.default_temperature.value_or(1.0), 0, 2, "[0, 2]");
  s.top_p = field<double>(body, "top_p", limits.default_top_p.value_or(1.0), "a number");
  if (!(s.top_p > 0 && s.top_p <= 1)) throw bad_request("top_p must be in (0, 1]", "top_p");
  s.top_k = field<int>(body, "top_k", limits.default_top_k.value_or(0), "an integer");
  if (s.top_k < -1) throw bad_request("top_k must be -1, 0 (off) or positive, got " + std::to_string(s.top_k), "top_k");
  if (s.top_k < 0) s.top_k = 0;
  s.min_p = number_in(body, "min_p", limits.default_min_p.value_or(0.0), 0, 1, "[0, 1]");
  s.presence_penalty = number_in(body, "presence_penalty", 0.0, -2, 2, "[-2, 2]");
  s.frequency_penalty = number_in(body, "frequency_penalty", 0.0, -2, 2, "[-2, 2]");
  s.repetition_penalty = field<double>(body, "repetition_penalty", limits.default_repetition_penalty.value_or(1.0), "a number");
  if (!(s.repetition_penalty > 0 && s.repetition_penalty <= 100)) throw bad_request("repetition_penalty must be in (0, 100]", "repetition_penalty");
  s.n = field<int>(body, "n", 1, "an integer");
  if (s.n < 1 || s.n > limits.max_n) throw bad_request("n must be in [1, " + std::to_string(limits.max_n) + "]", "n");
  s.seed = field<int64_t>(body, "seed", -1, "an integer");
  s.stream = field<bool>(body, "stream", false, "a boolean");
  s.ignore_eos = field<bool>(body, "ignore_eos", false, "a boolean");
  parse_constraint(body, s);
  parse_logit_bias(body, limits, s);
  s.echo = !chat && field<bool>(body, "echo", false, "a boolean");
  s.tokens_as_ids = field<bool>(body, "return_tokens_as_token_ids", false, "a boolean");
  if (body.contains("prompt_logprobs") && !body["prompt_logprobs"].is_null()) {
    s.prompt_logprobs = field<int>(body, "prompt_logprobs", -1, "an integer");
    if (s.prompt_logprobs < 0 || s.prompt_logprobs > limits.max_logprobs)
      throw bad_request("prompt_logprobs must be in [0, " + std::to_string(limits.max_logprobs) + "]", "prompt_logprobs");
    // The chunks have no place for them (refused rather than dropped).
    if (s.stream) throw bad_request("prompt_logprobs is not streamed: ask without stream", "prompt_logprobs");
  }
  if (body.contains("stream_options") && !body["stream_options"].is_null()) {
    const json& so = body["stream_options"];
    if (!so.is_object()) throw bad_request("invalid type for 'stream_options': expected an object", "stream_options");
    if (!s.stream) throw bad_request("'stream_options' needs stream: true", "stream_options");
    for (const auto& [key, v] : so.items()) {
      if (key == "include_usage") {
        if (!v.is_boolean() && !v.is_null()) throw bad_request("invalid type for 'stream_options.include_usage': expected a boolean", "stream_options");
        s.include_usage = v.is_boolean() && v.get<bool>();
      } else if (key == "continuous_usage_stats") {  // vLLM's: usage so far on every chunk
        if (!v.is_boolean() && !v.is_null()) throw bad_request("invalid type for 'stream_options.continuous_usage_stats': expected a boolean", "stream_options");
        s.continuous_usage = v.is_boolean() && v.get<bool>();
      } else {
        throw bad_request("'stream_options." + key + "' is not supported (include_usage, continuous_usage_stats)", "stream_options");
      }
    }
  }
  if (chat) {
    s.logprobs = field<bool>(body, "logprobs", false, "a boolean");
    s.top_logprobs = field<int>(body, "top_logprobs", 0, "an integer");
    if (s.top_logprobs < 0 || s.top_logprobs > limits.max_logprobs)
      throw bad_request("top_logprobs must be in [0, " + std::to_string(limits.max_logprobs) + "]", "top_logprobs");
    if (s.top_logprobs > 0 && !s.logprobs) throw bad_request("top_logprobs needs logprobs: true", "top_logprobs");
  } else if (body.contains("logprobs") && !body["logprobs"].is_null()) {
    // Completions: logprobs is the number of alternatives (0 for the chosen token only).
    s.top_logprobs = field<int>(body, "logprobs", 0, "an integer");
    if (s.top_logprobs < 0 || s.top_logprobs > limits.max_logprobs)
      throw bad_request("logprobs must be in [0, " + std::to_string(limits.max_logprobs) + "]", "logprobs");
    s.logprobs = true;
  }
  if (body.contains("stop") && !body["stop"].is_null()) {
    const json& st = body["stop"];
    const std::string expected = "invalid type for 'stop': expected a string or an array of up to " + std::to_string(limits.max_stop) + " strings";
    if (st.is_string()) s.stop.push_back(st.get<std::string>());
    else if (st.is_array() && st.size() <= static_cast<size_t>(limits.max_stop)) {
      for (const auto& x : st) {
        if (!x.is_string()) throw bad_request(expected, "stop");
        s.stop.push_back(x.get<std::string>());
      }
    } else {
      throw bad_request(expected, "stop");
    }
    for (const auto& x : s.stop)
      if (x.empty() || x.size() > limits.max_stop_bytes)
        throw bad_request("each stop sequence must have 1 to " + std::to_string(limits.max_stop_bytes) + " bytes", "stop");
  }
  if (body.contains("stop_token_ids") && !body["stop_token_ids"].is_null()) {
    const json& ids = body["stop_token_ids"];
    if (!ids.is_array() || ids.size() > 64) throw bad_request("invalid type for 'stop_token_ids': expected an array of up to 64 token ids", "stop_token_ids");
    for (const auto& x : ids) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX || (x.is_number_unsigned() && x.get<uint64_t>() > INT32_MAX))
        throw bad_request("invalid 'stop_token_ids': token ids must be integers in [0, 2^31)", "stop_token_ids");
      s.stop_token_ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
    }
  }
  return s;
}

void parse_prompts(const json& body, bool chat, const RequestLimits& limits, const Tokenize& tokenize, const RenderChat& render_chat,
                   ParsedRequest& r) {
  std::vector<std::vector<int32_t>>& out = r.prompts;
  if (chat) {
    if (!body.contains("messages")) throw bad_request("'messages' is required", "messages");
    const TemplateFacts& facts = r.template_facts;
    const bool tools_in_template = facts.renders_tools && render_chat;
    json messages = normalize_messages(body["messages"], tools_in_template, facts.short_tool_call_ids);
    if (r.tools.offered() && !tools_in_template) offer_tools_in_system_message(messages, r.tools.tools);
    if (render_chat) {
      json request = {{"messages", messages}};
      if (!r.chat_template.empty()) request["chat_template"] = r.chat_template;
      if (r.tools.offered() && tools_in_template) request["tools"] = r.tools.tools;
      if (body.contains("documents") && !body["documents"].is_null()) request["documents"] = body["documents"];
      request["add_generation_prompt"] = field<bool>(body, "add_generation_prompt", true, "a boolean");
      request["continue_final_message"] = field<bool>(body, "continue_final_message", false, "a boolean");
      if (body.contains("chat_template_kwargs") && !body["chat_template_kwargs"].is_null()) {
        if (!body["chat_template_kwargs"].is_object()) throw bad_request("invalid type for 'chat_template_kwargs': expected an object", "chat_template_kwargs");
        request["chat_template_kwargs"] = body["chat_template_kwargs"];
      }
      if (body.contains("reasoning_effort") && !body["reasoning_effort"].is_null()) {
        const json& effort = body["reasoning_effort"];
        if (!effort.is_string() || (effort != "minimal" && effort != "low" && effort != "medium" && effort != "high"))
          throw bad_request("reasoning_effort must be 'minimal', 'low', 'medium' or 'high'", "reasoning_effort");
        if (!facts.knows_reasoning_effort)
          throw bad_request("'reasoning_effort' is not supported: this model's chat template has no reasoning_effort (give the template's own "
                            "switch in chat_template_kwargs)",
                            "reasoning_effort");
        if (!request.contains("chat_template_kwargs")) request["chat_template_kwargs"] = json::object();
        if (!request["chat_template_kwargs"].contains("reasoning_effort")) request["chat_template_kwargs"]["reasoning_effort"] = effort;
      }
      r.prompt_texts.push_back(render_chat(request));
      out.push_back(tokenize(r.prompt_texts.back(), false));
    } else {
      // No chat template: the model was not tuned for chat, so the
      // conversation is given as text and the model continues it.
      std::string text;
      for (const auto& m : messages) {
        if (!m["content"].is_string()) continue;
        if (!text.empty()) text.push_back('\n');
        text.append(m["content"].get_ref<const std::string&>());
      }
      if (text.empty()) throw bad_request("the messages are empty", "messages");
      r.prompt_texts.push_back(text);
      out.push_back(tokenize(text, true));
    }
  } else {
    if (!body.contains("prompt")) throw bad_request("'prompt' is required", "prompt");
    const json& p = body["prompt"];
    auto ids_of = [](const json& arr) { return token_ids_of(arr, "prompt"); };
    if (p.is_string()) {
      if (p.get<std::string>().empty()) throw bad_request("the prompt is empty", "prompt");
      r.prompt_texts.push_back(p.get<std::string>());
      out.push_back(tokenize(p.get<std::string>(), true));
    } else if (p.is_array() && !p.empty() && p[0].is_string()) {
      for (const auto& x : p) {
        if (!x.is_string()) throw bad_request("invalid type for 'prompt': mixed array", "prompt");
        if (x.get<std::string>().empty()) throw bad_request("the prompt is empty", "prompt");
        r.prompt_texts.push_back(x.get<std::string>());
        out.push_back(tokenize(x.get<std::string>(), true));
      }
    } else if (p.is_array() && !p.empty() && p[0].is_number_integer()) {
      out.push_back(ids_of(p));
      r.prompt_texts.emplace_back();
    } else if (p.is_array() && !p.empty() && p[0].is_array()) {
      for (const auto& x : p) {
        out.push_back(ids_of(x));
        r.prompt_texts.emplace_back();
      }
    } else {
      throw bad_request("invalid type for 'prompt': expected a string, an array of strings, or token ids", "prompt");
    }
  }
  for (const auto& ids : out) {
    if (ids.empty()) throw bad_request("the prompt is empty", "prompt");
    if (static_cast<int64_t>(ids.size()) > limits.max_prompt_tokens)
      throw bad_request("This model's maximum prompt length is " + std::to_string(limits.max_prompt_tokens) + " tokens. However, you requested " +
                            std::to_string(ids.size()) + " tokens.",
                        "prompt", "context_length_exceeded");
  }
}

}  // namespace

std::vector<int32_t> token_ids_of(const nlohmann::json& array, const char* field) {
  std::vector<int32_t> ids;
  for (const auto& x : array) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX || (x.is_number_unsigned() && x.get<uint64_t>() > INT32_MAX))
      throw bad_request(std::string("invalid '") + field + "': token ids must be integers in [0, 2^31)", field);
    ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
  }
  return ids;
}

ParsedRequest parse_request(const std::string& body_text, bool chat, const RequestLimits& limits, const Tokenize& tokenize,
                            const RenderChat& render_chat) {
  json body;
  try {
    body = json::parse(body_text);
  } catch (const std::exception& e) {
    throw bad_request(std::string("the body is not valid JSON: ") + e.what());
  }
  if (!body.is_object()) throw bad_request("the body must be a JSON object");
  if (body.contains("model") && !body["model"].is_string()) throw bad_request("invalid type for 'model': expected a string", "model");
  std::string model = body.value("model", limits.model_name);
  if (model != limits.model_name)
    throw ApiError{404, "The model '" + model + "' does not exist; this server serves '" + limits.model_name + "'", "invalid_request_error", "model",
                   "model_not_found"};
  refuse_unsupported(body, chat);
  ParsedRequest r;
  r.sampling = parse_sampling(body, chat, limits);
  if (body.contains("return_token_ids")) {
    if (!body["return_token_ids"].is_boolean()) throw bad_request("invalid type for 'return_token_ids': expected a boolean", "return_token_ids");
    r.return_token_ids = body["return_token_ids"].get<bool>();
  }
  RequestLimits l = limits;
  if (chat && body.contains("chat_template") && !body["chat_template"].is_null()) {
    if (!body["chat_template"].is_string() || body["chat_template"].get<std::string>().empty())
      throw bad_request("'chat_template' must be a template's source text", "chat_template");
    r.chat_template = body["chat_template"].get<std::string>();
    l.has_chat_template = true;
    l.template_facts = TemplateFacts::of(r.chat_template, l.tool_parser_of ? l.tool_parser_of(r.chat_template) : "hermes");
  } else if (!chat && body.contains("chat_template") && !body["chat_template"].is_null()) {
    throw bad_request("'chat_template' is a chat completions field", "chat_template");
  }
  r.template_facts = l.template_facts;
  if (chat) {
    r.tools = parse_tools(body);
    if (r.tools.forced()) {
      // A forced call is structured output over the tool's schema (the
      // grammar keeps its arguments valid, under speculation too).
      if (!r.sampling.constraint_param.empty())
        throw bad_request("tool_choice '" + r.tools.choice + "' and '" + r.sampling.constraint_param + "' both constrain the output: give one",
                          "tool_choice");
      r.sampling.constraint_kind = "json_schema";
      r.sampling.constraint_spec = forced_tool_call_schema(r.tools);
      r.sampling.constraint_param = "tool_choice";
    } else if (r.tools.offered() && r.tools.strict()) {
      // tool_choice auto with a strict function: the text stays free and
      // every call the model starts (the family's marker) is held to one
      // of the tools' schemas by the grammar, as OpenAI's strict promises.
      if (!r.sampling.constraint_param.empty())
        throw bad_request("a strict function and '" + r.sampling.constraint_param + "' both constrain the output: give one", "tools");
      if (!l.tool_call_constraint) throw bad_request("'strict' function calling is not available here", "tools");
      r.sampling.constraint_kind = "triggered_tags";
      r.sampling.constraint_spec = l.tool_call_constraint(r.template_facts.tool_parser, r.tools.tools.dump(), !r.tools.parallel);
      r.sampling.constraint_param = "tools";
    }
  }
  parse_prompts(body, chat, l, tokenize, l.has_chat_template ? render_chat : nullptr, r);
  return r;
}

TemplateFacts TemplateFacts::of(const std::string& source, const std::string& tool_parser) {
  TemplateFacts f;
  f.tool_parser = tool_parser;
  f.renders_tools = source.find("tools") != std::string::npos;
  f.knows_reasoning_effort = source.find("reasoning_effort") != std::string::npos;
  f.short_tool_call_ids = tool_parser == "mistral";
  f.splits_reasoning = source.find("</think>") != std::string::npos || tool_parser == "gpt_oss" ||
                       source.find("<|START_THINKING|>") != std::string::npos;
  return f;
}

int max_tokens_for(const Sampling& s, size_t prompt_tokens, int64_t max_context, int limit) {
  if (s.max_tokens != kUntilTheContextIsFull) return s.max_tokens;
  const int64_t left = max_context - static_cast<int64_t>(prompt_tokens);
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(limit, left)));
}

}  // namespace sy::server
