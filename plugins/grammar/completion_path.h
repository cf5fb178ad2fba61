// Structured output that finishes within max_tokens. A request may emit at
// most `budget` tokens; near that limit the mask keeps only tokens on a
// short completing path, so the text ends on a whole match (valid JSON, a
// full regex match) even when it is cut by its limit.
//
// xgrammar exposes no identity for a parser state, so the shortest
// completion is not searched for; a short one is built byte by byte: from
// the current state, accept the first byte that the grammar allows in an
// order that closes structures first (quotes and closing brackets, then
// separators, digits, letters, whitespace, the rest), never repeating a byte
// while another is allowed, until the root rule is complete. Its length in
// tokens, written with the longest token that fits at each point, bounds
// the tokens still needed. Once the tokens left come within a small headroom
// of that count, only tokens whose bytes begin the completion and leave a
// rest that still fits stay allowed (the stop tokens once it is complete).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <xgrammar/xgrammar.h>

namespace sy::grammar {

class CompletionPath {
 public:
  // tokens[i]: token i's bytes ("" for special tokens).
  CompletionPath(const std::vector<std::string>& tokens, std::vector<int32_t> stop_tokens);

  // A completion of m's text of at most cap bytes ("" when it is complete
  // already); nullopt when none is found. m is left as it was.
  std::optional<std::string> complete(xgrammar::GrammarMatcher& m, size_t cap) const;
  // How many tokens `completion` takes written with the longest token that
  // fits at each point (-1 when some byte has no token).
  int32_t tokens_for(const std::string& completion, size_t from = 0) const;
  // Clears every bit of `row` but the tokens that begin `completion` and
  // leave a rest of at most left - 1 tokens (the longest one alone when
  // none does; the stop tokens when it is empty), among those the row
  // allows. Leaves the row alone, returning false, when that would leave
  // nothing.
  bool restrict_to(const std::string& completion, int32_t left, uint32_t* row, int32_t words) const;

 private:
  std::vector<std::string> tokens_;
  std::vector<std::vector<int32_t>> by_first_byte_;  // non-empty tokens by their first byte, longest first
  std::vector<int32_t> stop_tokens_;
  std::vector<uint8_t> order_;  // bytes in the order a completion tries them
};

}  // namespace sy::grammar
