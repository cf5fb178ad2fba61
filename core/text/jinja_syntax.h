// The template's source as the parser reads it (jinja_lexer.cpp): text,
// {{ }} and {% %} segments with the whitespace control applied, and the
// tokens of the code inside one. Not part of the public API.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace sy::jinja::detail {

struct Segment {
  enum Kind { Text, Expr, Stmt } kind;
  std::string text;
  int line;
};

// Splits the source into text, {{ }} and {% %} segments (comments dropped),
// applying -/+ whitespace control, trim_blocks and lstrip_blocks. Throws
// "<name>:<line>: ..." for an unclosed tag.
std::vector<Segment> scan(const std::string& src, const std::string& name);

struct Tok {
  enum Kind { Name, Int, Float, Str, Op, End } kind;
  std::string text;
  int64_t i = 0;
  double f = 0;
};

// The tokens of one tag's code; the last is End.
std::vector<Tok> lex(const std::string& code, const std::string& name, int line);

}  // namespace sy::jinja::detail
