#include "chat/chat_template.h"

#include "chat/jinja.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "gguf/gguf_file.h"
#include "tokenizer/gguf_vocab.h"

namespace sy {

namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) SY_THROW("cannot read " << p.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

OrderedJson read_json(const fs::path& p) {
  try {
    return OrderedJson::parse(read_text(p));
  } catch (const OrderedJson::exception& e) {
    SY_THROW(p.string() << ": not valid JSON: " << e.what());
  }
}

// "bos_token": "<s>" or {"content": "<s>", ...} (an AddedToken).
std::optional<std::string> token_text(const OrderedJson& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

// What transformers' special_tokens_map gives the template.
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

std::optional<ChatTemplate> ChatTemplate::from_model_dir(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec) && gguf::File::is_gguf(path)) {
    // A GGUF file carries its template (tokenizer.chat_template) and tokens.
    const GgufTokenizerConfig& g = gguf_tokenizer_for(path);
    if (!g.chat_template) return std::nullopt;
    OrderedJson special = OrderedJson::object();
    if (!g.bos_token.empty()) special["bos_token"] = g.bos_token;
    if (!g.eos_token.empty()) special["eos_token"] = g.eos_token;
    return from_source(*g.chat_template, path + " (tokenizer.chat_template)", special);
  }
  fs::path dir = fs::is_directory(path) ? fs::path(path) : fs::path(path).parent_path();
  OrderedJson special = OrderedJson::object();
  std::string main, tool_use, origin;
  const fs::path config_path = dir / "tokenizer_config.json";
  if (fs::exists(config_path)) {
    const OrderedJson config = read_json(config_path);
    collect_special_tokens(config, special);
    if (config.is_object() && config.contains("chat_template") && !config["chat_template"].is_null()) {
      pick_templates(config["chat_template"], config_path.string(), main, tool_use);
      origin = config_path.string();
    }
  }
  if (fs::exists(dir / "special_tokens_map.json")) collect_special_tokens(read_json(dir / "special_tokens_map.json"), special);
  // Newer exports keep the template in its own file, which then wins.
  if (fs::exists(dir / "chat_template.jinja")) {
    main = read_text(dir / "chat_template.jinja");
    origin = (dir / "chat_template.jinja").string();
  } else if (fs::exists(dir / "chat_template.json")) {
    const OrderedJson j = read_json(dir / "chat_template.json");
    if (!j.is_object() || !j.contains("chat_template")) SY_THROW((dir / "chat_template.json").string() << ": no 'chat_template' field");
    pick_templates(j["chat_template"], (dir / "chat_template.json").string(), main, tool_use);
    origin = (dir / "chat_template.json").string();
  }
  if (main.empty()) return std::nullopt;
  ChatTemplate t = from_source(main, origin, special);
  if (!tool_use.empty()) t.tool_template_ = compile(tool_use, origin + " (tool_use)");
  return t;
}

ChatTemplate ChatTemplate::from_file(const std::string& path) {
  const fs::path p(path);
  OrderedJson special = OrderedJson::object();
  if (fs::exists(p.parent_path() / "tokenizer_config.json")) collect_special_tokens(read_json(p.parent_path() / "tokenizer_config.json"), special);
  if (p.extension() == ".json") {
    const OrderedJson j = read_json(p);
    std::string main, tool_use;
    if (!j.is_object() || !j.contains("chat_template")) SY_THROW(path << ": no 'chat_template' field");
    pick_templates(j["chat_template"], path, main, tool_use);
    ChatTemplate t = from_source(main, path, special);
    if (!tool_use.empty()) t.tool_template_ = compile(tool_use, path + " (tool_use)");
    return t;
  }
  return from_source(read_text(p), path, special);
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
