// OpenAI chat messages and tools -> what a chat template reads, and the
// constraint that makes a forced tool call valid. Separate from the HTTP
// server so the request fuzzer drives it too.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace sy::server {

// The tools a chat request offers and what tool_choice asks of them.
struct ChatTools {
  nlohmann::ordered_json tools;      // the validated "tools" list; null: none offered
  std::string choice = "auto";       // "auto", "none", "required", "function" (one named function)
  std::string name;                  // choice "function": its name
  bool parallel = true;              // parallel_tool_calls
  bool offered() const { return tools.is_array() && !tools.empty() && choice != "none"; }
  bool forced() const { return offered() && (choice == "required" || choice == "function"); }
  // Some function asks for strict (schema-valid) arguments.
  bool strict() const {
    if (!tools.is_array()) return false;
    for (const auto& t : tools)
      if (t["function"].contains("strict") && t["function"]["strict"] == true) return true;
    return false;
  }
};

// Throws ApiError naming "tools", "tool_choice" or "parallel_tool_calls".
ChatTools parse_tools(const nlohmann::ordered_json& body);

// OpenAI messages -> a chat template's: contents as text (text parts joined
// by newlines, as vLLM does), the developer role as system (what templates
// know), a tool call's JSON-text arguments as an object (what templates
// print with tojson). Throws ApiError for a role or shape OpenAI refuses.
// template_renders_tools false: tool calls and tool results are written
// into the contents (Hermes' <tool_call> / <tool_response>) so a template
// that only prints contents still shows them.
// short_ids: tool-call ids as Mistral's templates demand them (nine letters
// and digits: the last nine of the id's, short_tool_call_id).
nlohmann::ordered_json normalize_messages(const nlohmann::ordered_json& messages, bool template_renders_tools, bool short_ids = false);
std::string short_tool_call_id(const std::string& id);

// For templates that do not render tools: a system message offering them in
// the Hermes convention (JSON in <tool_call></tool_call>), merged into the
// conversation's first system message or put before it.
void offer_tools_in_system_message(nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools);

// tool_choice "required" or a named function: the JSON schema the output
// must match (vLLM's approach, independent of the template): a named
// function's arguments, or a list of {"name", "arguments"} calls.
std::string forced_tool_call_schema(const ChatTools& tools);

}  // namespace sy::server
