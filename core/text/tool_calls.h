// A chat model's output -> content, reasoning and tool calls, in the
// convention of the model's chat-template family (Hermes/Qwen <tool_call>,
// Llama 3 JSON, Mistral [TOOL_CALLS], DeepSeek, Granite, Command-R,
// gpt-oss channels). Each family is one row of a table (tool_calls.cpp):
// how to recognise its template, how to read its output, and how one call
// is written (for the constraint that keeps calls valid while text stays
// free). Adding a family is adding a row and its reader.
#pragma once
#include <string>
#include <vector>

namespace sy {

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object, as text
};

struct ParsedOutput {
  std::string content;    // what the user sees
  std::string reasoning;  // the model's thinking (<think>, gpt-oss's analysis channel)
  bool has_reasoning = false;
  std::vector<ToolCall> calls;
  // While streaming: the call being written after `calls`, once its name
  // is known, with its arguments so far (raw text, a prefix of what the
  // whole call's arguments will be). Families that write a call as JSON
  // ({"name", "arguments"}: Hermes, Granite, Mistral, Llama 3) report one.
  bool has_partial = false;
  ToolCall partial;
};

struct ToolCallFamily;  // a row of the table

// The family a chat template writes tool calls in: the first whose marks
// its source contains; Hermes (the convention tools are offered in when a
// template shows none) otherwise.
const ToolCallFamily& tool_call_family_for(const std::string& template_source);
// By name ("hermes", "llama3_json", "mistral", "deepseek_v3", "granite",
// "command_r", "gpt_oss"); throws naming the known ones.
const ToolCallFamily& tool_call_family_named(const std::string& name);
const char* tool_call_family_name(const ToolCallFamily& family);
std::vector<std::string> tool_call_family_names();

// Reads text (special tokens included, as the tokenizer writes them).
// final false: the text may still grow (streaming); content then stops
// before anything that is or may become a tool call, and only complete
// calls are returned.
ParsedOutput parse_model_output(const ToolCallFamily& family, const std::string& text, bool final);

// The logits processors' "triggered_tags" constraint (plugin.h) for OpenAI
// `tools` (a JSON array, as text) written the family's way: text is free
// until the family's call marker; from there one of the tools' calls,
// its arguments valid against that tool's parameters. one_call: the text
// ends after the first call (parallel_tool_calls false). Returns the spec
// as JSON text; throws naming a tool without a name.
std::string tool_call_constraint(const ToolCallFamily& family, const std::string& tools_json, bool one_call);

}  // namespace sy
