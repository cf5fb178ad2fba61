// libFuzzer target: the llama2.c tokenizer loader and encoder. The input is
// split at its first 0xFF 0xFE pair: the bytes before are a tokenizer file,
// the bytes after a text to encode (and decode back) with it. Without the
// marker the whole input is the text and the shared stories tokenizer
// encodes it.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "base/error.h"
#include "shared_tokenizer.h"
#include "text/llama2c_tokenizer.h"

namespace {

void round_trip(const sy::Llama2cTokenizer& tok, const std::string& text) {
  std::vector<int> ids = tok.encode(text, true, false);
  for (int id : ids) (void)tok.piece(id);
  (void)tok.decode(ids);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& shared = shared_tokenizer();
  std::string in(reinterpret_cast<const char*>(data), size);
  size_t cut = in.find("\xFF\xFE");
  try {
    if (cut == std::string::npos) {
      if (shared) round_trip(*shared, in);
    } else {
      sy::Llama2cTokenizer tok = sy::Llama2cTokenizer::from_bytes(in.substr(0, cut), "fuzz-tokenizer.bin");
      round_trip(tok, in.substr(cut + 2));
    }
  } catch (const sy::Error&) {
  }
  return 0;
}
