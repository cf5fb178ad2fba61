// The llama2.c tokenizer format (tokenizer.bin / tok512.bin): a vocabulary of
// byte-string pieces with merge scores. Encoding is llama2.c's: a dummy
// prefix space, one piece per UTF-8 character (or byte-fallback tokens
// <0xXX> = id 3 + byte), then greedy merges of the best-scoring adjacent pair.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace sy {

class Llama2cTokenizer {
 public:
  static constexpr int kBos = 1;
  static constexpr int kEos = 2;

  // Throws sy::Error naming the file for a missing, truncated or malformed file.
  static Llama2cTokenizer load(const std::string& path);
  static Llama2cTokenizer from_bytes(const std::string& bytes, const std::string& label);

  std::vector<int> encode(const std::string& text, bool bos, bool eos) const;
  // The text for `token` following `prev` (llama2.c drops the leading space
  // of the first piece after BOS; byte tokens become their byte).
  std::string decode_piece(int prev, int token) const;
  std::string decode(const std::vector<int>& tokens, int prev = kBos) const;


  int vocab_size() const { return static_cast<int>(pieces_.size()); }
  const std::string& piece(int id) const { return pieces_.at(static_cast<size_t>(id)); }

 private:
  int lookup(const std::string& s) const;
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::unordered_map<std::string, int> ids_;
};

}  // namespace sy
