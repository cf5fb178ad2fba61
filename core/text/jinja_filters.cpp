// Jinja2's filters (`x | tojson`, `items | map(attribute="name")`, ...),
// one table entry each, with Python's semantics. Filters Hugging Face
// templates do not use (batch, slice) are refused by name.
#include <algorithm>
#include <cstdio>
#include <cmath>
#include <map>

#include "base/error.h"
#include "text/jinja_builtins.h"
#include "text/unicode.h"

// Every entry has the table's signature; most use only part of it.
#pragma GCC diagnostic ignored "-Wunused-parameter"

namespace sy::jinja::detail {

namespace {
// Python's json.dumps(ensure_ascii=True): every non-ASCII character as
// \uXXXX (a surrogate pair above U+FFFF).
std::string ascii_json(const std::string& text) {
  std::string out;
  char buf[16];
  auto escape = [&](unsigned u) {
    std::snprintf(buf, sizeof buf, "\\u%04x", u);
    out += buf;
  };
  for (const auto& [cp, at] : unicode::code_points(text)) {
    (void)at;
    if (cp < 0x80) out.push_back(static_cast<char>(cp));
    else if (cp < 0x10000) escape(static_cast<unsigned>(cp));
    else {
      const unsigned v = static_cast<unsigned>(cp) - 0x10000;
      escape(0xD800 + (v >> 10));
      escape(0xDC00 + (v & 0x3FF));
    }
  }
  return out;
}
}  // namespace

namespace {

using FilterFn = Value (*)(Ctx& c, const std::string& name, const Value& v, Args& a);

// The operand of a filter that needs a string: an error naming the filter otherwise.
const std::string& string_operand(Ctx& c, const std::string& name, const Value& v) {
  if (!v.is_string()) c.error("filter '" + name + "' needs a string, got " + v.type_name());
  return v.as_string();
}

const std::map<std::string, FilterFn, std::less<>>& filters() {
  static const std::map<std::string, FilterFn, std::less<>> table = [] {
    std::map<std::string, FilterFn, std::less<>> t;
    auto add = [&t](std::initializer_list<const char*> names, FilterFn fn) {
      for (const char* n : names) t.emplace(n, fn);
    };
    add({"safe"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> Value { return v; });
    add({"string"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> Value { return Value(v.str()); });
    add({"trim"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> Value {
      const Value* ch = arg(a, 0, "chars");
      std::string chars = ch && !ch->is_none() ? arg_str(c, a, 0, "chars", "") : "";
      return Value(strip(v.str(), ch && !ch->is_none() ? &chars : nullptr, true, true));
    });
    add({"upper"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> Value { return Value(upper(v.str())); });
    add({"lower"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> Value { return Value(lower(v.str())); });
    add({"title"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> Value { return Value(jinja_title(v.str())); });
    add({"capitalize"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> Value { return Value(capitalize(v.str())); });
    add({"escape", "e", "forceescape"},
        [](Ctx& c, const std::string& name, const Value& v, Args& a) -> Value { return Value(html_escape(v.str())); });
    add({"replace"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> Value {
      const Value* count = arg(a, 2, "count");
      return Value(replace_all(v.str(), arg_str(c, a, 0, "old", ""), arg_str(c, a, 1, "new", ""),
                               count && !count->is_none() ? arg_int(c, a, 2, "count", -1) : -1));
    });
    add({"length", "count"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> Value { return Value(py_len(c, v)); });
    add({"wordcount"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> Value {
      int64_t words = 0;
      bool in_word = false;
      for (char32_t cp : cps(v.str())) {
        const bool w = is_word_char(cp);
        words += w && !in_word;
        in_word = w;
      }
      return Value(words);
    });
    add({"default", "d"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> Value {
      const bool boolean = arg_bool(a, 1, "boolean", false);
      if (v.is_undefined() || (boolean && !v.truthy())) {
        const Value* d = arg(a, 0, "default_value");
        return d ? *d : Value("");
      }
      return v;
    });
    add({"tojson"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> Value {
      const Value* indent = arg(a, 0, "indent");
      const int64_t ind = indent && !indent->is_none() ? arg_int(c, a, 0, "indent", -1) : -1;
      if (a.kw("separators") && !a.kw("separators")->is_none()) c.error("tojson: separators= is not supported");
      const bool ascii = a.kw("ensure_ascii") && a.kw("ensure_ascii")->truthy();
      try {
        const std::string text = to_json_text(v, static_cast<int>(std::clamp<int64_t>(ind, -1, 64)), arg_bool(a, 99, "sort_keys", false));
        return Value(ascii ? ascii_json(text) : text);
      } catch (const Error& e) {
        c.error(e.what());
      }
    });
    add({"join"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> Value {
      const std::string sep = arg_str(c, a, 0, "d", "");
      const Value* attr = a.kw("attribute");
      if (!attr && a.positional.size() > 1) attr = &a.positional[1];
      std::string out;
      bool first = true;
      for (const auto& e : iterate(c, v)) {
        if (!first) out += sep;
        out += (attr ? attribute_path(c, e, attr->str()) : e).str();
        first = false;
      }
      return Value(out);
    });
    add({"first", "last"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> Value {
      List items = iterate(c, v);
      if (items.empty()) return Value(Undefined{"(empty sequence)." + name});
      return name == "first" ? items.front() : items.back();
    });
    add({"list"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> Value { return Value(iterate(c, v)); });
    add({"items"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> Value {
      if (v.is_undefined()) return Value(List{});
      if (!v.is_dict()) c.error("filter 'items' needs a mapping, got " + v.type_name());
      return method(c, v, "items").callable()(a);
    });
    add({"dictsort"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> Value {
      if (!v.is_dict()) c.error("filter 'dictsort' needs a mapping, got " + v.type_name());
      List pairs;
      for (const auto& [k, x] : v.dict().items) pairs.push_back(Value::tuple(List{Value(k), x}));
      const bool by_value = arg_str(c, a, 1, "by", "key") == "value";
      return sort_values(c, std::move(pairs), arg_bool(a, 2, "reverse", false), arg_bool(a, 0, "case_sensitive", false),
                         by_value ? "1" : "0");
    });
    add({"reverse"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> Value {
      if (v.is_string()) {
        std::vector<char32_t> r = cps(v.as_string());
        std::reverse(r.begin(), r.end());
        return Value(utf8(r));
      }
      List items = iterate(c, v);
      std::reverse(items.begin(), items.end());
      return Value(std::move(items));
    });
    add({"sort"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> Value {
      return sort_values(c, iterate(c, v), arg_bool(a, 0, "reverse", false), arg_bool(a, 1, "case_sensitive", false),
                         arg_str(c, a, 2, "attribute", ""));
    });
    add({"unique"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> Value {
      List out;
      for (const auto& e : iterate(c, v)) {
        Value key = e.is_string() && !arg_bool(a, 0, "case_sensitive", false) ? Value(lower(e.as_string())) : e;
        bool seen = false;
        for (const auto& o : out) {
          Value ok = o.is_string() && !arg_bool(a, 0, "case_sensitive", false) ? Value(lower(o.as_string())) : o;
          if (ok == key) seen = true;
        }
        if (!seen) out.push_back(e);
      }
      return Value(std::move(out));
    });
    add({"min", "max"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> Value {
      List items = iterate(c, v);
      if (items.empty()) return Value(Undefined{name + " of an empty sequence"});
      Value best = items[0];
      for (const auto& e : items)
        if ((compare(c, e, best) < 0) == (name == "min") && !(e == best)) best = e;
      return best;
    });
    add({"sum"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> Value {
      Value total = Value(arg_int(c, a, 1, "start", 0));
      const std::string attr = arg_str(c, a, 0, "attribute", "");
      for (const auto& e : iterate(c, v)) {
        const Value x = attr.empty() ? e : attribute_path(c, e, attr);
        if (!x.is_number() && !x.is_bool()) c.error("sum: cannot add " + x.type_name());
        int64_t r = 0;
        if (total.is_int() && (x.is_int() || x.is_bool()) &&
            !__builtin_add_overflow(total.as_int(), x.is_int() ? x.as_int() : int64_t{x.as_bool()}, &r))
          total = Value(r);
        else
          total = Value(total.as_number() + x.as_number());
      }
      return total;
    });
    add({"map"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> Value {
      List out;
      if (v.is_none()) return Value(std::move(out));  // Jinja2 maps a false value to nothing
      const Value* attr = a.kw("attribute");
      for (const auto& e : iterate(c, v)) {
        if (attr) {
          Value x = attribute_path(c, e, attr->str());
          if (x.is_undefined() && a.kw("default")) x = *a.kw("default");
          out.push_back(x);
        } else {
          if (a.positional.empty() || !a.positional[0].is_string()) c.error("map needs a filter name or attribute=");
          Args rest;
          rest.positional.assign(a.positional.begin() + 1, a.positional.end());
          rest.keyword = a.keyword;
          out.push_back(filter(c, a.positional[0].as_string(), e, rest));
        }
      }
      return Value(std::move(out));
    });
    add({"select", "reject", "selectattr", "rejectattr"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> Value {
      const bool attr = name.size() > 6;
      const bool keep = name[0] == 's';
      if (attr && (a.positional.empty() || !a.positional[0].is_string())) c.error(name + " needs an attribute name");
      List out;
      if (v.is_none()) return Value(std::move(out));  // Jinja2 selects nothing from a false value
      for (const auto& e : iterate(c, v)) {
        const Value x = attr ? attribute_path(c, e, a.positional[0].as_string()) : e;
        if (passes(c, x, a, attr ? 1 : 0) == keep) out.push_back(e);
      }
      return Value(std::move(out));
    });
    add({"int"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> Value {
      const int64_t fallback = arg_int(c, a, 0, "default", 0);
      if (v.is_int()) return v;
      if (v.is_bool()) return Value(static_cast<int64_t>(v.as_bool()));
      if (v.is_float()) return fits_int64(v.as_number()) ? Value(static_cast<int64_t>(v.as_number())) : Value(fallback);
      if (v.is_string()) {
        const std::string s = strip(v.as_string(), nullptr, true, true);
        try {
          size_t used = 0;
          const int64_t n = std::stoll(s, &used, 10);
          if (used == s.size()) return Value(n);
          const double d = std::stod(s, &used);
          if (used == s.size() && fits_int64(d)) return Value(static_cast<int64_t>(d));
        } catch (...) {
        }
      }
      return Value(fallback);
    });
    add({"float"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> Value {
      if (v.is_number() || v.is_bool()) return Value(v.as_number());
      if (v.is_string()) {
        try {
          size_t used = 0;
          const std::string s = strip(v.as_string(), nullptr, true, true);
          const double d = std::stod(s, &used);
          if (used == s.size()) return Value(d);
        } catch (...) {
        }
      }
      const Value* d = arg(a, 0, "default");
      return d ? Value(d->as_number()) : Value(0.0);
    });
    add({"abs"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> Value {
      if (v.is_int()) return v.as_int() == INT64_MIN ? Value(-v.as_number()) : Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
      if (v.is_number()) return Value(std::fabs(v.as_number()));
      c.error("bad operand type for abs(): " + v.type_name());
    });
    add({"round"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> Value {
      if (!v.is_number() && !v.is_bool()) c.error("filter 'round' needs a number, got " + v.type_name());
      const int64_t precision = arg_int(c, a, 0, "precision", 0);
      const std::string how = arg_str(c, a, 1, "method", "common");
      const double scale = std::pow(10.0, static_cast<double>(precision)), x = v.as_number() * scale;
      const double r = how == "ceil" ? std::ceil(x) : how == "floor" ? std::floor(x) : std::nearbyint(x);  // Python's round: half to even
      return Value(r / scale);
    });
    add({"indent"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> Value {
      const Value* w = arg(a, 0, "width");
      const std::string pad = w && w->is_string()
                                  ? w->as_string()
                                  : std::string(static_cast<size_t>(std::clamp<int64_t>(arg_int(c, a, 0, "width", 4), 0, 256)), ' ');
      const bool first = arg_bool(a, 1, "first", false), blank = arg_bool(a, 2, "blank", false);
      const std::string& s = string_operand(c, name, v);
      std::string out;
      size_t b = 0;
      bool first_line = true;
      while (b <= s.size()) {
        const size_t e = s.find('\n', b);
        const std::string line = s.substr(b, e == std::string::npos ? std::string::npos : e - b);
        if ((!first_line || first) && (blank || !line.empty())) out += pad;
        out += line;
        if (e == std::string::npos) break;
        out += '\n';
        b = e + 1;
        first_line = false;
      }
      return Value(out);
    });
    add({"batch", "slice"},
        [](Ctx& c, const std::string& name, const Value& v, Args& a) -> Value { c.error("filter '" + name + "' is not supported"); });
    return t;
  }();
  return table;
}

}  // namespace

Value filter(Ctx& c, const std::string& name, const Value& v, Args& a) {
  const auto& t = filters();
  const auto it = t.find(name);
  if (it == t.end()) c.error("unknown filter '" + name + "'");
  return it->second(c, name, v, a);
}

}  // namespace sy::jinja::detail
