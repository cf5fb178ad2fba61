// libFuzzer target: an OpenAI request body -> the server's parse_request
// (the code `switchyard serve` runs), tokenizing text prompts with the shared
// stories tokenizer. Bad bodies must end in an ApiError, nothing else.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "base/error.h"
#include "model/model_folder.h"
#include "request_parsing.h"
#include "shared_tokenizer.h"
#include "text/llama2c_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& tok = shared_tokenizer();
  if (size == 0) return 0;
  sy::server::RequestLimits limits;
  limits.model_name = "stories260K";
  limits.max_prompt_tokens = 512;
  auto tokenize = [&](const std::string& text, bool add_special) {
    if (!tok) throw sy::server::bad_request("no tokenizer", "prompt");
    std::vector<int> ids = tok->encode(text, add_special, false);
    return std::vector<int32_t>(ids.begin(), ids.end());
  };
  // Chat requests go through a real chat template (ChatML with tools), as
  // the server renders them.
  static const sy::ChatTemplate chat = sy::ModelFolder::chat_template_file(SWITCHYARD_SOURCE_DIR "/tests/text/chat/templates/chatml_tools.jinja");
  auto render = [&](const nlohmann::ordered_json& r) {
    sy::ChatRequest cr;
    cr.messages = r["messages"];
    if (r.contains("tools")) cr.tools = r["tools"];
    if (r.contains("chat_template_kwargs")) cr.extra = r["chat_template_kwargs"];
    cr.add_generation_prompt = r.value("add_generation_prompt", true);
    cr.continue_final_message = r.value("continue_final_message", false);
    try {
      return chat.apply(cr);
    } catch (const sy::Error& e) {
      throw sy::server::bad_request(e.what(), "messages");
    }
  };
  try {
    // The first byte picks the endpoint: completions or chat completions.
    sy::server::ParsedRequest r =
        sy::server::parse_request(std::string(reinterpret_cast<const char*>(data) + 1, size - 1), data[0] & 1, limits, tokenize, render);
    (void)r;
  } catch (const sy::server::ApiError&) {
  }
  return 0;
}
