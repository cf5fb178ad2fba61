#include "tokenizer_endpoints.h"

#include "logprob_format.h"

namespace sy::server {

using json = nlohmann::ordered_json;

namespace {
json parse_body(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw bad_request("the body must be a JSON object");
  return j;
}

bool flag(const json& j, const char* key, bool fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean()) throw bad_request(std::string("invalid type for '") + key + "': expected a boolean", key);
  return j[key].get<bool>();
}
}  // namespace

nlohmann::json tokenize_request(sy_engine* engine, const std::string& body, const Tokenize& tokenize, const RenderChat& render_chat,
                                bool renders_tools) {
  const json j = parse_body(body);
  std::vector<int32_t> ids;
  if (j.contains("messages")) {
    if (!render_chat) throw bad_request("this model has no chat template: tokenize a 'prompt'", "messages");
    json messages = normalize_messages(j["messages"], renders_tools);
    json request = {{"messages", messages}, {"add_generation_prompt", flag(j, "add_generation_prompt", true)},
                    {"continue_final_message", flag(j, "continue_final_message", false)}};
    const ChatTools tools = parse_tools(j);
    if (tools.offered()) {
      if (renders_tools) request["tools"] = tools.tools;
      else offer_tools_in_system_message(request["messages"], tools.tools);
    }
    if (j.contains("chat_template_kwargs") && j["chat_template_kwargs"].is_object()) request["chat_template_kwargs"] = j["chat_template_kwargs"];
    ids = tokenize(render_chat(request), flag(j, "add_special_tokens", false));
  } else if (j.contains("prompt") && j["prompt"].is_string()) {
    ids = tokenize(j["prompt"].get<std::string>(), flag(j, "add_special_tokens", true));
  } else {
    throw bad_request("give 'prompt' (a string) or 'messages'", "prompt");
  }
  nlohmann::json out = {{"count", ids.size()}, {"max_model_len", sy_engine_max_context(engine)}, {"tokens", ids}};
  if (flag(j, "return_token_strs", false)) {
    const TokenNames names(engine, false);
    out["token_strs"] = nlohmann::json::array();
    for (int32_t id : ids) out["token_strs"].push_back(names.name(id));
  }
  return out;
}

nlohmann::json detokenize_request(sy_engine* engine, const std::string& body) {
  const json j = parse_body(body);
  if (!j.contains("tokens") || !j["tokens"].is_array()) throw bad_request("'tokens' must be an array of token ids", "tokens");
  const sy_tokenizer* tok = sy_engine_tokenizer(engine);
  if (!tok) throw bad_request("this model has no tokenizer", "tokens");
  const int32_t vocab = sy_tokenizer_vocab_size(tok);
  std::vector<int32_t> ids;
  for (const auto& x : j["tokens"]) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= vocab)
      throw bad_request("'tokens' holds " + x.dump() + ", not a token id of this model (0 to " + std::to_string(vocab - 1) + ")", "tokens");
    ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
  }
  return {{"prompt", decode_ids(tok, ids, false)}};
}

std::string decode_ids(const sy_tokenizer* tok, const std::vector<int32_t>& ids, bool skip_special) {
  std::string text(ids.size() * 8 + 16, '\0');
  int64_t n = 0;
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (sy_tokenizer_decode(tok, ids.data(), static_cast<int32_t>(ids.size()), skip_special ? 1 : 0, text.data(),
                            static_cast<int64_t>(text.size()), &n) != SY_API_OK)
      throw bad_request(sy_last_error(), "tokens");
    if (n <= static_cast<int64_t>(text.size())) break;
    text.resize(static_cast<size_t>(n));  // the full length is known now
  }
  text.resize(static_cast<size_t>(n));
  return text;
}

}  // namespace sy::server
