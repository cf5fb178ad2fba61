// libFuzzer target: an OpenAI request body -> the server's parse_request
// (the code `switchyard serve` runs), tokenizing text prompts with the shared
// stories tokenizer. Bad bodies must end in an ApiError, nothing else.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "base/error.h"
#include "request_parsing.h"
#include "shared_tokenizer.h"
#include "tokenizer/llama2c_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& tok = shared_tokenizer();
  if (size == 0) return 0;
  sy::server::RequestLimits limits;
  limits.model_name = "stories260K";
  limits.max_prompt_tokens = 512;
  auto tokenize = [&](const std::string& text) {
    if (!tok) throw sy::server::bad_request("no tokenizer", "prompt");
    std::vector<int> ids = tok->encode(text, true, false);
    return std::vector<int32_t>(ids.begin(), ids.end());
  };
  try {
    // The first byte picks the endpoint: completions or chat completions.
    sy::server::ParsedRequest r =
        sy::server::parse_request(std::string(reinterpret_cast<const char*>(data) + 1, size - 1), data[0] & 1, limits, tokenize);
    (void)r;
  } catch (const sy::server::ApiError&) {
  }
  return 0;
}
