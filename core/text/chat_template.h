// A model's chat template: the Jinja program in its tokenizer_config.json
// (or chat_template.jinja / chat_template.json beside it) that turns OpenAI-
// style messages into the prompt text the model was trained on. Rendered
// with the variables transformers passes (messages, tools, documents,
// add_generation_prompt, the special tokens, extra keyword arguments), so
// the prompt is byte-identical to apply_chat_template's.
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json.hpp>


namespace sy {

namespace jinja {
class Template;  // text/jinja.h: the interpreter stays behind this class
}

// JSON with the key order the client sent (templates print dicts in order).
using OrderedJson = nlohmann::ordered_json;

struct ChatRequest {
  OrderedJson messages = OrderedJson::array();
  OrderedJson tools;      // null or a list of JSON schemas
  OrderedJson documents;  // null or a list
  bool add_generation_prompt = true;
  // Leave the last (assistant) message open so generation continues it.
  bool continue_final_message = false;
  OrderedJson extra = OrderedJson::object();  // chat_template_kwargs
};

class ChatTemplate {
 public:
  // Which files of a model folder hold its template is decided by
  // ModelFolder (model/model_folder.h); this class compiles what it finds.
  // Throws naming `name` and the line for template syntax it refuses.
  static ChatTemplate from_source(const std::string& source, const std::string& name, OrderedJson special_tokens = OrderedJson::object());

  // tokenizer_config.json's "chat_template" value: one template string, or
  // named variants [{"name", "template"}] ("default" and "tool_use" used).
  static ChatTemplate from_config_value(const OrderedJson& value, const std::string& origin,
                                        OrderedJson special_tokens = OrderedJson::object());

  // Throws sy::Error naming the template and line, or the template's own
  // raise_exception message, for input it refuses.
  std::string apply(const ChatRequest& request) const;

  const std::string& source() const { return source_; }
  const std::string& name() const { return name_; }
  // bos_token, eos_token, ... as the template sees them.
  const OrderedJson& special_tokens() const { return special_; }
  // Whether the template was chosen from named variants (tool_use, ...).
  bool has_tool_variant() const { return tool_template_ != nullptr; }

 private:
  std::string source_, name_;
  OrderedJson special_ = OrderedJson::object();
  std::shared_ptr<jinja::Template> template_, tool_template_;
};

// Adds what transformers' special_tokens_map gives a template (bos_token,
// eos_token, ..., additional_special_tokens) from a tokenizer_config.json or
// special_tokens_map.json object; keys already in `out` win.
void collect_special_tokens(const OrderedJson& config, OrderedJson& out);

}  // namespace sy
