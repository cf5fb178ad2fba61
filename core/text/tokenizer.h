// Tokenizers behind one interface: Hugging Face's tokenizer.json
// (hf_tokenizer.h) and llama2.c's tokenizer.bin (llama2c_tokenizer.h), found
// from a model folder or named directly.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace sy {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Text -> ids. add_special: the tokenizer's own additions (BOS/EOS by its
  // post-processor). Special tokens written in the text are recognised
  // either way. Any bytes are accepted (invalid UTF-8 becomes U+FFFD).
  virtual std::vector<int> encode(const std::string& text, bool add_special) const = 0;
  // Ids -> text; special tokens kept unless skip_special.
  virtual std::string decode(const std::vector<int>& ids, bool skip_special = false) const = 0;
  virtual int vocab_size() const = 0;
  virtual std::optional<int> token_id(const std::string& token) const = 0;
  virtual std::string token(int id) const = 0;  // the vocabulary's string for id ("" if none)
  virtual bool is_special(int id) const = 0;
  // The bytes id adds to the text inside a sequence, as the decoder makes
  // them (byte-level alphabet undone, byte-fallback tokens as their byte, the
  // SentencePiece space marker as a space), without the rules that apply at
  // the text's edges (the first token's leading space) and without repairing
  // partial UTF-8: what a structured-output processor matches text against.
  // "" for special tokens and ids outside the vocabulary.
  virtual std::string token_bytes(int id) const = 0;
  virtual std::string kind() const = 0;         // "tokenizer.json (BPE)", "llama2.c", ...
};

// The tokenizer in one file: tokenizer.json, llama2.c's .bin, or a GGUF
// file's vocabulary. Throws naming the path when it is missing or malformed.
// `tokenizer_config`: the tokenizer_config.json that goes with a
// tokenizer.json (HfTokenizer::load). Which files go with a model or a
// folder is ModelFolder's decision (model/model_folder.h).
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path, const nlohmann::json* tokenizer_config = nullptr,
                                          const std::string& config_name = {});

// Streaming detokenization: the text each new token adds, given the tokens
// before it. Decodes a short window of context so that decoders which look
// at neighbours (a leading-space rule, byte fallback, multi-byte UTF-8) give
// the same text as decoding everything at once; text ending in an
// incomplete character is held back until a later token completes it.
class StreamDecoder {
 public:
  // context: tokens already there (the prompt); they are never emitted.
  StreamDecoder(const Tokenizer& tok, const std::vector<int>& context, bool skip_special = false);
  std::string push(int token);
  // Text still held back (an incomplete character at the end).
  std::string flush();

 private:
  const Tokenizer& tok_;
  std::vector<int> ids_;
  size_t prefix_ = 0, read_ = 0;  // window start, end of what was emitted
  bool skip_special_;
};

// The text `tokens` add after `context` (as streamed: special tokens left out).
std::string decode_continuation(const Tokenizer& tok, const std::vector<int>& context, const std::vector<int>& tokens,
                                bool skip_special = true);

}  // namespace sy
