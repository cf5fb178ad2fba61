#include "chat_messages.h"

#include <cctype>
#include <set>

#include "request_parsing.h"

namespace sy::server {

using json = nlohmann::ordered_json;

namespace {

const std::set<std::string> kRoles = {"system", "developer", "user", "assistant", "tool"};

std::string text_of_parts(const json& parts, size_t index) {
  std::string text;
  for (const auto& part : parts) {
    const bool text_part = part.is_object() && part.contains("type") && (part["type"] == "text" || part["type"] == "input_text") &&
                           part.contains("text") && part["text"].is_string();
    if (!text_part)
      throw bad_request("messages[" + std::to_string(index) + "]: only text content parts ({\"type\": \"text\", \"text\": ...}) are supported",
                        "messages");
    if (!text.empty()) text += '\n';
    text += part["text"].get<std::string>();
  }
  return text;
}

// A tool call's arguments as the client sent them (OpenAI: JSON text) ->
// an object, which templates print with tojson; text that is not JSON
// stays text.
json arguments_object(const json& arguments) {
  if (!arguments.is_string()) return arguments;
  json parsed = json::parse(arguments.get<std::string>(), nullptr, false);
  return parsed.is_discarded() ? arguments : parsed;
}

// Hermes' way of writing a call and a result as text, for templates that
// print only contents.
std::string calls_as_text(const json& calls) {
  std::string text;
  for (const auto& c : calls) {
    const json& f = c.contains("function") ? c["function"] : c;
    json call = {{"name", f.value("name", "")}, {"arguments", f.contains("arguments") ? f["arguments"] : json::object()}};
    if (!text.empty()) text += '\n';
    text += "<tool_call>\n" + call.dump() + "\n</tool_call>";
  }
  return text;
}

}  // namespace

ChatTools parse_tools(const json& body) {
  ChatTools t;
  if (body.contains("tools") && !body["tools"].is_null()) {
    const json& tools = body["tools"];
    if (!tools.is_array()) throw bad_request("invalid type for 'tools': expected an array", "tools");
    std::set<std::string> names;
    for (size_t i = 0; i < tools.size(); ++i) {
      const json& tool = tools[i];
      const std::string where = "tools[" + std::to_string(i) + "]";
      if (!tool.is_object() || tool.value("type", "") != "function" || !tool.contains("function") || !tool["function"].is_object())
        throw bad_request(where + " must be {\"type\": \"function\", \"function\": {...}}", "tools");
      const json& f = tool["function"];
      if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>().empty())
        throw bad_request(where + ".function.name must be a non-empty string", "tools");
      if (f.contains("parameters") && !f["parameters"].is_null() && !f["parameters"].is_object())
        throw bad_request(where + ".function.parameters must be a JSON schema (an object)", "tools");
      if (!names.insert(f["name"].get<std::string>()).second)
        throw bad_request(where + ": the function name '" + f["name"].get<std::string>() + "' is given twice", "tools");
    }
    t.tools = tools;
  }
  if (body.contains("tool_choice") && !body["tool_choice"].is_null()) {
    const json& c = body["tool_choice"];
    if (c.is_string() && (c == "auto" || c == "none" || c == "required")) {
      t.choice = c.get<std::string>();
    } else if (c.is_object() && c.value("type", "") == "function" && c.contains("function") && c["function"].is_object() &&
               c["function"].contains("name") && c["function"]["name"].is_string()) {
      t.choice = "function";
      t.name = c["function"]["name"].get<std::string>();
      bool known = false;
      if (t.tools.is_array())
        for (const auto& tool : t.tools) known = known || tool["function"]["name"] == t.name;
      if (!known) throw bad_request("tool_choice names the function '" + t.name + "', which is not in 'tools'", "tool_choice");
    } else {
      throw bad_request("tool_choice must be 'none', 'auto', 'required' or {\"type\": \"function\", \"function\": {\"name\": ...}}",
                        "tool_choice");
    }
    if (t.choice == "required" && (!t.tools.is_array() || t.tools.empty()))
      throw bad_request("tool_choice 'required' needs at least one tool in 'tools'", "tool_choice");
  }
  if (body.contains("parallel_tool_calls") && !body["parallel_tool_calls"].is_null()) {
    if (!body["parallel_tool_calls"].is_boolean()) throw bad_request("invalid type for 'parallel_tool_calls': expected a boolean", "parallel_tool_calls");
    t.parallel = body["parallel_tool_calls"].get<bool>();
  }
  return t;
}

std::string short_tool_call_id(const std::string& id) {
  std::string alnum;
  for (char ch : id)
    if (std::isalnum(static_cast<unsigned char>(ch))) alnum.push_back(ch);
  if (alnum.size() >= 9) return alnum.substr(alnum.size() - 9);
  return std::string(9 - alnum.size(), '0') + alnum;
}

json normalize_messages(const json& messages, bool template_renders_tools, bool short_ids) {
  if (!messages.is_array() || messages.empty()) throw bad_request("'messages' must be a non-empty array", "messages");
  json out = json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw bad_request(where + " must be an object", "messages");
    if (!m.contains("role") || !m["role"].is_string()) throw bad_request(where + " needs a string 'role'", "messages");
    const std::string role = m["role"].get<std::string>();
    if (!kRoles.count(role))
      throw bad_request(where + ": unknown role '" + role + "' (system, developer, user, assistant or tool)", "messages");
    json msg = m;
    // OpenAI's developer messages are the system prompt for models that
    // predate the name; chat templates know only "system".
    if (role == "developer") msg["role"] = "system";
    const bool has_calls = role == "assistant" && m.contains("tool_calls") && m["tool_calls"].is_array() && !m["tool_calls"].empty();
    if (m.contains("content") && m["content"].is_array()) {
      msg["content"] = text_of_parts(m["content"], i);
    } else if (m.contains("content") && !m["content"].is_string() && !m["content"].is_null()) {
      throw bad_request(where + ": 'content' must be a string, an array of text parts, or null", "messages");
    } else if (!m.contains("content") || m["content"].is_null()) {
      if (!has_calls) throw bad_request(where + " needs 'content' (null only for an assistant message with tool_calls)", "messages");
      // As vLLM passes it: templates concatenate content with strings.
      msg["content"] = "";
    }
    if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
      if (!m["tool_calls"].is_array()) throw bad_request(where + ".tool_calls must be an array", "messages");
      for (auto& call : msg["tool_calls"]) {
        if (!call.is_object() || !call.contains("function") || !call["function"].is_object() || !call["function"].contains("name"))
          throw bad_request(where + ".tool_calls: each call needs function.name", "messages");
        if (call["function"].contains("arguments")) call["function"]["arguments"] = arguments_object(call["function"]["arguments"]);
        if (short_ids && call.contains("id") && call["id"].is_string()) call["id"] = short_tool_call_id(call["id"].get<std::string>());
      }
    }
    if (!template_renders_tools && has_calls) {
      const std::string before = msg["content"].is_string() && !msg["content"].get<std::string>().empty() ? msg["content"].get<std::string>() + "\n" : "";
      msg["content"] = before + calls_as_text(msg["tool_calls"]);
      msg.erase("tool_calls");
    }
    if (short_ids && role == "tool" && msg.contains("tool_call_id") && msg["tool_call_id"].is_string())
      msg["tool_call_id"] = short_tool_call_id(msg["tool_call_id"].get<std::string>());
    if (!template_renders_tools && role == "tool") {
      msg["role"] = "user";
      msg["content"] = "<tool_response>\n" + msg["content"].get<std::string>() + "\n</tool_response>";
      msg.erase("tool_call_id");
    }
    out.push_back(msg);
  }
  return out;
}

void offer_tools_in_system_message(json& messages, const json& tools) {
  std::string text =
      "You can call functions to help with the user's request. The functions, as JSON schemas, are:\n<tools>\n";
  for (const auto& tool : tools) text += tool["function"].dump() + "\n";
  text +=
      "</tools>\nTo call a function, answer with a JSON object holding its name and arguments between <tool_call> and </tool_call>:\n"
      "<tool_call>\n{\"name\": <function name>, \"arguments\": <arguments object>}\n</tool_call>";
  if (!messages.empty() && messages[0]["role"] == "system" && messages[0]["content"].is_string()) {
    messages[0]["content"] = messages[0]["content"].get<std::string>() + "\n\n" + text;
  } else {
    messages.insert(messages.begin(), json{{"role", "system"}, {"content", text}});
  }
}

std::string forced_tool_call_schema(const ChatTools& t) {
  auto parameters = [](const json& f) { return f.contains("parameters") && f["parameters"].is_object() ? f["parameters"] : json{{"type", "object"}}; };
  if (t.choice == "function") {
    for (const auto& tool : t.tools)
      if (tool["function"]["name"] == t.name) return parameters(tool["function"]).dump();
  }
  json any = json::array();
  for (const auto& tool : t.tools) {
    const json& f = tool["function"];
    any.push_back({{"type", "object"},
                   {"properties", {{"name", {{"type", "string"}, {"enum", json::array({f["name"]})}}}, {"arguments", parameters(f)}}},
                   {"required", {"name", "arguments"}},
                   {"additionalProperties", false}});
  }
  json schema = {{"type", "array"}, {"items", any.size() == 1 ? any[0] : json{{"anyOf", any}}}, {"minItems", 1}};
  if (!t.parallel) schema["maxItems"] = 1;
  return schema.dump();
}

}  // namespace sy::server
