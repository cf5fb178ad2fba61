// libFuzzer target: bytes -> the GGUF reader (header, metadata, tensor
// directory), every tensor's dequantization and block mapping, the
// tokenizer.json its vocabulary makes (parsed by the tokenizer), and the
// decoder graph built from it through the ONNX importer. Any input must end
// in results or a sy::Error, never a crash, leak or sanitizer report.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/error.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_tensors.h"
#include "graph/gguf_model.h"
#include "text/gguf_vocab.h"
#include "text/hf_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<sy::gguf::File> f;
  try {
    auto src = std::make_shared<sy::gguf::MemorySource>(std::string(reinterpret_cast<const char*>(data), size));
    f = std::make_unique<sy::gguf::File>(sy::gguf::File::parse(src, "fuzz.gguf"));
  } catch (const sy::Error&) {
    return 0;
  }
  for (const auto& t : f->tensors()) {
    try {
      const auto raw = f->read_raw(t);
      (void)sy::gguf::dequantize(t, raw);
      (void)sy::gguf::to_block_quant(t, raw);
    } catch (const sy::Error&) {
    }
  }
  try {
    const sy::GgufTokenizerConfig tok = sy::gguf_tokenizer(*f);
    auto hf = sy::HfTokenizer::parse(tok.tokenizer_json.dump(), "fuzz.gguf");
    (void)hf->decode(hf->encode("Hello, world 123!", true));
  } catch (const sy::Error&) {
  }
  try {
    sy::ImportOptions options;
    options.max_tensors = 100000;
    (void)sy::import_gguf(*f, "/nonexistent/fuzz", options);
  } catch (const sy::Error&) {
  }
  return 0;
}
