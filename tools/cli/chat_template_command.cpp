// switchyard chat-template: messages -> the prompt text (and ids) a model's
// chat template makes, for checking it against transformers'
// apply_chat_template.
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli_support.h"
#include "commands.h"

namespace sy::cli {

namespace {

OrderedJson read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SY_CHECK(in, path << ": cannot open");
  try {
    return OrderedJson::parse(in);
  } catch (const nlohmann::json::exception& e) {
    SY_THROW(path << ": not valid JSON: " << e.what());
  }
}

// A request object {messages, tools?, documents?, add_generation_prompt?,
// continue_final_message?, chat_template_kwargs?} or a bare message list.
ChatRequest to_request(const OrderedJson& j, bool generation_prompt) {
  ChatRequest r;
  r.add_generation_prompt = generation_prompt;
  if (j.is_array()) {
    r.messages = j;
    return r;
  }
  SY_CHECK(j.is_object() && j.contains("messages"), "expected a list of messages or an object with 'messages'");
  r.messages = j["messages"];
  if (j.contains("tools")) r.tools = j["tools"];
  if (j.contains("documents")) r.documents = j["documents"];
  if (j.contains("add_generation_prompt")) r.add_generation_prompt = j["add_generation_prompt"].get<bool>();
  if (j.contains("continue_final_message")) r.continue_final_message = j["continue_final_message"].get<bool>();
  if (j.contains("chat_template_kwargs")) r.extra = j["chat_template_kwargs"];
  return r;
}

}  // namespace

int cmd_chat_template(const std::vector<std::string>& args) {
  std::string model, template_file, messages_file, batch;
  bool no_generation_prompt = false, json = false;
  po::options_description d("chat-template options");
  d.add_options()("help,h", "show this help")(
      "tokenizer", po::value(&model), "a model folder (its tokenizer_config.json or chat_template.jinja; its tokenizer for the ids)")(
      "model", po::value(&model), "the same as --tokenizer")(
      "template", po::value(&template_file), "a template file (.jinja, or .json with chat_template); with --tokenizer: overrides its")(
      "messages", po::value(&messages_file), "a JSON file: a list of messages, or {messages, tools, ...}")(
      "batch", po::value(&batch), "a JSON file with a list of such requests: prints one JSON line each ({text} or {error})")(
      "no-generation-prompt", po::bool_switch(&no_generation_prompt), "do not open an assistant turn at the end")(
      "json", po::bool_switch(&json), "print {\"rendered\": ..., \"ids\": [...]} (ids: the text encoded without adding special tokens)");
  auto p = parse(args, d,
                 "usage: switchyard chat-template (--tokenizer DIR | --template FILE) (--messages F.json | --batch F.json) "
                 "[--no-generation-prompt] [--json]");
  if (p.help) return 0;
  SY_CHECK(!model.empty() || !template_file.empty(), "give --tokenizer DIR (a model folder) or --template FILE");
  SY_CHECK(messages_file.empty() != batch.empty(), "give --messages or --batch (one of them)");
  std::optional<ChatTemplate> chat;
  if (!template_file.empty()) chat = ModelFolder::chat_template_file(template_file);
  else chat = ModelFolder::chat_template_of(model);
  SY_CHECK(chat, model << ": no chat template (tokenizer_config.json has no chat_template and there is no chat_template.jinja)");
  if (!batch.empty()) {
    const OrderedJson requests = read_json_file(batch);
    SY_CHECK(requests.is_array(), batch << ": expected a JSON list of requests");
    for (const auto& r : requests) {
      nlohmann::json out;
      try {
        out["rendered"] = chat->apply(to_request(r, !no_generation_prompt));
      } catch (const std::exception& e) {
        out["error"] = e.what();
      }
      std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    }
    return 0;
  }
  const std::string text = chat->apply(to_request(read_json_file(messages_file), !no_generation_prompt));
  if (!json) {
    std::cout << text;
    return 0;
  }
  nlohmann::json out{{"rendered", text}};
  const std::string tok_path = !model.empty() ? ModelFolder::find_tokenizer_file(model) : "";
  if (!tok_path.empty()) out["ids"] = ModelFolder::load_tokenizer_file(tok_path)->encode(text, false);  // the template already wrote BOS
  std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  return 0;
}

}  // namespace sy::cli
