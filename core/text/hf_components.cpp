// Normalizers, pre-tokenizers, post-processors and decoders of tokenizer.json.
#include "text/hf_components.h"

#include <algorithm>
#include <array>

#include "base/error.h"
#include "text/unicode.h"

namespace sy::hf {

namespace u = sy::unicode;

int json_int(const Json& v, const std::string& where) {
  SY_CHECK(v.is_number_integer(), where << ": expected an integer");
  SY_CHECK(!(v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT32_MAX)), where << ": integer out of range");
  const int64_t x = v.get<int64_t>();
  SY_CHECK(x >= INT32_MIN && x <= INT32_MAX, where << ": integer out of range");
  return static_cast<int>(x);
}

namespace {

const Json& field(const Json& j, const char* key, const std::string& where) {
  SY_CHECK(j.is_object() && j.contains(key), where << ": missing '" << key << "'");
  return j.at(key);
}
std::string str(const Json& j, const char* key, const std::string& where, const std::string& fallback = "\x01") {
  if (!j.contains(key) || j.at(key).is_null()) {
    SY_CHECK(fallback != "\x01", where << ": missing '" << key << "'");
    return fallback;
  }
  SY_CHECK(j.at(key).is_string(), where << "." << key << ": expected a string");
  return j.at(key).get<std::string>();
}
bool flag(const Json& j, const char* key, bool fallback) {
  if (!j.contains(key) || j.at(key).is_null()) return fallback;
  return j.at(key).is_boolean() ? j.at(key).get<bool>() : fallback;
}
std::string type_of(const Json& j, const std::string& where) {
  SY_CHECK(j.is_object(), where << ": expected an object");
  return str(j, "type", where);
}

// {"String": "x"} or {"Regex": "..."}: a regex either way (literals quoted).
u::Regex pattern_of(const Json& j, const std::string& where) {
  SY_CHECK(j.is_object(), where << ": expected {\"String\": ...} or {\"Regex\": ...}");
  if (j.contains("String")) return u::Regex(u::escape(j.at("String").get<std::string>()));
  if (j.contains("Regex")) return u::Regex(j.at("Regex").get<std::string>());
  SY_THROW(where << ": expected {\"String\": ...} or {\"Regex\": ...}");
}

std::string replace_all(const std::string& s, const u::Regex& re, const std::string& with) {
  std::string out;
  size_t at = 0;
  for (const auto& [b, e] : re.find_all(s)) {
    out.append(s, at, b - at);
    out += with;
    at = e;
  }
  out.append(s, at, std::string::npos);
  return out;
}

// ------------------------------------------------------------------ normalizers

struct Sequence : Normalizer {
  std::vector<std::unique_ptr<Normalizer>> parts;
  std::string normalize(const std::string& s) const override {
    std::string out = s;
    for (const auto& p : parts) out = p->normalize(out);
    return out;
  }
};
struct UnicodeForm : Normalizer {
  u::Form form;
  explicit UnicodeForm(u::Form f) : form(f) {}
  std::string normalize(const std::string& s) const override { return u::normalize(s, form); }
};
struct Lowercase : Normalizer {
  std::string normalize(const std::string& s) const override { return u::lowercase(s); }
};
struct Strip : Normalizer {
  bool left, right;
  Strip(bool l, bool r) : left(l), right(r) {}
  std::string normalize(const std::string& s) const override {
    auto cps = u::code_points(s);
    size_t b = 0, e = cps.size();
    if (left)
      while (b < e && u::is_whitespace(cps[b].first)) ++b;
    if (right)
      while (e > b && u::is_whitespace(cps[e - 1].first)) --e;
    const size_t from = b < cps.size() ? cps[b].second : s.size();
    const size_t to = e < cps.size() ? cps[e].second : s.size();
    return s.substr(from, to - from);
  }
};
struct Replace : Normalizer {
  u::Regex pattern;
  std::string content;
  Replace(u::Regex p, std::string c) : pattern(std::move(p)), content(std::move(c)) {}
  std::string normalize(const std::string& s) const override { return replace_all(s, pattern, content); }
};
struct Prepend : Normalizer {
  std::string prepend;
  explicit Prepend(std::string p) : prepend(std::move(p)) {}
  std::string normalize(const std::string& s) const override { return s.empty() ? s : prepend + s; }
};
// BERT's: control characters removed, whitespace as spaces, CJK ideographs
// spaced, accents stripped (NFD, marks dropped) and lowercase as configured.
struct Bert : Normalizer {
  bool clean, chinese, strip_accents, lower;
  std::string normalize(const std::string& s) const override {
    std::string out;
    for (const auto& [cp, at] : u::code_points(s)) {
      if (clean && (cp == 0 || cp == 0xFFFD || ((cp < 0x20 || cp == 0x7F) && cp != '\t' && cp != '\n' && cp != '\r'))) continue;
      const bool cjk = (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
                       (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
                       (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
      if (chinese && cjk) {
        out += ' ' + u::encode(cp) + ' ';
      } else if (clean && u::is_whitespace(cp)) {
        out += ' ';
      } else {
        out += u::encode(cp);
      }
    }
    if (strip_accents) {
      std::string nfd = u::normalize(out, u::Form::NFD), kept;
      for (const auto& [cp, at] : u::code_points(nfd))
        if (!(cp >= 0x300 && cp <= 0x36F) && !(cp >= 0x1AB0 && cp <= 0x1AFF) && !(cp >= 0x1DC0 && cp <= 0x1DFF) &&
            !(cp >= 0x20D0 && cp <= 0x20FF) && !(cp >= 0xFE20 && cp <= 0xFE2F))
          kept += u::encode(cp);
      out = kept;
    }
    return lower ? u::lowercase(out) : out;
  }
};

// ------------------------------------------------------------------ pre-tokenizers

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

Behavior behavior_of(const Json& j, const std::string& where, Behavior fallback) {
  if (!j.contains("behavior")) return fallback;
  const std::string b = j.at("behavior").get<std::string>();
  if (b == "Removed") return Behavior::Removed;
  if (b == "Isolated") return Behavior::Isolated;
  if (b == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::MergedWithNext;
  if (b == "Contiguous") return Behavior::Contiguous;
  SY_THROW(where << ".behavior: unknown split behavior '" << b << "'");
}

// Splits one piece at matches [b, e) with the library's delimiter behaviors.
std::vector<Piece> split_piece(const Piece& p, const std::vector<std::pair<size_t, size_t>>& matches, Behavior behavior, bool invert) {
  // The piece as alternating (text, is_delimiter) runs.
  std::vector<std::pair<std::string, bool>> runs;
  size_t at = 0;
  for (const auto& [b, e] : matches) {
    if (b > at) runs.emplace_back(p.text.substr(at, b - at), invert);
    runs.emplace_back(p.text.substr(b, e - b), !invert);
    at = e;
  }
  if (at < p.text.size()) runs.emplace_back(p.text.substr(at), invert);
  std::vector<std::string> out;
  bool pending_next = false;  // MergedWithNext: the last output waits for the next run
  bool last_delim = false;
  for (const auto& [text, delim] : runs) {
    switch (behavior) {
      case Behavior::Removed:
        if (!delim) out.push_back(text);
        break;
      case Behavior::Isolated:
        out.push_back(text);
        break;
      case Behavior::MergedWithPrevious:
        if (delim && !out.empty() && !last_delim) out.back() += text;
        else out.push_back(text);
        break;
      case Behavior::MergedWithNext:
        if (pending_next) out.back() += text;
        else out.push_back(text);
        pending_next = delim;
        break;
      case Behavior::Contiguous:
        if (delim && last_delim && !out.empty()) out.back() += text;
        else out.push_back(text);
        break;
    }
    last_delim = delim;
  }
  std::vector<Piece> pieces;
  for (auto& t : out)
    if (!t.empty()) pieces.push_back({std::move(t), p.at_start && pieces.empty()});
  return pieces;
}

template <typename F>
std::vector<Piece> each(std::vector<Piece> in, F&& f) {
  std::vector<Piece> out;
  for (auto& p : in) {
    auto parts = f(p);
    for (auto& q : parts) out.push_back(std::move(q));
  }
  return out;
}

struct PreSequence : PreTokenizer {
  std::vector<std::unique_ptr<PreTokenizer>> parts;
  std::vector<Piece> split(std::vector<Piece> pieces) const override {
    for (const auto& p : parts) pieces = p->split(std::move(pieces));
    return pieces;
  }
};

struct Split : PreTokenizer {
  u::Regex pattern;
  Behavior behavior;
  bool invert;
  Split(u::Regex p, Behavior b, bool i) : pattern(std::move(p)), behavior(b), invert(i) {}
  std::vector<Piece> split(std::vector<Piece> pieces) const override {
    return each(std::move(pieces), [&](const Piece& p) { return split_piece(p, pattern.find_all(p.text), behavior, invert); });
  }
};

const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct ByteLevel : PreTokenizer {
  bool add_prefix_space, use_regex;
  u::Regex re{kGpt2Pattern};
  std::vector<Piece> split(std::vector<Piece> pieces) const override {
    return each(std::move(pieces), [&](const Piece& p) {
      Piece q = p;
      if (add_prefix_space && (q.text.empty() || q.text[0] != ' ')) q.text = " " + q.text;
      std::vector<Piece> parts = use_regex ? split_piece(q, re.find_all(q.text), Behavior::Isolated, false) : std::vector<Piece>{q};
      for (auto& part : parts) {
        std::string mapped;
        for (unsigned char c : part.text) mapped += byte_to_unicode(c);
        part.text = std::move(mapped);
      }
      return parts;
    });
  }
};

struct Metaspace : PreTokenizer {
  std::string replacement;
  std::string scheme;  // always | first | never
  bool split_pieces;
  std::vector<Piece> split(std::vector<Piece> pieces) const override {
    return each(std::move(pieces), [&](const Piece& p) {
      Piece q{std::string(), p.at_start};
      for (char c : p.text) q.text += c == ' ' ? replacement : std::string(1, c);
      const bool prepend = scheme == "always" || (scheme == "first" && p.at_start);
      if (prepend && q.text.rfind(replacement, 0) != 0) q.text = replacement + q.text;
      if (!split_pieces) return std::vector<Piece>{q};
      return split_piece(q, u::Regex(u::escape(replacement)).find_all(q.text), Behavior::MergedWithNext, false);
    });
  }
};

// Splits on characters of a class (whitespace, punctuation, digits).
template <typename Pred>
std::vector<std::pair<size_t, size_t>> char_matches(const std::string& s, Pred&& pred) {
  std::vector<std::pair<size_t, size_t>> out;
  auto cps = u::code_points(s);
  for (size_t i = 0; i < cps.size(); ++i)
    if (pred(cps[i].first)) out.emplace_back(cps[i].second, i + 1 < cps.size() ? cps[i + 1].second : s.size());
  return out;
}

struct CharSplit : PreTokenizer {
  enum Kind { Whitespace, Punctuation, Digits } kind;
  Behavior behavior;
  CharSplit(Kind k, Behavior b) : kind(k), behavior(b) {}
  std::vector<Piece> split(std::vector<Piece> pieces) const override {
    return each(std::move(pieces), [&](const Piece& p) {
      auto m = char_matches(p.text, [&](char32_t c) {
        return kind == Whitespace ? u::is_whitespace(c) : kind == Punctuation ? u::is_punctuation(c) : u::is_digit(c);
      });
      return split_piece(p, m, behavior, false);
    });
  }
};

// Whitespace: runs of \w or of other non-space characters, spaces dropped.
struct WhitespaceWords : PreTokenizer {
  u::Regex re{R"(\w+|[^\w\s]+)"};
  std::vector<Piece> split(std::vector<Piece> pieces) const override {
    return each(std::move(pieces), [&](const Piece& p) { return split_piece(p, re.find_all(p.text), Behavior::Removed, true); });
  }
};

// ------------------------------------------------------------------ post-processors

struct Template : PostProcessor {
  std::vector<std::vector<int>> items;  // special ids, or {} for the sequence
  void process(std::vector<int>& ids) const override {
    std::vector<int> out;
    for (const auto& it : items) {
      if (it.empty()) out.insert(out.end(), ids.begin(), ids.end());
      else out.insert(out.end(), it.begin(), it.end());
    }
    ids = std::move(out);
  }
};
struct PostSequence : PostProcessor {
  std::vector<std::unique_ptr<PostProcessor>> parts;
  void process(std::vector<int>& ids) const override {
    for (const auto& p : parts) p->process(ids);
  }
};
struct NoOpPost : PostProcessor {
  void process(std::vector<int>&) const override {}
};

// ------------------------------------------------------------------ decoders

struct DecSequence : Decoder {
  std::vector<std::unique_ptr<Decoder>> parts;
  void decode(std::vector<std::string>& t) const override {
    for (const auto& p : parts) p->decode(t);
  }
  std::string token_bytes(const std::string& token) const override {
    std::string t = token;
    for (const auto& p : parts) t = p->token_bytes(t);
    return t;
  }
};
struct ByteLevelDec : Decoder {
  void decode(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const auto& t : tokens) {
      std::string mine;
      bool all = true;
      for (const auto& [cp, at] : u::code_points(t)) {
        const int b = unicode_to_byte(cp);
        if (b < 0) {
          all = false;
          break;
        }
        mine += static_cast<char>(b);
      }
      bytes += all ? mine : t;  // a token outside the alphabet (an added token) as it is
    }
    tokens.assign(1, u::valid_utf8(bytes));
  }
  std::string token_bytes(const std::string& token) const override {
    std::string mine;
    for (const auto& [cp, at] : u::code_points(token)) {
      const int b = unicode_to_byte(cp);
      if (b < 0) return token;
      mine += static_cast<char>(b);
    }
    return mine;
  }
};
struct MetaspaceDec : Decoder {
  std::string replacement;
  bool prepend;
  void decode(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      for (size_t k = 0; k < t.size();) {
        if (t.compare(k, replacement.size(), replacement) == 0) {
          out += ' ';
          k += replacement.size();
        } else {
          out += t[k++];
        }
      }
      if (i == 0 && prepend && !out.empty() && out[0] == ' ') out.erase(0, 1);
      tokens[i] = std::move(out);
    }
  }
  std::string token_bytes(const std::string& token) const override {
    std::vector<std::string> t{"", token};  // not the first token: no prepend rule
    decode(t);
    return t[1];
  }
};
struct ReplaceDec : Decoder {
  u::Regex pattern;
  std::string content;
  ReplaceDec(u::Regex p, std::string c) : pattern(std::move(p)), content(std::move(c)) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) t = replace_all(t, pattern, content);
  }
};
struct ByteFallbackDec : Decoder {
  void decode(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    size_t pending = 0;
    auto flush = [&] {
      if (!pending) return;
      if (u::is_valid_utf8(bytes)) {
        out.push_back(bytes);
      } else {
        for (size_t i = 0; i < pending; ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      bytes.clear();
      pending = 0;
    };
    for (const auto& t : tokens) {
      unsigned v = 0;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && std::sscanf(t.c_str() + 3, "%2x", &v) == 1 &&
          std::isxdigit(static_cast<unsigned char>(t[3])) && std::isxdigit(static_cast<unsigned char>(t[4]))) {
        bytes += static_cast<char>(v);
        ++pending;
        continue;
      }
      flush();
      out.push_back(t);
    }
    flush();
    tokens = std::move(out);
  }
  std::string token_bytes(const std::string& t) const override {
    unsigned v = 0;
    if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && std::isxdigit(static_cast<unsigned char>(t[3])) &&
        std::isxdigit(static_cast<unsigned char>(t[4])) && std::sscanf(t.c_str() + 3, "%2x", &v) == 1)
      return std::string(1, static_cast<char>(v));
    return t;
  }
};
struct FuseDec : Decoder {
  void decode(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, all);
  }
};
struct StripDec : Decoder {
  std::string content;
  size_t start, stop;
  void decode(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      auto cps = u::code_points(t);
      size_t b = 0, e = cps.size();
      while (b < start && b < e && u::encode(cps[b].first) == content) ++b;
      for (size_t k = 0; k < stop && e > b && u::encode(cps[e - 1].first) == content; ++k) --e;
      const size_t from = b < cps.size() ? cps[b].second : t.size();
      const size_t to = e < cps.size() ? cps[e].second : t.size();
      t = t.substr(from, to - from);
    }
  }
  // Strips the text's edges (after Fuse: the first token's space), not a token's.
  std::string token_bytes(const std::string& token) const override { return token; }
};
struct WordPieceDec : Decoder {
  std::string prefix;
  bool cleanup;
  std::string token_bytes(const std::string& token) const override {
    return token.rfind(prefix, 0) == 0 ? token.substr(prefix.size()) : " " + token;
  }
  void decode(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      if (i > 0) {
        if (t.rfind(prefix, 0) == 0) t.erase(0, prefix.size());
        else t.insert(t.begin(), ' ');
      }
      if (cleanup) {
        static const std::pair<std::string_view, std::string_view> kCleanup[] = {
            {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
        for (const auto& [from, to] : kCleanup)
          for (size_t at; (at = t.find(from)) != std::string::npos;) t.replace(at, from.size(), to.data(), to.size());
      }
    }
  }
};

}  // namespace

std::string Decoder::token_bytes(const std::string& token) const {
  std::vector<std::string> t{token};
  decode(t);
  std::string out;
  for (const auto& part : t) out += part;
  return out;
}

// ------------------------------------------------------------------ factories

std::unique_ptr<Normalizer> make_normalizer(const Json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string t = type_of(j, where);
  if (t == "Sequence") {
    auto s = std::make_unique<Sequence>();
    const Json& list = field(j, "normalizers", where);
    for (size_t i = 0; i < list.size(); ++i)
      if (auto n = make_normalizer(list[i], where + ".normalizers[" + std::to_string(i) + "]")) s->parts.push_back(std::move(n));
    return s;
  }
  if (t == "NFC") return std::make_unique<UnicodeForm>(u::Form::NFC);
  if (t == "NFD") return std::make_unique<UnicodeForm>(u::Form::NFD);
  if (t == "NFKC") return std::make_unique<UnicodeForm>(u::Form::NFKC);
  if (t == "NFKD") return std::make_unique<UnicodeForm>(u::Form::NFKD);
  if (t == "Lowercase") return std::make_unique<Lowercase>();
  if (t == "Strip") return std::make_unique<Strip>(flag(j, "strip_left", true), flag(j, "strip_right", true));
  if (t == "Replace") return std::make_unique<Replace>(pattern_of(field(j, "pattern", where), where + ".pattern"), str(j, "content", where));
  if (t == "Prepend") return std::make_unique<Prepend>(str(j, "prepend", where));
  if (t == "BertNormalizer") {
    auto b = std::make_unique<Bert>();
    b->clean = flag(j, "clean_text", true);
    b->chinese = flag(j, "handle_chinese_chars", true);
    b->lower = flag(j, "lowercase", true);
    b->strip_accents = j.contains("strip_accents") && !j.at("strip_accents").is_null() ? j.at("strip_accents").get<bool>() : b->lower;
    return b;
  }
  SY_THROW(where << ": normalizer type '" << t << "' is not supported (supported: Sequence, NFC, NFD, NFKC, NFKD, Lowercase, "
                 << "Strip, Replace, Prepend, BertNormalizer)");
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string t = type_of(j, where);
  if (t == "Sequence") {
    auto s = std::make_unique<PreSequence>();
    const Json& list = field(j, "pretokenizers", where);
    for (size_t i = 0; i < list.size(); ++i)
      if (auto p = make_pre_tokenizer(list[i], where + ".pretokenizers[" + std::to_string(i) + "]")) s->parts.push_back(std::move(p));
    return s;
  }
  if (t == "ByteLevel") {
    auto b = std::make_unique<ByteLevel>();
    b->add_prefix_space = flag(j, "add_prefix_space", true);
    b->use_regex = flag(j, "use_regex", true);
    return b;
  }
  if (t == "Split")
    return std::make_unique<Split>(pattern_of(field(j, "pattern", where), where + ".pattern"), behavior_of(j, where, Behavior::Isolated),
                                   flag(j, "invert", false));
  if (t == "Metaspace") {
    auto m = std::make_unique<Metaspace>();
    m->replacement = str(j, "replacement", where, "\xE2\x96\x81");
    m->scheme = str(j, "prepend_scheme", where, flag(j, "add_prefix_space", true) ? "always" : "never");
    m->split_pieces = flag(j, "split", true);
    SY_CHECK(m->scheme == "always" || m->scheme == "first" || m->scheme == "never", where << ": unknown prepend_scheme '" << m->scheme << "'");
    return m;
  }
  if (t == "Whitespace") return std::make_unique<WhitespaceWords>();
  if (t == "WhitespaceSplit") return std::make_unique<CharSplit>(CharSplit::Whitespace, Behavior::Removed);
  if (t == "Punctuation") return std::make_unique<CharSplit>(CharSplit::Punctuation, behavior_of(j, where, Behavior::Isolated));
  if (t == "Digits")
    return std::make_unique<CharSplit>(CharSplit::Digits, flag(j, "individual_digits", false) ? Behavior::Isolated : Behavior::Contiguous);
  if (t == "BertPreTokenizer") {
    auto s = std::make_unique<PreSequence>();
    s->parts.push_back(std::make_unique<CharSplit>(CharSplit::Whitespace, Behavior::Removed));
    s->parts.push_back(std::make_unique<CharSplit>(CharSplit::Punctuation, Behavior::Isolated));
    return s;
  }
  SY_THROW(where << ": pre-tokenizer type '" << t << "' is not supported (supported: Sequence, ByteLevel, Split, Metaspace, "
                 << "Whitespace, WhitespaceSplit, Punctuation, Digits, BertPreTokenizer)");
}

std::unique_ptr<PostProcessor> make_post_processor(const Json& j, const std::string& where,
                                                   const std::unordered_map<std::string, int>& token_ids) {
  if (j.is_null()) return nullptr;
  const std::string t = type_of(j, where);
  auto id_of = [&](const std::string& tok) {
    auto it = token_ids.find(tok);
    SY_CHECK(it != token_ids.end(), where << ": special token '" << tok << "' is not in the vocabulary");
    return it->second;
  };
  if (t == "Sequence") {
    auto s = std::make_unique<PostSequence>();
    const Json& list = field(j, "processors", where);
    for (size_t i = 0; i < list.size(); ++i)
      if (auto p = make_post_processor(list[i], where + ".processors[" + std::to_string(i) + "]", token_ids)) s->parts.push_back(std::move(p));
    return s;
  }
  if (t == "ByteLevel") return std::make_unique<NoOpPost>();  // offsets only
  if (t == "TemplateProcessing") {
    auto tp = std::make_unique<Template>();
    std::unordered_map<std::string, std::vector<int>> specials;
    if (j.contains("special_tokens"))
      for (const auto& [name, s] : j.at("special_tokens").items()) {
        SY_CHECK(s.is_object() && s.contains("ids") && s.at("ids").is_array(), where << ".special_tokens." << name << ": needs an 'ids' list");
        std::vector<int> ids;
        for (const auto& id : s.at("ids")) ids.push_back(json_int(id, where + ".special_tokens." + name + ".ids"));
        specials[name] = ids;
      }
    const Json& single = field(j, "single", where);
    for (size_t i = 0; i < single.size(); ++i) {
      const Json& item = single[i];
      if (item.contains("Sequence")) {
        tp->items.emplace_back();
      } else if (item.contains("SpecialToken")) {
        const std::string name = item.at("SpecialToken").at("id").get<std::string>();
        auto it = specials.find(name);
        tp->items.push_back(it != specials.end() ? it->second : std::vector<int>{id_of(name)});
      } else {
        SY_THROW(where << ".single[" << i << "]: expected Sequence or SpecialToken");
      }
    }
    return tp;
  }
  if (t == "RobertaProcessing" || t == "BertProcessing") {
    auto tp = std::make_unique<Template>();
    const Json& cls = field(j, "cls", where);
    const Json& sep = field(j, "sep", where);
    SY_CHECK(cls.is_array() && cls.size() == 2 && sep.is_array() && sep.size() == 2, where << ": cls and sep must be [token, id]");
    tp->items = {{json_int(cls.at(1), where + ".cls")}, {}, {json_int(sep.at(1), where + ".sep")}};
    return tp;
  }
  SY_THROW(where << ": post-processor type '" << t << "' is not supported (supported: TemplateProcessing, ByteLevel, "
                 << "RobertaProcessing, BertProcessing, Sequence)");
}

std::unique_ptr<Decoder> make_decoder(const Json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string t = type_of(j, where);
  if (t == "Sequence") {
    auto s = std::make_unique<DecSequence>();
    const Json& list = field(j, "decoders", where);
    for (size_t i = 0; i < list.size(); ++i)
      if (auto d = make_decoder(list[i], where + ".decoders[" + std::to_string(i) + "]")) s->parts.push_back(std::move(d));
    return s;
  }
  if (t == "ByteLevel") return std::make_unique<ByteLevelDec>();
  if (t == "Metaspace") {
    auto m = std::make_unique<MetaspaceDec>();
    m->replacement = str(j, "replacement", where, "\xE2\x96\x81");
    const std::string scheme = str(j, "prepend_scheme", where, flag(j, "add_prefix_space", true) ? "always" : "never");
    m->prepend = scheme != "never";
    return m;
  }
  if (t == "Replace") return std::make_unique<ReplaceDec>(pattern_of(field(j, "pattern", where), where + ".pattern"), str(j, "content", where));
  if (t == "ByteFallback") return std::make_unique<ByteFallbackDec>();
  if (t == "Fuse") return std::make_unique<FuseDec>();
  if (t == "Strip") {
    auto s = std::make_unique<StripDec>();
    s->content = str(j, "content", where);
    s->start = static_cast<size_t>(std::max(0, j.contains("start") ? json_int(j.at("start"), where + ".start") : 0));
    s->stop = static_cast<size_t>(std::max(0, j.contains("stop") ? json_int(j.at("stop"), where + ".stop") : 0));
    return s;
  }
  if (t == "WordPiece") {
    auto w = std::make_unique<WordPieceDec>();
    w->prefix = str(j, "prefix", where, "##");
    w->cleanup = flag(j, "cleanup", true);
    return w;
  }
  SY_THROW(where << ": decoder type '" << t << "' is not supported (supported: Sequence, ByteLevel, Metaspace, Replace, "
                 << "ByteFallback, Fuse, Strip, WordPiece)");
}

const std::string& byte_to_unicode(unsigned char b) {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    int n = 0;
    for (int c = 0; c < 256; ++c) {
      const bool printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
      t[static_cast<size_t>(c)] = u::encode(printable ? static_cast<char32_t>(c) : static_cast<char32_t>(256 + n++));
    }
    return t;
  }();
  return table[b];
}

int unicode_to_byte(char32_t cp) {
  static const std::unordered_map<char32_t, int> table = [] {
    std::unordered_map<char32_t, int> t;
    for (int b = 0; b < 256; ++b) t[u::code_points(byte_to_unicode(static_cast<unsigned char>(b)))[0].first] = b;
    return t;
  }();
  auto it = table.find(cp);
  return it == table.end() ? -1 : it->second;
}

}  // namespace sy::hf
