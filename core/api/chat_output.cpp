// The C API's reading of a chat model's output (1.6): content, reasoning
// and tool calls in the convention of the model's template family
// (text/tool_calls.h, chosen by the model folder).
#include <algorithm>

#include "api/api_internal.h"

namespace sy::api {

void set_up_output_parsing(sy_engine& e) {
  e.tool_parser = &e.engine->folder().tool_call_family();
  e.end_ids = e.engine->folder().eos_ids();
  if (!e.tok.tokenizer) return;
  const sy::Tokenizer& tok = *e.tok.tokenizer;
  for (int id = 0; id < tok.vocab_size(); ++id)
    if (tok.is_special(id) && !tok.token(id).empty()) e.special_texts.push_back(tok.token(id));
  std::sort(e.special_texts.begin(), e.special_texts.end(), [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
}

}  // namespace sy::api

using namespace sy::api;

namespace {

// Content without the text of special tokens (turn markers, end of text):
// what the user would have seen streamed.
std::string without_special(std::string text, const std::vector<std::string>& specials) {
  for (const std::string& s : specials)
    for (size_t at; (at = text.find(s)) != std::string::npos;) text.erase(at, s.size());
  return text;
}

}  // namespace

extern "C" {

const char* sy_engine_tool_parser(const sy_engine* engine) {
  return engine && engine->tool_parser ? sy::tool_call_family_name(*engine->tool_parser) : "";
}

const char* sy_tool_parser_for_template(const char* source) {
  try {
    return sy::tool_call_family_name(sy::tool_call_family_for(source ? source : ""));
  } catch (...) {
    return "";
  }
}

sy_api_status sy_parse_output(const sy_engine* engine, const int32_t* ids, int32_t num_ids, int32_t final, char* json, int64_t capacity,
                              int64_t* length) {
  return sy_parse_output_as(engine, nullptr, ids, num_ids, final, json, capacity, length);
}

sy_api_status sy_parse_output_as(const sy_engine* engine, const char* parser, const int32_t* ids, int32_t num_ids, int32_t final, char* json,
                                 int64_t capacity, int64_t* length) {
  return guarded([&]() -> sy_api_status {
    if (!engine || num_ids < 0 || (num_ids > 0 && !ids) || !length || capacity < 0 || (capacity > 0 && !json))
      return fail(SY_API_INVALID_ARGUMENT, "sy_parse_output: engine, ids and length are required (json when capacity > 0)");
    if (!engine->tok.tokenizer) return fail(SY_API_NOT_FOUND, "sy_parse_output: the model has no tokenizer");
    std::vector<int> tokens(ids, ids + num_ids);
    // The end-of-generation token closes the output; it is not part of it.
    while (!tokens.empty() && std::count(engine->end_ids.begin(), engine->end_ids.end(), tokens.back())) tokens.pop_back();
    std::string text = engine->tok.tokenizer->decode(tokens, false);
    // While the output grows, a character whose bytes are not all there yet
    // decodes as U+FFFD: leave it for the next call.
    const std::string replacement = "\xEF\xBF\xBD";
    while (!final && text.size() >= 3 && text.compare(text.size() - 3, 3, replacement) == 0) text.resize(text.size() - 3);
    const sy::ToolCallFamily& family = parser && *parser ? sy::tool_call_family_named(parser) : *engine->tool_parser;
    const sy::ParsedOutput parsed = sy::parse_model_output(family, text, final != 0);
    nlohmann::ordered_json out = {{"content", without_special(parsed.content, engine->special_texts)},
                                  {"reasoning_content", parsed.has_reasoning ? nlohmann::ordered_json(without_special(parsed.reasoning, engine->special_texts))
                                                                             : nlohmann::ordered_json(nullptr)},
                                  {"tool_calls", nlohmann::ordered_json::array()}};
    for (const sy::ToolCall& c : parsed.calls) out["tool_calls"].push_back({{"name", c.name}, {"arguments", c.arguments}});
    if (parsed.has_partial && !final) out["partial_call"] = {{"name", parsed.partial.name}, {"arguments", parsed.partial.arguments}};
    const std::string s = out.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    *length = static_cast<int64_t>(s.size());
    if (capacity > 0) std::memcpy(json, s.data(), static_cast<size_t>(std::min<int64_t>(capacity, *length)));
    return static_cast<sy_api_status>(SY_API_OK);
  });
}

sy_api_status sy_tool_call_constraint(const sy_engine* engine, const char* parser, const char* tools_json, int32_t one_call, char* json,
                                      int64_t capacity, int64_t* length) {
  return guarded([&]() -> sy_api_status {
    if (!engine || !tools_json || !length || capacity < 0 || (capacity > 0 && !json))
      return fail(SY_API_INVALID_ARGUMENT, "sy_tool_call_constraint: engine, tools_json and length are required (json when capacity > 0)");
    const sy::ToolCallFamily& family = parser && *parser ? sy::tool_call_family_named(parser) : *engine->tool_parser;
    const std::string s = sy::tool_call_constraint(family, tools_json, one_call != 0);
    *length = static_cast<int64_t>(s.size());
    if (capacity > 0) std::memcpy(json, s.data(), static_cast<size_t>(std::min<int64_t>(capacity, *length)));
    return static_cast<sy_api_status>(SY_API_OK);
  });
}

}  // extern "C"
