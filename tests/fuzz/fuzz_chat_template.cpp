// libFuzzer target: the Jinja interpreter behind chat templates. The input
// is split at its first 0xFF 0xFE pair: a template before, a JSON request
// ({messages, tools, ...} or a message list) after; without the marker the
// whole input is a template rendered for a fixed conversation with tools.
// Parse and render errors must end in sy::Error; rendering is bounded
// (steps, output, recursion), so no input may hang or exhaust memory.
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/error.h"
#include "text/chat_template.h"

namespace {

const char* kConversation = R"({"messages": [
  {"role": "system", "content": "Be brief."},
  {"role": "user", "content": "Weather in Paris?"},
  {"role": "assistant", "content": null, "tool_calls": [{"id": "abc123def", "type": "function",
    "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 3, "ratio": 0.5, "x": [true, null]}}}]},
  {"role": "tool", "tool_call_id": "abc123def", "content": "22 C"},
  {"role": "user", "content": "Über 東京 😀"}],
 "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]})";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string in(reinterpret_cast<const char*>(data), size);
  const size_t cut = in.find("\xFF\xFE");
  const std::string source = cut == std::string::npos ? in : in.substr(0, cut);
  try {
    const sy::OrderedJson j = sy::OrderedJson::parse(cut == std::string::npos ? std::string(kConversation) : in.substr(cut + 2));
    sy::ChatRequest r;
    if (j.is_array()) {
      r.messages = j;
    } else if (j.is_object()) {
      if (j.contains("messages")) r.messages = j["messages"];
      if (j.contains("tools")) r.tools = j["tools"];
      if (j.contains("add_generation_prompt") && j["add_generation_prompt"].is_boolean()) r.add_generation_prompt = j["add_generation_prompt"].get<bool>();
    }
    auto t = sy::ChatTemplate::from_source(source, "fuzz.jinja", sy::OrderedJson{{"bos_token", "<s>"}, {"eos_token", "</s>"}});
    (void)t.apply(r);
  } catch (const sy::Error&) {
  } catch (const nlohmann::json::exception&) {  // the request JSON itself
  }
  return 0;
}
