#include "text/jinja.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cmath>
#include <ctime>
#include <map>
#include <sstream>

#include "base/error.h"
#include "text/jinja_internal.h"

namespace sy::jinja {

namespace detail {
void fail(const std::string& name, int line, const std::string& what) { SY_THROW(name << ":" << line << ": " << what); }
}  // namespace detail

namespace {

using detail::Ctx;
using detail::fail;
using detail::Flow;

// ============================================================ source -> segments

struct Segment {
  enum Kind { Text, Expr, Stmt } kind;
  std::string text;
  int line;
};

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

// ============================================================ expression lexer

struct Tok {
  enum Kind { Name, Int, Float, Str, Op, End } kind;
  std::string text;
  int64_t i = 0;
  double f = 0;
};

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

// ============================================================ AST

struct Expr {
  int line = 0;
  virtual ~Expr() = default;
  virtual Value eval(Ctx& c) const = 0;
};
using ExprPtr = std::unique_ptr<Expr>;

}  // namespace

struct Template::Node {
  int line = 0;
  virtual ~Node() = default;
  virtual void render(Ctx& c, std::string& out) const = 0;
};

namespace {

using NodePtr = std::unique_ptr<Template::Node>;
using Body = std::vector<NodePtr>;


// A template is a program: bound what one render may do, so a hostile one
// cannot run forever or fill memory.
constexpr int64_t kMaxSteps = 20'000'000;
constexpr size_t kMaxOutput = 64u << 20;

void render_body(const Body& body, Ctx& c, std::string& out) {
  for (const auto& n : body) {
    c.line = n->line;
    if (++c.steps > kMaxSteps) c.error("the template ran more than 20M steps");
    if (out.size() > kMaxOutput) c.error("the template's output passed 64 MiB");
    n->render(c, out);
    if (c.flow != Flow::Normal) return;
  }
}

// ------------------------------------------------------------ value helpers

std::string as_str(const Value& v) { return v.str(); }

int64_t as_index(Ctx& c, const Value& v, const char* what) {
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return v.as_bool() ? 1 : 0;
  c.error(std::string(what) + " must be an integer, got " + v.type_name());
}

}  // namespace

namespace detail {

List iterate(Ctx& c, const Value& v) {
  if (v.is_list()) return v.list();
  if (v.is_dict()) {
    List keys;
    for (const auto& [k, x] : v.dict().items) keys.emplace_back(k);
    return keys;
  }
  if (v.is_string()) {
    List chars;
    const std::string& s = v.as_string();
    for (size_t i = 0; i < s.size();) {
      size_t n = 1;
      const auto b = static_cast<unsigned char>(s[i]);
      if (b >= 0xF0) n = 4;
      else if (b >= 0xE0) n = 3;
      else if (b >= 0xC0) n = 2;
      chars.emplace_back(s.substr(i, n));
      i += n;
    }
    return chars;
  }
  if (v.is_undefined()) return {};
  c.error("'" + v.type_name() + "' object is not iterable");
}

int compare(Ctx& c, const Value& a, const Value& b) {
  if ((a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool())) {
    const double x = a.as_number(), y = b.as_number();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) return a.as_string().compare(b.as_string()) < 0 ? -1 : a.as_string() == b.as_string() ? 0 : 1;
  if (a.is_list() && b.is_list()) {
    const auto &x = a.list(), &y = b.list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (int r = compare(c, x[i], y[i])) return r;
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  c.error("'<' not supported between " + a.type_name() + " and " + b.type_name());
}

bool contains(Ctx& c, const Value& hay, const Value& needle) {
  if (hay.is_string()) {
    if (!needle.is_string()) c.error("'in <string>' requires a string, got " + needle.type_name());
    return hay.as_string().find(needle.as_string()) != std::string::npos;
  }
  if (hay.is_list()) {
    for (const auto& e : hay.list())
      if (e == needle) return true;
    return false;
  }
  if (hay.is_dict()) return needle.is_string() && hay.dict().find(needle.as_string()) != nullptr;
  if (hay.is_undefined()) c.error("'" + hay.undefined_name() + "' is undefined");
  c.error("argument of type '" + hay.type_name() + "' is not iterable");
}

}  // namespace detail

namespace {

using detail::compare;
using detail::contains;
using detail::iterate;

Value arith(Ctx& c, const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value(as_str(a) + as_str(b));
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
    if (a.is_list() && b.is_list()) {
      List l = a.list();
      l.insert(l.end(), b.list().begin(), b.list().end());
      return Value(std::move(l));
    }
  }
  if (op == "*" && ((a.is_string() && b.is_int()) || (a.is_int() && b.is_string()))) {
    const std::string& s = a.is_string() ? a.as_string() : b.as_string();
    const int64_t n = a.is_int() ? a.as_int() : b.as_int();
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += s;
    return Value(out);
  }
  const bool nums = (a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool());
  if (!nums) {
    if (a.is_undefined() || b.is_undefined())
      c.error("'" + (a.is_undefined() ? a.undefined_name() : b.undefined_name()) + "' is undefined");
    c.error("unsupported operand types for " + op + ": " + a.type_name() + " and " + b.type_name());
  }
  const bool ints = (a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool());
  if (ints) {
    // Exact 64-bit integer arithmetic; Python's big integers beyond that are refused.
    const int64_t p = a.is_int() ? a.as_int() : a.as_bool(), q = b.is_int() ? b.as_int() : b.as_bool();
    int64_t r = 0;
    auto overflow = [&]() { c.error("integer overflow in " + std::to_string(p) + " " + op + " " + std::to_string(q)); };
    if (op == "+") return __builtin_add_overflow(p, q, &r) ? (overflow(), Value()) : Value(r);
    if (op == "-") return __builtin_sub_overflow(p, q, &r) ? (overflow(), Value()) : Value(r);
    if (op == "*") return __builtin_mul_overflow(p, q, &r) ? (overflow(), Value()) : Value(r);
    if (op == "//" || op == "%") {
      if (q == 0) c.error("integer division or modulo by zero");
      if (p == INT64_MIN && q == -1) overflow();
      int64_t d = p / q, m = p % q;
      if (m != 0 && ((m < 0) != (q < 0))) {
        --d;
        m += q;
      }
      return op == "//" ? Value(d) : Value(m);
    }
    if (op == "**" && q >= 0) {
      int64_t base = p, e = q;
      r = 1;
      while (e > 0) {
        if ((e & 1) && __builtin_mul_overflow(r, base, &r)) overflow();
        e >>= 1;
        if (e > 0 && __builtin_mul_overflow(base, base, &base)) overflow();
      }
      return Value(r);
    }
  }
  const double x = a.as_number(), y = b.as_number();
  if (op == "+") return Value(x + y);
  if (op == "-") return Value(x - y);
  if (op == "*") return Value(x * y);
  if (op == "/") {
    if (y == 0) c.error("division by zero");
    return Value(x / y);
  }
  if (op == "//" || op == "%") {
    if (y == 0) c.error("float division or modulo by zero");
    const double d = std::floor(x / y);
    return op == "//" ? Value(d) : Value(x - d * y);
  }
  if (op == "**") return Value(std::pow(x, y));
  c.error("unknown operator " + op);
}

// ------------------------------------------------------------ expressions

struct Literal : Expr {
  Value v;
  Value eval(Ctx&) const override { return v; }
};
struct Name : Expr {
  std::string n;
  Value eval(Ctx& c) const override { return c.lookup(n); }
};
struct ListExpr : Expr {
  std::vector<ExprPtr> items;
  bool tuple = false;  // (a, b)
  Value eval(Ctx& c) const override {
    List l;
    for (const auto& e : items) l.push_back(e->eval(c));
    return tuple ? Value::tuple(std::move(l)) : Value(std::move(l));
  }
};
struct DictExpr : Expr {
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
  Value eval(Ctx& c) const override {
    Dict d;
    for (const auto& [k, v] : items) {
      Value key = k->eval(c);
      if (!key.is_string()) c.error("dict keys must be strings here, got " + key.type_name());
      d.set(key.as_string(), v->eval(c));
    }
    return Value(std::move(d));
  }
};

Value get_member(Ctx& c, const Value& obj, const std::string& key, bool attribute_first);

struct Attr : Expr {
  ExprPtr obj;
  std::string key;
  Value eval(Ctx& c) const override {
    Value o = obj->eval(c);
    c.line = line;
    return get_member(c, o, key, true);
  }
};
struct Subscript : Expr {
  ExprPtr obj, index;
  Value eval(Ctx& c) const override {
    Value o = obj->eval(c), k = index->eval(c);
    c.line = line;
    if (o.is_undefined()) c.error("'" + o.undefined_name() + "' is undefined");
    if (k.is_string()) return get_member(c, o, k.as_string(), false);
    if (o.is_list() || o.is_string()) {
      const List chars = o.is_string() ? iterate(c, o) : List{};  // Python indexes code points
      const List& items = o.is_list() ? o.list() : chars;
      const auto n = static_cast<int64_t>(items.size());
      int64_t i = as_index(c, k, "index");
      if (i < 0) i += n;
      if (i < 0 || i >= n) c.error("index " + std::to_string(as_index(c, k, "index")) + " out of range");
      return items[static_cast<size_t>(i)];
    }
    if (o.is_dict()) return Value(Undefined{k.str()});
    c.error("'" + o.type_name() + "' object is not subscriptable");
  }
};
struct Slice : Expr {
  ExprPtr obj, start, stop, step;
  Value eval(Ctx& c) const override {
    Value o = obj->eval(c);
    c.line = line;
    if (!o.is_list() && !o.is_string()) c.error("cannot slice " + o.type_name());
    const List chars = o.is_string() ? iterate(c, o) : List{};  // Python slices code points
    const List& items = o.is_list() ? o.list() : chars;
    const auto n = static_cast<int64_t>(items.size());
    const int64_t st = step ? as_index(c, step->eval(c), "slice step") : 1;
    if (st == 0) c.error("slice step cannot be zero");
    auto bound = [&](const ExprPtr& e, int64_t fallback) {
      if (!e) return fallback;
      Value v = e->eval(c);
      if (v.is_none()) return fallback;
      int64_t i = as_index(c, v, "slice index");
      if (i < 0) i += n;
      return st > 0 ? std::clamp<int64_t>(i, 0, n) : std::clamp<int64_t>(i, -1, n - 1);
    };
    const int64_t b = bound(start, st > 0 ? 0 : n - 1), e = bound(stop, st > 0 ? n : -1);
    List l;
    std::string s;
    for (int64_t i = b; st > 0 ? i < e : i > e;) {
      if (o.is_list()) l.push_back(items[static_cast<size_t>(i)]);
      else s += items[static_cast<size_t>(i)].as_string();
      if (__builtin_add_overflow(i, st, &i)) break;
    }
    if (o.is_tuple()) return Value::tuple(std::move(l));
    return o.is_list() ? Value(std::move(l)) : Value(s);
  }
};

struct CallArgs {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
  Args eval(Ctx& c) const {
    Args a;
    for (const auto& e : positional) a.positional.push_back(e->eval(c));
    for (const auto& [k, e] : keyword) a.keyword.emplace_back(k, e->eval(c));
    return a;
  }
};

struct Call : Expr {
  ExprPtr fn;
  CallArgs args;
  Value eval(Ctx& c) const override {
    Value f = fn->eval(c);
    Args a = args.eval(c);
    c.line = line;
    if (f.is_undefined()) c.error("'" + f.undefined_name() + "' is undefined (called as a function)");
    if (!f.is_callable()) c.error("'" + f.type_name() + "' object is not callable");
    try {
      return f.callable()(a);
    } catch (const Error& e) {
      // Macros' errors already name their line; globals' do not.
      const std::string what = e.what();
      if (what.rfind(c.name + ":", 0) == 0) throw;
      c.error(what);
    }
  }
};

Value apply_filter(Ctx& c, const std::string& name, const Value& v, Args& a);
bool apply_test(Ctx& c, const std::string& name, const Value& v, Args& a);

struct Filter : Expr {
  ExprPtr obj;
  std::string name;
  CallArgs args;
  Value eval(Ctx& c) const override {
    Value v = obj->eval(c);
    Args a = args.eval(c);
    c.line = line;
    return apply_filter(c, name, v, a);
  }
};
struct Test : Expr {
  ExprPtr obj;
  std::string name;
  CallArgs args;
  bool negate = false;
  Value eval(Ctx& c) const override {
    Value v = obj->eval(c);
    Args a = args.eval(c);
    c.line = line;
    return Value(apply_test(c, name, v, a) != negate);
  }
};
struct Unary : Expr {
  std::string op;
  ExprPtr e;
  Value eval(Ctx& c) const override {
    Value v = e->eval(c);
    c.line = line;
    if (op == "not") return Value(!v.truthy());
    if (op == "-") {
      if (v.is_int()) {
        if (v.as_int() == INT64_MIN) c.error("integer overflow in unary -");
        return Value(-v.as_int());
      }
      if (v.is_number()) return Value(-v.as_number());
      c.error("bad operand type for unary -: " + v.type_name());
    }
    return v;
  }
};
struct Binary : Expr {
  std::string op;
  ExprPtr a, b;
  Value eval(Ctx& c) const override {
    if (op == "and") {
      Value x = a->eval(c);
      return x.truthy() ? b->eval(c) : x;
    }
    if (op == "or") {
      Value x = a->eval(c);
      return x.truthy() ? x : b->eval(c);
    }
    Value x = a->eval(c), y = b->eval(c);
    c.line = line;
    if (op == "==") return Value(x == y);
    if (op == "!=") return Value(!(x == y));
    if (op == "<") return Value(compare(c, x, y) < 0);
    if (op == ">") return Value(compare(c, x, y) > 0);
    if (op == "<=") return Value(compare(c, x, y) <= 0);
    if (op == ">=") return Value(compare(c, x, y) >= 0);
    if (op == "in") return Value(contains(c, y, x));
    if (op == "not in") return Value(!contains(c, y, x));
    return arith(c, op, x, y);
  }
};
struct Cond : Expr {
  ExprPtr then, cond, otherwise;
  Value eval(Ctx& c) const override {
    if (cond->eval(c).truthy()) return then->eval(c);
    return otherwise ? otherwise->eval(c) : Value(Undefined{"(conditional without else)"});
  }
};

// ------------------------------------------------------------ statements

struct TextNode : Template::Node {
  std::string text;
  void render(Ctx&, std::string& out) const override { out += text; }
};
struct Output : Template::Node {
  ExprPtr e;
  void render(Ctx& c, std::string& out) const override { out += e->eval(c).str(); }
};
struct If : Template::Node {
  std::vector<std::pair<ExprPtr, Body>> branches;  // null condition: else
  void render(Ctx& c, std::string& out) const override {
    for (const auto& [cond, body] : branches) {
      c.line = line;
      if (!cond || cond->eval(c).truthy()) {
        render_body(body, c, out);
        return;
      }
    }
  }
};

void assign_targets(Ctx& c, const std::vector<std::string>& targets, const Value& v) {
  if (targets.size() == 1) {
    c.set(targets[0], v);
    return;
  }
  List items = iterate(c, v);
  if (items.size() != targets.size())
    c.error("cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(targets.size()) + " names");
  for (size_t i = 0; i < targets.size(); ++i) c.set(targets[i], items[i]);
}

struct For : Template::Node {
  std::vector<std::string> targets;
  ExprPtr iter, filter;
  Body body, otherwise;
  void render(Ctx& c, std::string& out) const override {
    Value seq = iter->eval(c);
    c.line = line;
    List items;
    if (seq.is_dict()) {
      for (const auto& [k, v] : seq.dict().items) items.emplace_back(k);
    } else {
      items = iterate(c, seq);
    }
    if (filter) {
      List kept;
      for (const auto& it : items) {
        c.scopes.emplace_back();
        assign_targets(c, targets, it);
        if (filter->eval(c).truthy()) kept.push_back(it);
        c.scopes.pop_back();
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      render_body(otherwise, c, out);
      return;
    }
    const auto n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      c.scopes.emplace_back();
      Dict loop;
      loop.set("index", Value(i + 1));
      loop.set("index0", Value(i));
      loop.set("revindex", Value(n - i));
      loop.set("revindex0", Value(n - i - 1));
      loop.set("first", Value(i == 0));
      loop.set("last", Value(i == n - 1));
      loop.set("length", Value(n));
      loop.set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value(Undefined{"loop.previtem"}));
      loop.set("nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value(Undefined{"loop.nextitem"}));
      loop.set("cycle", Value(Callable([i](Args& a) -> Value {
        if (a.positional.empty()) return Value(None{});
        return a.positional[static_cast<size_t>(i) % a.positional.size()];
      })));
      c.set("loop", Value(std::move(loop)));
      assign_targets(c, targets, items[static_cast<size_t>(i)]);
      render_body(body, c, out);
      c.scopes.pop_back();
      if (c.flow == Flow::Break) {
        c.flow = Flow::Normal;
        break;
      }
      c.flow = Flow::Normal;
    }
  }
};
struct Set : Template::Node {
  std::vector<std::string> targets;
  std::string attr;  // set ns.attr = ...
  ExprPtr value;
  Body block;        // {% set x %}...{% endset %}
  void render(Ctx& c, std::string& out) const override {
    (void)out;
    Value v;
    if (value) {
      v = value->eval(c);
    } else {
      std::string captured;
      render_body(block, c, captured);
      v = Value(captured);
    }
    c.line = line;
    if (!attr.empty()) {
      Value ns = c.lookup(targets[0]);
      if (!ns.is_dict()) c.error("cannot set attribute '" + attr + "' of " + ns.type_name() + " '" + targets[0] + "' (use namespace())");
      ns.dict().set(attr, v);
      return;
    }
    assign_targets(c, targets, v);
  }
};
struct Group : Template::Node {
  Body body;
  void render(Ctx& c, std::string& out) const override { render_body(body, c, out); }
};
struct LoopControl : Template::Node {
  Flow flow;
  void render(Ctx& c, std::string&) const override { c.flow = flow; }
};
struct Macro : Template::Node {
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // defaults may be null
  Body body;
  void render(Ctx& c, std::string&) const override {
    const Macro* self = this;
    Ctx* ctx = &c;
    c.set(name, Value(Callable([self, ctx](Args& a) -> Value {
      Ctx& cc = *ctx;
      if (++cc.depth > 200) cc.error("macro recursion too deep");
      // Macros see the globals and their arguments, not the caller's locals.
      std::map<std::string, Value> scope;
      for (size_t i = 0; i < self->params.size(); ++i) {
        const auto& [pname, def] = self->params[i];
        if (i < a.positional.size()) scope[pname] = a.positional[i];
        else if (const Value* kv = a.kw(pname)) scope[pname] = *kv;
        else if (def) scope[pname] = def->eval(cc);
        else scope[pname] = Value(Undefined{pname});
      }
      auto saved = std::move(cc.scopes);
      cc.scopes.clear();
      cc.scopes.push_back(saved.front());
      cc.scopes.push_back(std::move(scope));
      std::string out;
      try {
        render_body(self->body, cc, out);
      } catch (...) {
        cc.scopes = std::move(saved);
        throw;
      }
      cc.scopes = std::move(saved);
      cc.flow = Flow::Normal;
      --cc.depth;
      return Value(out);
    })));
  }
};

// ============================================================ parser

class Parser {
 public:
  Parser(const std::vector<Segment>& segs, const std::string& name) : segs_(segs), name_(name) {}

  Body parse_all() {
    Body b = parse_body({});
    if (pos_ < segs_.size()) fail(name_, segs_[pos_].line, "unexpected '{% " + trimmed(segs_[pos_].text) + " %}'");
    return b;
  }

 private:
  static std::string trimmed(const std::string& s) {
    const size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
    return b == std::string::npos ? "" : s.substr(b, e - b + 1);
  }
  static std::string first_word(const std::string& s) {
    const std::string t = trimmed(s);
    size_t e = 0;
    while (e < t.size() && (std::isalnum(static_cast<unsigned char>(t[e])) || t[e] == '_')) ++e;
    return t.substr(0, e);
  }

  // Parses until a statement whose first word is one of `ends` (left unconsumed).
  Body parse_body(const std::vector<std::string>& ends) {
    Body body;
    while (pos_ < segs_.size()) {
      const Segment& s = segs_[pos_];
      if (s.kind == Segment::Text) {
        auto n = std::make_unique<TextNode>();
        n->text = s.text;
        n->line = s.line;
        body.push_back(std::move(n));
        ++pos_;
        continue;
      }
      if (s.kind == Segment::Expr) {
        auto n = std::make_unique<Output>();
        n->line = s.line;
        n->e = parse_expression(s.text, s.line);
        body.push_back(std::move(n));
        ++pos_;
        continue;
      }
      const std::string word = first_word(s.text);
      if (std::find(ends.begin(), ends.end(), word) != ends.end()) return body;
      body.push_back(parse_statement(s));
    }
    if (!ends.empty()) fail(name_, segs_.empty() ? 1 : segs_.back().line, "missing {% " + ends.back() + " %}");
    return body;
  }

  NodePtr parse_statement(const Segment& s) {
    Nest guard(*this);
    toks_ = lex(s.text, name_, s.line);
    at_ = 0;
    line_ = s.line;
    const std::string word = expect_name();
    ++pos_;
    if (word == "if") {
      auto n = std::make_unique<If>();
      n->line = s.line;
      ExprPtr cond = expr();
      end_of_tag();
      while (true) {
        Body body = parse_body({"elif", "else", "endif"});
        n->branches.emplace_back(std::move(cond), std::move(body));
        const Segment& e = segs_[pos_];
        toks_ = lex(e.text, name_, e.line);
        at_ = 0;
        line_ = e.line;
        const std::string w = expect_name();
        ++pos_;
        if (w == "elif") {
          cond = expr();
          end_of_tag();
          continue;
        }
        if (w == "else") {
          end_of_tag();
          Body b = parse_body({"endif"});
          n->branches.emplace_back(nullptr, std::move(b));
          ++pos_;
          break;
        }
        break;  // endif
      }
      return n;
    }
    if (word == "for") {
      auto n = std::make_unique<For>();
      n->line = s.line;
      n->targets.push_back(expect_name());
      while (peek_op(",")) {
        ++at_;
        n->targets.push_back(expect_name());
      }
      if (expect_name() != "in") error("expected 'in' in a for statement");
      n->iter = or_expr();
      if (peek_name("if")) {
        ++at_;
        n->filter = or_expr();
      }
      if (peek_name("recursive")) error("recursive for loops are not supported");
      end_of_tag();
      n->body = parse_body({"else", "endfor"});
      if (first_word(segs_[pos_].text) == "else") {
        ++pos_;
        n->otherwise = parse_body({"endfor"});
      }
      ++pos_;
      return n;
    }
    if (word == "set") {
      auto n = std::make_unique<Set>();
      n->line = s.line;
      n->targets.push_back(expect_name());
      if (peek_op(".")) {
        ++at_;
        n->attr = expect_name();
      }
      while (peek_op(",")) {
        ++at_;
        n->targets.push_back(expect_name());
      }
      if (peek_op("=")) {
        ++at_;
        n->value = expr();
        if (peek_op(",")) {
          // set a, b = x, y
          auto l = std::make_unique<ListExpr>();
          l->items.push_back(std::move(n->value));
          while (peek_op(",")) {
            ++at_;
            l->items.push_back(expr());
          }
          n->value = std::move(l);
        }
        end_of_tag();
      } else {
        end_of_tag();
        n->block = parse_body({"endset"});
        ++pos_;
      }
      return n;
    }
    if (word == "macro") {
      auto n = std::make_unique<Macro>();
      n->line = s.line;
      n->name = expect_name();
      expect_op("(");
      while (!peek_op(")")) {
        std::string p = expect_name();
        ExprPtr def;
        if (peek_op("=")) {
          ++at_;
          def = expr();
        }
        n->params.emplace_back(p, std::move(def));
        if (!peek_op(",")) break;
        ++at_;
      }
      expect_op(")");
      end_of_tag();
      n->body = parse_body({"endmacro"});
      ++pos_;
      return n;
    }
    if (word == "generation") {
      // transformers' AssistantTracker block: renders its body unchanged.
      end_of_tag();
      auto n = std::make_unique<Group>();
      n->line = s.line;
      n->body = parse_body({"endgeneration"});
      ++pos_;
      return n;
    }
    if (word == "break" || word == "continue") {
      end_of_tag();
      auto n = std::make_unique<LoopControl>();
      n->line = s.line;
      n->flow = word == "break" ? Flow::Break : Flow::Continue;
      return n;
    }
    error("unsupported statement '{% " + word + " %}' (supported: if, for, set, macro, break, continue, raw, generation)");
  }

  // --- expressions
  ExprPtr parse_expression(const std::string& code, int line) {
    toks_ = lex(code, name_, line);
    at_ = 0;
    line_ = line;
    ExprPtr e = expr();
    end_of_tag();
    return e;
  }

  [[noreturn]] void error(const std::string& what) const { fail(name_, line_, what); }
  const Tok& peek() const { return toks_[at_]; }
  bool peek_op(const char* op) const { return peek().kind == Tok::Op && peek().text == op; }
  bool peek_name(const char* n) const { return peek().kind == Tok::Name && peek().text == n; }
  void expect_op(const char* op) {
    if (!peek_op(op)) error(std::string("expected '") + op + "', found '" + peek().text + "'");
    ++at_;
  }
  std::string expect_name() {
    if (peek().kind != Tok::Name) error("expected a name, found '" + peek().text + "'");
    return toks_[at_++].text;
  }
  void end_of_tag() {
    if (peek().kind != Tok::End) error("unexpected '" + peek().text + "'");
  }
  template <typename T>
  std::unique_ptr<T> node() {
    auto n = std::make_unique<T>();
    n->line = line_;
    return n;
  }

  // Bounds recursion so a hostile template fails cleanly instead of
  // exhausting the stack.
  struct Nest {
    Parser& p;
    explicit Nest(Parser& parser) : p(parser) {
      if (++p.nest_ > 100) p.error("template nested too deeply");
    }
    ~Nest() { --p.nest_; }
  };

  ExprPtr expr() {
    Nest guard(*this);
    ExprPtr e = or_expr();
    if (peek_name("if")) {
      ++at_;
      auto c = node<Cond>();
      c->then = std::move(e);
      c->cond = or_expr();
      if (peek_name("else")) {
        ++at_;
        c->otherwise = expr();
      }
      return c;
    }
    return e;
  }
  ExprPtr binary(ExprPtr a, const std::string& op, ExprPtr b) {
    auto n = node<Binary>();
    n->op = op;
    n->a = std::move(a);
    n->b = std::move(b);
    return n;
  }
  ExprPtr or_expr() {
    ExprPtr e = and_expr();
    while (peek_name("or")) {
      ++at_;
      e = binary(std::move(e), "or", and_expr());
    }
    return e;
  }
  ExprPtr and_expr() {
    ExprPtr e = not_expr();
    while (peek_name("and")) {
      ++at_;
      e = binary(std::move(e), "and", not_expr());
    }
    return e;
  }
  ExprPtr not_expr() {
    Nest guard(*this);
    if (peek_name("not")) {
      ++at_;
      auto n = node<Unary>();
      n->op = "not";
      n->e = not_expr();
      return n;
    }
    return compare_expr();
  }
  ExprPtr compare_expr() {
    ExprPtr e = math1();
    while (true) {
      const Tok& t = peek();
      if (t.kind == Tok::Op && (t.text == "==" || t.text == "!=" || t.text == "<" || t.text == ">" || t.text == "<=" || t.text == ">=")) {
        std::string op = t.text;
        ++at_;
        e = binary(std::move(e), op, math1());
      } else if (peek_name("in")) {
        ++at_;
        e = binary(std::move(e), "in", math1());
      } else if (peek_name("not") && toks_[at_ + 1].kind == Tok::Name && toks_[at_ + 1].text == "in") {
        at_ += 2;
        e = binary(std::move(e), "not in", math1());
      } else {
        return e;
      }
    }
  }
  ExprPtr math1() {
    ExprPtr e = concat();
    while (peek_op("+") || peek_op("-")) {
      std::string op = toks_[at_++].text;
      e = binary(std::move(e), op, concat());
    }
    return e;
  }
  ExprPtr concat() {
    ExprPtr e = math2();
    while (peek_op("~")) {
      ++at_;
      e = binary(std::move(e), "~", math2());
    }
    return e;
  }
  ExprPtr math2() {
    ExprPtr e = power();
    while (peek_op("*") || peek_op("/") || peek_op("//") || peek_op("%")) {
      std::string op = toks_[at_++].text;
      e = binary(std::move(e), op, power());
    }
    return e;
  }
  ExprPtr power() {
    ExprPtr e = unary();
    while (peek_op("**")) {
      ++at_;
      e = binary(std::move(e), "**", unary());
    }
    return e;
  }
  // As Jinja2 parses it: -x|f is f(-x), the sign binding tighter than the filter.
  ExprPtr unary(bool with_filters = true) {
    Nest guard(*this);
    if (peek_op("-") || peek_op("+")) {
      std::string op = toks_[at_++].text;
      auto n = node<Unary>();
      n->op = op;
      n->e = unary(false);
      if (with_filters) return filters(std::move(n));
      return n;
    }
    ExprPtr e = postfix(primary());
    if (with_filters) return filters(std::move(e));
    return e;
  }
  CallArgs call_args() {
    CallArgs a;
    expect_op("(");
    while (!peek_op(")")) {
      if (peek().kind == Tok::Name && toks_[at_ + 1].kind == Tok::Op && toks_[at_ + 1].text == "=") {
        std::string k = toks_[at_].text;
        at_ += 2;
        a.keyword.emplace_back(k, expr());
      } else {
        a.positional.push_back(expr());
      }
      if (!peek_op(",")) break;
      ++at_;
    }
    expect_op(")");
    return a;
  }
  ExprPtr postfix(ExprPtr e) {
    while (true) {
      if (peek_op(".")) {
        ++at_;
        auto n = node<Attr>();
        n->obj = std::move(e);
        n->key = peek().kind == Tok::Int ? toks_[at_++].text : expect_name();
        e = std::move(n);
      } else if (peek_op("[")) {
        ++at_;
        ExprPtr a, b, st;
        bool slice = false;
        if (!peek_op(":")) a = expr();
        if (peek_op(":")) {
          slice = true;
          ++at_;
          if (!peek_op("]") && !peek_op(":")) b = expr();
          if (peek_op(":")) {
            ++at_;
            if (!peek_op("]")) st = expr();
          }
        }
        expect_op("]");
        if (slice) {
          auto n = node<Slice>();
          n->obj = std::move(e);
          n->start = std::move(a);
          n->stop = std::move(b);
          n->step = std::move(st);
          e = std::move(n);
        } else {
          auto n = node<Subscript>();
          n->obj = std::move(e);
          n->index = std::move(a);
          e = std::move(n);
        }
      } else if (peek_op("(")) {
        auto n = node<Call>();
        n->fn = std::move(e);
        n->args = call_args();
        e = std::move(n);
      } else {
        return e;
      }
    }
  }
  ExprPtr filters(ExprPtr e) {
    while (true) {
      if (peek_op("|")) {
        ++at_;
        auto n = node<Filter>();
        n->obj = std::move(e);
        n->name = expect_name();
        if (peek_op("(")) n->args = call_args();
        e = std::move(n);
      } else if (peek_name("is")) {
        ++at_;
        auto n = node<Test>();
        n->obj = std::move(e);
        if (peek_name("not")) {
          ++at_;
          n->negate = true;
        }
        n->name = expect_name();
        if (peek_op("(")) {
          n->args = call_args();
        } else if (peek().kind == Tok::Str || peek().kind == Tok::Int || peek().kind == Tok::Float ||
                   (peek().kind == Tok::Name && !peek_name("and") && !peek_name("or") && !peek_name("else") && !peek_name("if") &&
                    !peek_name("in") && !peek_name("not"))) {
          n->args.positional.push_back(postfix(primary()));  // is divisibleby 3, is sameas none
        }
        e = std::move(n);
      } else {
        return e;
      }
    }
  }
  ExprPtr primary() {
    const Tok& t = peek();
    if (t.kind == Tok::Str) {
      auto n = node<Literal>();
      std::string s = toks_[at_++].text;
      while (peek().kind == Tok::Str) s += toks_[at_++].text;  // adjacent literals concatenate
      n->v = Value(s);
      return n;
    }
    if (t.kind == Tok::Int || t.kind == Tok::Float) {
      auto n = node<Literal>();
      n->v = t.kind == Tok::Int ? Value(t.i) : Value(t.f);
      ++at_;
      return n;
    }
    if (t.kind == Tok::Name) {
      const std::string w = toks_[at_++].text;
      auto lit = node<Literal>();
      if (w == "true" || w == "True") lit->v = Value(true);
      else if (w == "false" || w == "False") lit->v = Value(false);
      else if (w == "none" || w == "None") lit->v = Value(None{});
      else {
        auto n = node<Name>();
        n->n = w;
        return n;
      }
      return lit;
    }
    if (peek_op("(")) {
      ++at_;
      if (peek_op(")")) {
        ++at_;
        auto empty = node<ListExpr>();  // ()
        empty->tuple = true;
        return empty;
      }
      ExprPtr e = expr();
      if (peek_op(",")) {
        auto l = node<ListExpr>();
        l->tuple = true;
        l->items.push_back(std::move(e));
        while (peek_op(",")) {
          ++at_;
          if (peek_op(")")) break;
          l->items.push_back(expr());
        }
        e = std::move(l);
      }
      expect_op(")");
      return e;
    }
    if (peek_op("[")) {
      ++at_;
      auto l = node<ListExpr>();
      while (!peek_op("]")) {
        l->items.push_back(expr());
        if (!peek_op(",")) break;
        ++at_;
      }
      expect_op("]");
      return l;
    }
    if (peek_op("{")) {
      ++at_;
      auto d = node<DictExpr>();
      while (!peek_op("}")) {
        ExprPtr k = expr();
        expect_op(":");
        d->items.emplace_back(std::move(k), expr());
        if (!peek_op(",")) break;
        ++at_;
      }
      expect_op("}");
      return d;
    }
    error("unexpected '" + t.text + "'");
  }

  const std::vector<Segment>& segs_;
  const std::string& name_;
  size_t pos_ = 0;
  std::vector<Tok> toks_;
  size_t at_ = 0;
  int line_ = 0;
  int nest_ = 0;
};

}  // namespace

namespace {
Value get_member(Ctx& c, const Value& obj, const std::string& key, bool attribute_first) {
  return detail::member(c, obj, key, attribute_first);
}
Value apply_filter(Ctx& c, const std::string& name, const Value& v, Args& a) { return detail::filter(c, name, v, a); }
bool apply_test(Ctx& c, const std::string& name, const Value& v, Args& a) { return detail::test(c, name, v, a); }

struct Root : Template::Node {
  Body body;
  void render(Ctx& c, std::string& out) const override { render_body(body, c, out); }
};
}  // namespace

Template Template::parse(const std::string& source, const std::string& name) {
  auto segs = scan(source, name);
  Parser p(segs, name);
  auto root = std::make_shared<Root>();
  root->body = p.parse_all();
  Template t;
  t.root_ = root;
  t.name_ = name;
  return t;
}

std::string Template::render(const Value& context) const {
  Ctx c;
  c.name = name_;
  c.scopes.emplace_back();
  detail::install_globals(c.scopes[0]);
  if (context.is_dict())
    for (const auto& [k, v] : context.dict().items) c.scopes[0][k] = v;
  c.scopes.emplace_back();
  std::string out;
  root_->render(c, out);
  return out;
}

}  // namespace sy::jinja
