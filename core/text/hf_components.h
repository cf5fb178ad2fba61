// The parts of a Hugging Face tokenizer.json, each built from its JSON
// object: normalizers, pre-tokenizers, models (BPE, Unigram, WordLevel,
// WordPiece), post-processors and decoders, with the tokenizers library's
// semantics. Errors name the JSON path of the part ("pre_tokenizer.
// pretokenizers[1]: unknown type 'X'").
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace sy::hf {

using Json = nlohmann::json;

// A JSON integer that fits an int (token ids, counts); throws naming where
// for anything else (a float, a huge number), never converting silently.
int json_int(const Json& v, const std::string& where);

struct Normalizer {
  virtual ~Normalizer() = default;
  virtual std::string normalize(const std::string& s) const = 0;
};

// A piece of text between pre-tokenizer splits; at_start: it begins the
// whole input (Metaspace's "first" prepend scheme looks at that).
struct Piece {
  std::string text;
  bool at_start = false;
};

struct PreTokenizer {
  virtual ~PreTokenizer() = default;
  virtual std::vector<Piece> split(std::vector<Piece> pieces) const = 0;
};

struct Model {
  virtual ~Model() = default;
  virtual void tokenize(const std::string& word, std::vector<int>& out) const = 0;
  virtual std::optional<int> id(const std::string& token) const = 0;
  virtual std::string token(int id) const = 0;  // "" if none
  virtual int size() const = 0;                 // one past the largest id
  virtual std::string name() const = 0;
};

struct PostProcessor {
  virtual ~PostProcessor() = default;
  virtual void process(std::vector<int>& ids) const = 0;
};

struct Decoder {
  virtual ~Decoder() = default;
  // Rewrites the token strings in place (they are concatenated afterwards).
  virtual void decode(std::vector<std::string>& tokens) const = 0;
  // One token's raw bytes in the middle of a text (Tokenizer::token_bytes):
  // the stage's per-token rewrite, without edge rules or UTF-8 repair.
  // By default, decode() of the token alone.
  virtual std::string token_bytes(const std::string& token) const;
};

// Each throws sy::Error naming `where` for an unknown or malformed part.
// A JSON null gives nullptr (no such stage).
std::unique_ptr<Normalizer> make_normalizer(const Json& j, const std::string& where);
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Json& j, const std::string& where);
std::unique_ptr<Model> make_model(const Json& j, const std::string& where);
std::unique_ptr<Decoder> make_decoder(const Json& j, const std::string& where);
// token_id resolves special-token names of the templates.
std::unique_ptr<PostProcessor> make_post_processor(const Json& j, const std::string& where,
                                                   const std::unordered_map<std::string, int>& token_ids);

// GPT-2's byte-level alphabet: every byte as a printable code point.
const std::string& byte_to_unicode(unsigned char b);
// The reverse: the byte of a code point of that alphabet, or -1.
int unicode_to_byte(char32_t cp);

}  // namespace sy::hf
