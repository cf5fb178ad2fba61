// libFuzzer target: the tokenizer.json loader (models, normalizers,
// pre-tokenizers with PCRE2 patterns, decoders, post-processors, added
// tokens) and its encoder and decoder. The input is split at its first
// 0xFF 0xFE pair: a tokenizer.json before, a text to encode (and decode
// back) after. Without the marker the whole input is a text for a real
// byte-level BPE tokenizer (tests/models/real/llama3-torchscript).
// Anything bad must end in sy::Error, nothing else.
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "base/error.h"
#include "text/hf_tokenizer.h"

namespace {

const sy::HfTokenizer* real_tokenizer() {
  static const std::unique_ptr<sy::HfTokenizer> tok = []() -> std::unique_ptr<sy::HfTokenizer> {
    std::ifstream in(SWITCHYARD_SOURCE_DIR "/tests/models/real/llama3-torchscript/tokenizer.json");
    std::stringstream s;
    s << in.rdbuf();
    try {
      return sy::HfTokenizer::parse(s.str(), "llama3 tokenizer.json");
    } catch (const sy::Error&) {
      return nullptr;
    }
  }();
  return tok.get();
}

void round_trip(const sy::HfTokenizer& tok, const std::string& text) {
  for (bool special : {false, true}) {
    std::vector<int> ids = tok.encode(text, special);
    (void)tok.decode(ids, false);
    (void)tok.decode(ids, true);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string in(reinterpret_cast<const char*>(data), size);
  const size_t cut = in.find("\xFF\xFE");
  try {
    if (cut == std::string::npos) {
      if (const auto* tok = real_tokenizer()) round_trip(*tok, in);
    } else {
      auto tok = sy::HfTokenizer::parse(in.substr(0, cut), "fuzz tokenizer.json");
      round_trip(*tok, in.substr(cut + 2));
    }
  } catch (const sy::Error&) {
  }
  return 0;
}
