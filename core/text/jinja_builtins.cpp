// What the filters and tests share (jinja_builtins.h), the str/dict
// methods templates call, and the globals transformers adds
// (raise_exception, strftime_now), with Python's semantics. The sandbox is
// immutable, as transformers' is: list.append and other mutating methods
// are refused.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <ctime>

#include "base/error.h"
#include "text/jinja_builtins.h"
#include "text/unicode.h"

namespace sy::jinja::detail {

namespace {
constexpr int64_t kMaxRange = 1 << 20;  // a template never needs more; a hostile one cannot exhaust memory
}  // namespace

const Value* arg(Args& a, size_t index, const char* name) {
  if (index < a.positional.size()) return &a.positional[index];
  return a.kw(name);
}
std::string arg_str(Ctx& c, Args& a, size_t index, const char* name, const std::string& fallback) {
  const Value* v = arg(a, index, name);
  if (!v || v->is_none() || v->is_undefined()) return fallback;
  if (!v->is_string()) c.error(std::string("argument '") + name + "' must be a string, got " + v->type_name());
  return v->as_string();
}
int64_t arg_int(Ctx& c, Args& a, size_t index, const char* name, int64_t fallback) {
  const Value* v = arg(a, index, name);
  if (!v || v->is_none() || v->is_undefined()) return fallback;
  if (v->is_bool()) return v->as_bool();
  if (!v->is_int()) c.error(std::string("argument '") + name + "' must be an integer, got " + v->type_name());
  return v->as_int();
}
bool arg_bool(Args& a, size_t index, const char* name, bool fallback) {
  const Value* v = arg(a, index, name);
  return v && !v->is_undefined() ? v->truthy() : fallback;
}

bool is_py_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f); }

bool fits_int64(double d) { return std::isfinite(d) && d > -9.2e18 && d < 9.2e18; }

std::string strip(const std::string& s, const std::string* chars, bool left, bool right) {
  auto drop = [&](unsigned char c) { return chars ? chars->find(static_cast<char>(c)) != std::string::npos : is_py_space(c); };
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && drop(static_cast<unsigned char>(s[b]))) ++b;
  if (right)
    while (e > b && drop(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// Strings are UTF-8; Python works on code points.
std::vector<char32_t> cps(const std::string& s) {
  std::vector<char32_t> out;
  const std::string valid = unicode::is_valid_utf8(s) ? std::string() : unicode::valid_utf8(s);
  for (const auto& [cp, at] : unicode::code_points(valid.empty() ? s : valid)) out.push_back(cp);
  return out;
}
std::string utf8(const std::vector<char32_t>& v) {
  std::string out;
  for (char32_t cp : v) out += unicode::encode(cp);
  return out;
}
std::string upper(const std::string& s) {
  std::vector<char32_t> v = cps(s);
  for (auto& cp : v) cp = unicode::to_upper(cp);
  return utf8(v);
}
std::string lower(const std::string& s) {
  std::vector<char32_t> v = cps(s);
  for (auto& cp : v) cp = unicode::to_lower(cp);
  return utf8(v);
}

// Python's str.title(): a cased letter after an uncased character starts a word.
std::string py_title(const std::string& s) {
  std::vector<char32_t> v = cps(s);
  bool prev_cased = false;
  for (auto& cp : v) {
    const bool cased = unicode::is_cased(cp);
    cp = cased ? (prev_cased ? unicode::to_lower(cp) : unicode::to_title(cp)) : cp;
    prev_cased = cased;
  }
  return utf8(v);
}
// Jinja's title filter: words begin after whitespace or one of -({[<.
std::string jinja_title(const std::string& s) {
  std::vector<char32_t> v = cps(s);
  bool word_start = true;
  for (auto& cp : v) {
    if (unicode::is_whitespace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<') {
      word_start = true;
      continue;
    }
    cp = word_start ? unicode::to_upper(cp) : unicode::to_lower(cp);
    word_start = false;
  }
  return utf8(v);
}
std::string capitalize(const std::string& s) {
  std::vector<char32_t> v = cps(s);
  for (size_t i = 0; i < v.size(); ++i) v[i] = i == 0 ? unicode::to_title(v[i]) : unicode::to_lower(v[i]);
  return utf8(v);
}
// Python's \w: letters, numbers and '_'.
// Python's str.format for replacement fields without a format spec: {},
// {0}, {name}; {{ and }} are braces.
std::string py_format(Ctx& c, const std::string& s, Args& a) {
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char ch = s[i];
    if ((ch == '{' || ch == '}') && i + 1 < s.size() && s[i + 1] == ch) {
      out.push_back(ch);
      ++i;
      continue;
    }
    if (ch == '}') c.error("format: single '}' in the format string");
    if (ch != '{') {
      out.push_back(ch);
      continue;
    }
    const size_t end = s.find('}', i);
    if (end == std::string::npos) c.error("format: '{' without '}'");
    const std::string field = s.substr(i + 1, end - i - 1);
    if (field.find_first_of(":!") != std::string::npos) c.error("format: conversions and format specs ('" + field + "') are not supported");
    const Value* v = nullptr;
    if (field.empty()) {
      if (next < a.positional.size()) v = &a.positional[next++];
    } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      const size_t k = std::stoul(field);
      if (k < a.positional.size()) v = &a.positional[k];
    } else {
      v = a.kw(field);
    }
    if (!v) c.error("format: no argument for '{" + field + "}'");
    out += v->str();
    i = end;
  }
  return out;
}

bool is_word_char(char32_t cp) { return cp == '_' || unicode::is_letter(cp) || unicode::is_number(cp); }

std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  if (from.empty()) {
    // Python inserts `to` between every character (and at both ends).
    std::string out;
    int64_t done = 0;
    List chars;
    for (size_t i = 0; i < s.size(); ++i) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      out += s[i];
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  std::string out;
  size_t at = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t f = s.find(from, at);
    if (f == std::string::npos) break;
    out.append(s, at, f - at);
    out += to;
    at = f + from.size();
    ++done;
  }
  out.append(s, at);
  return out;
}

List split(const std::string& s, const Value* sep, int64_t maxsplit) {
  List out;
  if (!sep || sep->is_none()) {
    size_t i = 0;
    int64_t done = 0;
    while (true) {
      while (i < s.size() && is_py_space(static_cast<unsigned char>(s[i]))) ++i;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && done >= maxsplit) {
        size_t e = s.size();
        while (e > i && is_py_space(static_cast<unsigned char>(s[e - 1]))) --e;
        out.emplace_back(s.substr(i, e - i));
        break;
      }
      size_t b = i;
      while (i < s.size() && !is_py_space(static_cast<unsigned char>(s[i]))) ++i;
      out.emplace_back(s.substr(b, i - b));
      ++done;
    }
    return out;
  }
  const std::string& d = sep->as_string();
  size_t at = 0;
  int64_t done = 0;
  while (maxsplit < 0 || done < maxsplit) {
    const size_t f = s.find(d, at);
    if (f == std::string::npos) break;
    out.emplace_back(s.substr(at, f - at));
    at = f + d.size();
    ++done;
  }
  out.emplace_back(s.substr(at));
  return out;
}

int64_t py_len(Ctx& c, const Value& v) {
  if (v.is_string()) {
    int64_t n = 0;
    for (unsigned char ch : v.as_string()) n += (ch & 0xC0) != 0x80;
    return n;
  }
  if (v.is_list()) return static_cast<int64_t>(v.list().size());
  if (v.is_dict()) return static_cast<int64_t>(v.dict().items.size());
  if (v.is_undefined()) return 0;
  c.error("object of type '" + v.type_name() + "' has no len()");
}

// Looks up a dotted attribute path ("function.name") the way Jinja's
// attribute= arguments do.
Value attribute_path(Ctx& c, const Value& v, const std::string& path) {
  Value cur = v;
  size_t at = 0;
  while (at <= path.size()) {
    const size_t dot = path.find('.', at);
    const std::string part = path.substr(at, dot == std::string::npos ? std::string::npos : dot - at);
    if (cur.is_undefined()) return cur;
    cur = member(c, cur, part, false);
    if (dot == std::string::npos) break;
    at = dot + 1;
  }
  return cur;
}

Value method(Ctx& c, const Value& obj, const std::string& key) {
  Ctx* ctx = &c;
  auto bind = [&](auto fn) { return Value(Callable([obj, ctx, fn](Args& a) -> Value { return fn(*ctx, obj, a); })); };
  if (obj.is_string()) {
    if (key == "strip" || key == "lstrip" || key == "rstrip")
      return bind([key](Ctx& cc, const Value& o, Args& a) {
        const Value* ch = arg(a, 0, "chars");
        std::string chars = ch && !ch->is_none() ? arg_str(cc, a, 0, "chars", "") : "";
        return Value(strip(o.as_string(), ch && !ch->is_none() ? &chars : nullptr, key != "rstrip", key != "lstrip"));
      });
    if (key == "format") return bind([](Ctx& cc, const Value& o, Args& a) { return Value(py_format(cc, o.as_string(), a)); });
    if (key == "upper") return bind([](Ctx&, const Value& o, Args&) { return Value(upper(o.as_string())); });
    if (key == "lower") return bind([](Ctx&, const Value& o, Args&) { return Value(lower(o.as_string())); });
    if (key == "title") return bind([](Ctx&, const Value& o, Args&) { return Value(py_title(o.as_string())); });
    if (key == "capitalize") return bind([](Ctx&, const Value& o, Args&) { return Value(capitalize(o.as_string())); });
    if (key == "startswith" || key == "endswith")
      return bind([key](Ctx& cc, const Value& o, Args& a) {
        const Value* p = arg(a, 0, "prefix");
        if (!p) cc.error(key + "() takes one argument");
        List options = p->is_list() ? p->list() : List{*p};
        const std::string& s = o.as_string();
        for (const auto& opt : options) {
          if (!opt.is_string()) cc.error(key + "() argument must be a string or a tuple of strings, got " + opt.type_name());
          const std::string& t = opt.as_string();
          if (t.size() > s.size()) continue;
          if (key == "startswith" ? s.compare(0, t.size(), t) == 0 : s.compare(s.size() - t.size(), t.size(), t) == 0) return Value(true);
        }
        return Value(false);
      });
    if (key == "split" || key == "rsplit")
      return bind([key](Ctx& cc, const Value& o, Args& a) {
        const Value* sep = arg(a, 0, "sep");
        if (sep && !sep->is_none() && (!sep->is_string() || sep->as_string().empty())) cc.error("split(): separator must be a non-empty string");
        const int64_t maxsplit = arg_int(cc, a, 1, "maxsplit", -1);
        if (key == "rsplit" && maxsplit >= 0) {
          // Reverse, split, reverse back (byte-wise is fine for a literal separator).
          std::string r(o.as_string().rbegin(), o.as_string().rend());
          Value rsep = sep && !sep->is_none() ? Value(std::string(sep->as_string().rbegin(), sep->as_string().rend())) : Value(None{});
          List parts = split(r, rsep.is_none() ? nullptr : &rsep, maxsplit);
          std::reverse(parts.begin(), parts.end());
          for (auto& p : parts) p = Value(std::string(p.as_string().rbegin(), p.as_string().rend()));
          return Value(std::move(parts));
        }
        return Value(split(o.as_string(), sep, maxsplit));
      });
    if (key == "splitlines")
      return bind([](Ctx&, const Value& o, Args&) {
        List out;
        const std::string& s = o.as_string();
        size_t b = 0;
        for (size_t i = 0; i < s.size(); ++i) {
          if (s[i] == '\n' || s[i] == '\r') {
            out.emplace_back(s.substr(b, i - b));
            if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
            b = i + 1;
          }
        }
        if (b < s.size()) out.emplace_back(s.substr(b));
        return Value(std::move(out));
      });
    if (key == "replace")
      return bind([](Ctx& cc, const Value& o, Args& a) {
        return Value(replace_all(o.as_string(), arg_str(cc, a, 0, "old", ""), arg_str(cc, a, 1, "new", ""), arg_int(cc, a, 2, "count", -1)));
      });
    if (key == "join")
      return bind([](Ctx& cc, const Value& o, Args& a) {
        const Value* items = arg(a, 0, "iterable");
        if (!items) cc.error("join() takes one argument");
        std::string out;
        bool first = true;
        for (const auto& e : iterate(cc, *items)) {
          if (!e.is_string()) cc.error("join(): expected str items, got " + e.type_name());
          if (!first) out += o.as_string();
          out += e.as_string();
          first = false;
        }
        return Value(out);
      });
    if (key == "find" || key == "rfind" || key == "count" || key == "index")
      return bind([key](Ctx& cc, const Value& o, Args& a) {
        const std::string sub = arg_str(cc, a, 0, "sub", "");
        const std::string& s = o.as_string();
        if (key == "count") {
          if (sub.empty()) return Value(py_len(cc, o) + 1);
          int64_t n = 0;
          for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
          return Value(n);
        }
        const size_t f = key == "rfind" ? s.rfind(sub) : s.find(sub);
        if (f == std::string::npos) {
          if (key == "index") cc.error("substring not found");
          return Value(int64_t{-1});
        }
        int64_t cp = 0;  // code-point offset, as Python reports it
        for (size_t i = 0; i < f; ++i) cp += (static_cast<unsigned char>(s[i]) & 0xC0) != 0x80;
        return Value(cp);
      });
    auto predicate = [&](bool (*ok)(unsigned char)) {
      return bind([ok](Ctx&, const Value& o, Args&) {
        const std::string& s = o.as_string();
        if (s.empty()) return Value(false);
        for (unsigned char ch : s)
          if (!ok(ch)) return Value(false);
        return Value(true);
      });
    };
    if (key == "isdigit") return predicate([](unsigned char ch) -> bool { return std::isdigit(ch); });
    if (key == "isalpha") return predicate([](unsigned char ch) -> bool { return std::isalpha(ch); });
    if (key == "isspace") return predicate([](unsigned char ch) -> bool { return is_py_space(ch); });
    if (key == "isalnum") return predicate([](unsigned char ch) -> bool { return std::isalnum(ch); });
    if (key == "isupper") return predicate([](unsigned char ch) -> bool { return !std::islower(ch); });
    if (key == "islower") return predicate([](unsigned char ch) -> bool { return !std::isupper(ch); });
  }
  if (obj.is_dict()) {
    if (key == "items")
      return bind([](Ctx&, const Value& o, Args&) {
        List out;
        for (const auto& [k, v] : o.dict().items) out.push_back(Value::tuple(List{Value(k), v}));
        return Value(std::move(out));
      });
    if (key == "keys")
      return bind([](Ctx&, const Value& o, Args&) {
        List out;
        for (const auto& [k, v] : o.dict().items) out.emplace_back(k);
        return Value(std::move(out));
      });
    if (key == "values")
      return bind([](Ctx&, const Value& o, Args&) {
        List out;
        for (const auto& [k, v] : o.dict().items) out.push_back(v);
        return Value(std::move(out));
      });
    if (key == "get")
      return bind([](Ctx& cc, const Value& o, Args& a) {
        const std::string k = arg_str(cc, a, 0, "key", "");
        const Value* found = o.dict().find(k);
        if (found) return *found;
        const Value* d = arg(a, 1, "default");
        return d ? *d : Value(None{});
      });
  }
  if (obj.is_list() || obj.is_dict()) {
    static const char* mutating[] = {"append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault", "popitem", "sort", "reverse"};
    for (const char* m : mutating)
      if (key == m) c.error("access to attribute '" + key + "' of '" + obj.type_name() + "' object is unsafe (templates cannot modify their inputs)");
  }
  return Value(Undefined{key});
}

Value sort_values(Ctx& c, List items, bool reverse, bool case_sensitive, const std::string& attribute) {
  auto key_of = [&](const Value& v) {
    Value k = attribute.empty() ? v : attribute_path(c, v, attribute);
    if (!case_sensitive && k.is_string()) return Value(lower(k.as_string()));
    return k;
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    const int r = compare(c, key_of(a), key_of(b));
    return reverse ? r > 0 : r < 0;
  });
  return Value(std::move(items));
}

// select/reject/selectattr/rejectattr: (test name, its arguments) from args[from..].
bool passes(Ctx& c, const Value& v, Args& a, size_t from) {
  if (a.positional.size() <= from) return v.truthy();
  const Value& t = a.positional[from];
  if (!t.is_string()) c.error("the test name must be a string");
  Args rest;
  rest.positional.assign(a.positional.begin() + static_cast<std::ptrdiff_t>(from + 1), a.positional.end());
  return test(c, t.as_string(), v, rest);
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += ch;
    }
  }
  return out;
}


Value member(Ctx& c, const Value& obj, const std::string& key, bool attribute_first) {
  if (obj.is_undefined()) c.error("'" + obj.undefined_name() + "' is undefined (looking up '" + key + "')");
  if (obj.is_dict()) {
    if (attribute_first) {
      Value m = method(c, obj, key);
      if (!m.is_undefined()) return m;
    }
    if (const Value* v = obj.dict().find(key)) return *v;
    return attribute_first ? Value(Undefined{key}) : method(c, obj, key);
  }
  if (obj.is_list() && !key.empty() && std::all_of(key.begin(), key.end(), ::isdigit)) {
    size_t i = 0;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), i);
    return ec == std::errc() && i < obj.list().size() ? obj.list()[i] : Value(Undefined{key});
  }
  return method(c, obj, key);
}





void install_globals(std::map<std::string, Value>& g) {
  g["range"] = Value(Callable([](Args& a) -> Value {
    std::vector<int64_t> n;
    for (const auto& v : a.positional) {
      if (!v.is_int()) SY_THROW("range() needs integers, got " << v.type_name());
      n.push_back(v.as_int());
    }
    if (n.empty() || n.size() > 3) SY_THROW("range() takes 1 to 3 integers");
    const int64_t start = n.size() > 1 ? n[0] : 0, stop = n.size() > 1 ? n[1] : n[0], step = n.size() > 2 ? n[2] : 1;
    if (step == 0) SY_THROW("range() step must not be zero");
    List out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
      if (static_cast<int64_t>(out.size()) >= kMaxRange) SY_THROW("range() longer than " << kMaxRange << " items");
      out.emplace_back(i);
      if (__builtin_add_overflow(i, step, &i)) break;
    }
    return Value(std::move(out));
  }));
  auto make_dict = [](Args& a) -> Value {
    Dict d;
    for (const auto& p : a.positional)
      if (p.is_dict())
        for (const auto& [k, v] : p.dict().items) d.set(k, v);
    for (const auto& [k, v] : a.keyword) d.set(k, v);
    return Value(std::move(d));
  };
  g["namespace"] = Value(Callable(make_dict));
  g["dict"] = Value(Callable(make_dict));
  g["raise_exception"] = Value(Callable([](Args& a) -> Value {
    SY_THROW("the chat template refused the input: " << (a.positional.empty() ? std::string("(no message)") : a.positional[0].str()));
  }));
  g["strftime_now"] = Value(Callable([](Args& a) -> Value {
    if (a.positional.empty() || !a.positional[0].is_string()) SY_THROW("strftime_now() needs a format string");
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buf[256];
    const size_t n = std::strftime(buf, sizeof buf, a.positional[0].as_string().c_str(), &local);
    return Value(std::string(buf, n));
  }));
}

}  // namespace sy::jinja::detail
