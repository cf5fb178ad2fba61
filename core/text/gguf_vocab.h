// The tokenizer a GGUF file carries (tokenizer.ggml.*), as the tokenizer.json
// that tokenizes like llama.cpp does with the same file:
//   gpt2   byte-level BPE: the file's vocabulary and merges, the
//          pre-tokenizer that tokenizer.ggml.pre names (a table: a new
//          family is one entry)
//   llama  SentencePiece-style BPE over scores: merges ranked by the merged
//          piece's score (llama.cpp's SPM merge order), byte fallback, the
//          space marker and the optional space prefix
// Control tokens become special added tokens, user-defined ones plain added
// tokens (both are matched in text as llama.cpp's parse_special does).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace sy::gguf {
class File;
}

namespace sy {

struct GgufTokenizerConfig {
  nlohmann::ordered_json tokenizer_json;  // tokenizer.json
  std::optional<int> bos_id, eos_id, eot_id, eom_id;
  std::string bos_token, eos_token;       // their strings ("" when absent)
  bool add_bos = false, add_eos = false;
  std::optional<std::string> chat_template;
  // tokenizer_config.json for a converted folder (chat template, bos/eos).
  nlohmann::ordered_json tokenizer_config() const;
};

// Throws naming the file and key for a vocabulary it cannot express.
GgufTokenizerConfig gguf_tokenizer(const gguf::File& f);
// The same, for the file at `path`, read once per path and kept (the
// tokenizer, the chat template and the eos ids of one model all ask).
const GgufTokenizerConfig& gguf_tokenizer_for(const std::string& path);

}  // namespace sy
