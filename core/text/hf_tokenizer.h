// Hugging Face's tokenizer.json in C++: added tokens matched first (lstrip,
// rstrip, single_word, normalized), then normalizer -> pre-tokenizer ->
// model on the text between them, the post-processor for BOS/EOS, and the
// decoder chain back to text, with the tokenizers library's semantics.
#pragma once
#include <array>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "text/hf_components.h"
#include "text/tokenizer.h"

namespace sy {

class HfTokenizer : public Tokenizer {
 public:
  // Throws naming the file and the JSON path for anything malformed or
  // unsupported. `config`: the tokenizer_config.json that came with it
  // (named `config_name` in errors), if any: transformers' Llama and Gemma
  // classes rebuild the post-processor from its add_bos_token/add_eos_token.
  static std::unique_ptr<HfTokenizer> load(const std::string& path, const hf::Json* config = nullptr, const std::string& config_name = {});
  static std::unique_ptr<HfTokenizer> parse(const std::string& json_text, const std::string& label);

  std::vector<int> encode(const std::string& text, bool add_special) const override;
  std::string decode(const std::vector<int>& ids, bool skip_special = false) const override;
  int vocab_size() const override;
  std::optional<int> token_id(const std::string& token) const override;
  std::string token(int id) const override;
  bool is_special(int id) const override;
  std::string token_bytes(int id) const override;
  std::string kind() const override { return "tokenizer.json (" + model_->name() + ")"; }

 private:
  struct Added {
    int id;
    std::string content;
    bool single_word, lstrip, rstrip, normalized, special;
  };
  struct Segment {
    std::string text;
    int added = -1;  // the added token's id, or -1 for plain text
    bool at_start = false;
  };
  // Splits text at the added tokens of one kind (normalized or not).
  std::vector<Segment> split_added(const std::string& text, bool at_start, bool normalized) const;
  void encode_plain(const Segment& s, std::vector<int>& out) const;

  std::unique_ptr<hf::Normalizer> normalizer_;
  std::unique_ptr<hf::PreTokenizer> pre_tokenizer_;
  std::unique_ptr<hf::Model> model_;
  std::unique_ptr<hf::PostProcessor> post_;
  std::unique_ptr<hf::Decoder> decoder_;
  std::vector<Added> added_;  // longest content first
  std::array<std::vector<size_t>, 256> added_by_first_byte_;  // indices into added_, longest first
  std::unordered_map<int, size_t> added_by_id_;
  std::unordered_map<std::string, int> added_by_content_;
};

}  // namespace sy
