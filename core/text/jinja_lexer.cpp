// Source to segments (text, {{ }}, {% %}) and a tag's code to tokens.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>

#include "text/jinja_internal.h"
#include "text/jinja_syntax.h"

namespace sy::jinja::detail {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// True when only spaces and tabs lie between the previous newline (or the
// start) and `pos`.
bool only_spaces_since_newline(const std::string& src, size_t pos) {
  while (pos > 0) {
    const char c = src[pos - 1];
    if (c == '\n') return true;
    if (c != ' ' && c != '\t') return false;
    --pos;
  }
  return true;
}

// The closing delimiter of a tag, skipping string literals ('}}' may be
// inside one, as in {{ "}}" }}). Comments have no strings.
size_t find_tag_end(const std::string& src, size_t from, const std::string& close) {
  if (close == "#}") return src.find(close, from);
  char quote = 0;
  for (size_t k = from; k + 1 < src.size(); ++k) {
    const char ch = src[k];
    if (quote) {
      if (ch == '\\') ++k;
      else if (ch == quote) quote = 0;
    } else if (ch == '\'' || ch == '"') {
      quote = ch;
    } else if (ch == close[0] && src[k + 1] == close[1]) {
      return k;
    }
  }
  return std::string::npos;
}

}  // namespace

// Splits the source into text, {{ }} and {% %} segments (comments dropped),
// applying -/+ whitespace control, trim_blocks and lstrip_blocks.
std::vector<Segment> scan(const std::string& src, const std::string& name) {
  std::vector<Segment> out;
  size_t i = 0;
  int line = 1;
  bool trim_next_newline = false, strip_next = false;
  auto count_lines = [&](size_t from, size_t to) {
    for (size_t k = from; k < to; ++k) line += src[k] == '\n';
  };
  while (i < src.size()) {
    size_t open = std::string::npos;
    for (size_t k = i; k + 1 < src.size(); ++k)
      if (src[k] == '{' && (src[k + 1] == '{' || src[k + 1] == '%' || src[k + 1] == '#')) {
        open = k;
        break;
      }
    std::string text = src.substr(i, (open == std::string::npos ? src.size() : open) - i);
    const int text_line = line;
    count_lines(i, open == std::string::npos ? src.size() : open);
    if (strip_next) {
      size_t b = 0;
      while (b < text.size() && is_space(text[b])) ++b;
      text.erase(0, b);
    } else if (trim_next_newline && !text.empty() && text[0] == '\n') {
      text.erase(0, 1);
    } else if (trim_next_newline && text.size() >= 2 && text[0] == '\r' && text[1] == '\n') {
      text.erase(0, 2);
    }
    strip_next = trim_next_newline = false;
    if (open == std::string::npos) {
      if (!text.empty()) out.push_back({Segment::Text, text, text_line});
      break;
    }
    const char kind = src[open + 1];
    size_t body = open + 2;
    const bool minus_left = body < src.size() && src[body] == '-';
    const bool plus_left = body < src.size() && src[body] == '+';
    if (minus_left || plus_left) ++body;
    if (minus_left) {
      while (!text.empty() && is_space(text.back())) text.pop_back();
    } else if (kind != '{' && !plus_left) {
      // lstrip_blocks: spaces and tabs before a block or comment tag go when
      // nothing else precedes the tag on its line.
      size_t k = text.size();
      while (k > 0 && (text[k - 1] == ' ' || text[k - 1] == '\t')) --k;
      const bool at_line_start = k > 0 ? text[k - 1] == '\n' : (i == 0 || src[i - 1] == '\n' || only_spaces_since_newline(src, open));
      if (at_line_start) text.erase(k);
    }
    if (!text.empty()) out.push_back({Segment::Text, text, text_line});
    const std::string close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    const size_t end = find_tag_end(src, body, close);
    if (end == std::string::npos) fail(name, line, std::string("unterminated '") + src.substr(open, 2) + "'");
    size_t body_end = end;
    bool minus_right = false, plus_right = false;
    if (body_end > body && src[body_end - 1] == '-') {
      minus_right = true;
      --body_end;
    } else if (body_end > body && src[body_end - 1] == '+') {
      plus_right = true;
      --body_end;
    }
    const std::string code = src.substr(body, body_end - body);
    const int tag_line = line;
    count_lines(open, end + 2);
    i = end + 2;
    if (kind == '#') {
      if (minus_right) strip_next = true;
      else if (!plus_right) trim_next_newline = true;
      continue;
    }
    if (kind == '%') {
      // {% raw %} ... {% endraw %}: the content as it is.
      std::string word = code;
      word.erase(0, word.find_first_not_of(" \t\r\n"));
      word.erase(word.find_last_not_of(" \t\r\n") + 1);
      if (word == "raw") {
        const size_t close_raw = src.find("endraw", i);
        if (close_raw == std::string::npos) fail(name, tag_line, "{% raw %} without {% endraw %}");
        const size_t tag_open = src.rfind("{%", close_raw);
        std::string raw = src.substr(i, tag_open - i);
        if (tag_open + 2 < src.size() && src[tag_open + 2] == '-')
          while (!raw.empty() && is_space(raw.back())) raw.pop_back();
        out.push_back({Segment::Text, raw, tag_line});
        count_lines(i, tag_open);
        const size_t raw_end = src.find("%}", close_raw);
        if (raw_end == std::string::npos) fail(name, line, "unterminated {% endraw %}");
        const bool m = src[raw_end - 1] == '-';
        count_lines(tag_open, raw_end + 2);
        i = raw_end + 2;
        if (m) strip_next = true;
        else trim_next_newline = true;
        continue;
      }
    }
    out.push_back({kind == '{' ? Segment::Expr : Segment::Stmt, code, tag_line});
    if (minus_right) strip_next = true;
    else if (kind == '%' && !plus_right) trim_next_newline = true;
  }
  return out;
}


std::vector<Tok> lex(const std::string& code, const std::string& name, int line) {
  std::vector<Tok> out;
  size_t i = 0;
  while (i < code.size()) {
    const char c = code[i];
    if (is_space(c)) {
      ++i;
      continue;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t b = i;
      while (i < code.size() && (std::isalnum(static_cast<unsigned char>(code[i])) || code[i] == '_')) ++i;
      out.push_back({Tok::Name, code.substr(b, i - b)});
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t b = i;
      bool is_float = false;
      while (i < code.size() && (std::isdigit(static_cast<unsigned char>(code[i])) || code[i] == '_')) ++i;
      if (i + 1 < code.size() && code[i] == '.' && std::isdigit(static_cast<unsigned char>(code[i + 1]))) {
        is_float = true;
        ++i;
        while (i < code.size() && std::isdigit(static_cast<unsigned char>(code[i]))) ++i;
      }
      if (i < code.size() && (code[i] == 'e' || code[i] == 'E')) {
        is_float = true;
        ++i;
        if (i < code.size() && (code[i] == '+' || code[i] == '-')) ++i;
        while (i < code.size() && std::isdigit(static_cast<unsigned char>(code[i]))) ++i;
      }
      std::string text = code.substr(b, i - b);
      text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
      Tok t{is_float ? Tok::Float : Tok::Int, text};
      if (is_float) {
        t.f = std::strtod(text.c_str(), nullptr);  // out of range: inf, as Python's float()
      } else {
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), t.i);
        if (ec != std::errc() || end != text.data() + text.size()) fail(name, line, "integer literal " + text.substr(0, 30) + " is out of range");
      }
      out.push_back(t);
      continue;
    }
    if (c == '\'' || c == '"') {
      std::string s;
      ++i;
      while (i < code.size() && code[i] != c) {
        if (code[i] == '\\' && i + 1 < code.size()) {
          const char e = code[++i];
          switch (e) {
            case 'n': s += '\n'; break;
            case 't': s += '\t'; break;
            case 'r': s += '\r'; break;
            case '\\': s += '\\'; break;
            case '\'': s += '\''; break;
            case '"': s += '"'; break;
            case '0': s += '\0'; break;
            default:
              s += '\\';
              s += e;
          }
          ++i;
          continue;
        }
        s += code[i++];
      }
      if (i >= code.size()) fail(name, line, "unterminated string literal");
      ++i;
      out.push_back({Tok::Str, s});
      continue;
    }
    static const char* ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">", "=",
                                "(",  ")",  "[",  "]",  "{",  "}",  ",", ".", ":", "|", "?"};
    bool matched = false;
    for (const char* op : ops) {
      const size_t n = std::char_traits<char>::length(op);
      if (code.compare(i, n, op) == 0) {
        out.push_back({Tok::Op, op});
        i += n;
        matched = true;
        break;
      }
    }
    if (!matched) fail(name, line, std::string("unexpected character '") + c + "'");
  }
  out.push_back({Tok::End, ""});
  return out;
}

}  // namespace sy::jinja::detail
