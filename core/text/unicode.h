// UTF-8 and Unicode helpers for the tokenizers: code point iteration, valid
// UTF-8 from any bytes, normalization forms and case (utf8proc), character
// classes, and regular expressions with Unicode properties (PCRE2).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sy::unicode {

// Length of the UTF-8 sequence starting with byte c (1 for invalid leads).
int sequence_length(unsigned char c);

// The code points of s (s must be valid UTF-8) and their byte offsets.
std::vector<std::pair<char32_t, size_t>> code_points(std::string_view s);
std::string encode(char32_t cp);

// s with every invalid UTF-8 sequence replaced by U+FFFD (as Rust's
// from_utf8_lossy and Python's errors="replace" do).
std::string valid_utf8(std::string_view s);
bool is_valid_utf8(std::string_view s);

enum class Form { NFC, NFD, NFKC, NFKD };
std::string normalize(std::string_view s, Form form);
std::string lowercase(std::string_view s);
std::string uppercase(std::string_view s);
char32_t to_lower(char32_t cp);
char32_t to_upper(char32_t cp);
char32_t to_title(char32_t cp);
bool is_cased(char32_t cp);   // categories Lu, Ll, Lt (Python's notion of cased)
bool is_letter(char32_t cp);  // L*
bool is_number(char32_t cp);  // N*

bool is_whitespace(char32_t cp);   // Unicode White_Space
bool is_punctuation(char32_t cp);  // ASCII punctuation or Unicode category P*
bool is_alphanumeric(char32_t cp);  // letters, marks and numbers (regex \w without '_')
bool is_digit(char32_t cp);        // Unicode Nd

// A compiled regular expression (PCRE2, UTF and Unicode properties: \p{L},
// \p{N}, lookahead). Matches are byte ranges; empty matches are skipped.
class Regex {
 public:
  explicit Regex(const std::string& pattern);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view s) const;
  const std::string& pattern() const { return pattern_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string pattern_;
};

// PCRE2 quoting of a literal string.
std::string escape(std::string_view literal);

}  // namespace sy::unicode
