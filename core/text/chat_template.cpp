#include "text/chat_template.h"

#include "text/jinja.h"

#include <optional>

#include "base/error.h"

namespace sy {

namespace {

// "bos_token": "<s>" or {"content": "<s>", ...} (an AddedToken).
std::optional<std::string> token_text(const OrderedJson& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

void collect_special_tokens(const OrderedJson& config, OrderedJson& out) {
  if (!config.is_object()) return;
  for (const auto& [key, value] : config.items()) {
    const bool token_key = key.size() > 6 && key.compare(key.size() - 6, 6, "_token") == 0;
    if (token_key && !out.contains(key))
      if (auto t = token_text(value)) out[key] = *t;
    if (key == "additional_special_tokens" && value.is_array() && !out.contains(key)) {
      auto list = OrderedJson::array();
      for (const auto& e : value)
        if (auto t = token_text(e)) list.push_back(*t);
      out[key] = list;
    }
  }
}

namespace {

// chat_template: a string, or [{"name": "default", "template": ...}, ...].
void pick_templates(const OrderedJson& value, const std::string& file, std::string& main, std::string& tool_use) {
  if (value.is_string()) {
    main = value.get<std::string>();
    return;
  }
  if (!value.is_array()) SY_THROW(file << ": 'chat_template' must be a string or a list of {name, template}");
  for (const auto& entry : value) {
    if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") || !entry["template"].is_string())
      SY_THROW(file << ": each 'chat_template' entry needs a 'name' and a 'template' string");
    const std::string name = entry["name"].is_string() ? entry["name"].get<std::string>() : "";
    if (name == "default") main = entry["template"].get<std::string>();
    else if (name == "tool_use") tool_use = entry["template"].get<std::string>();
  }
  if (main.empty() && !value.empty()) main = value[0]["template"].get<std::string>();
}

std::shared_ptr<jinja::Template> compile(const std::string& source, const std::string& name) {
  return std::make_shared<jinja::Template>(jinja::Template::parse(source, name));
}

}  // namespace

ChatTemplate ChatTemplate::from_source(const std::string& source, const std::string& name, OrderedJson special_tokens) {
  ChatTemplate t;
  t.source_ = source;
  t.name_ = name;
  t.special_ = std::move(special_tokens);
  t.template_ = compile(source, name);
  return t;
}

ChatTemplate ChatTemplate::from_config_value(const OrderedJson& value, const std::string& origin, OrderedJson special_tokens) {
  std::string main, tool_use;
  pick_templates(value, origin, main, tool_use);
  if (main.empty()) SY_THROW(origin << ": 'chat_template' is empty");
  ChatTemplate t = from_source(main, origin, std::move(special_tokens));
  if (!tool_use.empty()) t.tool_template_ = compile(tool_use, origin + " (tool_use)");
  return t;
}

std::string ChatTemplate::apply(const ChatRequest& request) const {
  if (!request.messages.is_array()) SY_THROW("chat: 'messages' must be a list");
  jinja::Dict context;
  for (const auto& [k, v] : special_.items()) context.set(k, jinja::Value::from_json(v));
  context.set("messages", jinja::Value::from_json(request.messages));
  context.set("tools", request.tools.is_null() ? jinja::Value(jinja::None{}) : jinja::Value::from_json(request.tools));
  context.set("documents", request.documents.is_null() ? jinja::Value(jinja::None{}) : jinja::Value::from_json(request.documents));
  context.set("add_generation_prompt", jinja::Value(request.add_generation_prompt && !request.continue_final_message));
  if (request.extra.is_object())
    for (const auto& [k, v] : request.extra.items()) context.set(k, jinja::Value::from_json(v));
  const bool with_tools = request.tools.is_array() && !request.tools.empty();
  const jinja::Template& t = with_tools && tool_template_ ? *tool_template_ : *template_;
  std::string text = t.render(jinja::Value(std::move(context)));
  if (request.continue_final_message) {
    if (request.messages.empty() || !request.messages.back().is_object() || !request.messages.back().contains("content") ||
        !request.messages.back()["content"].is_string())
      SY_THROW("chat: continue_final_message needs a final message with text content");
    std::string last = request.messages.back()["content"].get<std::string>();
    const size_t b = last.find_first_not_of(" \t\r\n"), e = last.find_last_not_of(" \t\r\n");
    last = b == std::string::npos ? "" : last.substr(b, e - b + 1);
    const size_t at = text.rfind(last);
    if (last.empty() || at == std::string::npos)
      SY_THROW("chat: continue_final_message is set but the template does not reproduce the final message's text");
    text.resize(at + last.size());
  }
  return text;
}

}  // namespace sy
