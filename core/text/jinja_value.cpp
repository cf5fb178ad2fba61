#include "text/jinja_value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "base/error.h"

namespace sy::jinja {

const Value* Dict::find(const std::string& key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}
Value* Dict::find(const std::string& key) {
  for (auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}
void Dict::set(const std::string& key, Value v) {
  if (Value* at = find(key)) *at = std::move(v);
  else items.emplace_back(key, std::move(v));
}

const Value* Args::kw(const std::string& name) const {
  for (const auto& [k, v] : keyword)
    if (k == name) return &v;
  return nullptr;
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value(None{});
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List l;
      for (const auto& e : j) l.push_back(from_json(e));
      return Value(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (const auto& [k, v] : j.items()) d.items.emplace_back(k, from_json(v));
      return Value(std::move(d));
    }
    default: return Value(None{});
  }
}

nlohmann::json Value::to_json() const {
  if (is_none()) return nullptr;
  if (is_bool()) return as_bool();
  if (is_int()) return as_int();
  if (is_float()) return std::get<double>(v_);
  if (is_string()) return as_string();
  if (is_list()) {
    auto a = nlohmann::json::array();
    for (const auto& e : list()) a.push_back(e.to_json());
    return a;
  }
  if (is_dict()) {
    auto o = nlohmann::json::object();
    for (const auto& [k, v] : dict().items) o[k] = v.to_json();
    return o;
  }
  SY_THROW("cannot convert " << type_name() << " to JSON");
}

bool Value::truthy() const {
  if (is_undefined() || is_none()) return false;
  if (is_bool()) return as_bool();
  if (is_int()) return as_int() != 0;
  if (is_float()) return std::get<double>(v_) != 0.0;
  if (is_string()) return !as_string().empty();
  if (is_list()) return !list().empty();
  if (is_dict()) return !dict().items.empty();
  return true;
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // Shortest round-trip digits, then Python's layout: fixed for exponents
  // -4..15, else d.ddde+XX.
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, end);  // "-1.2345e+17"
  const size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::stoi(sci.substr(e + 1));
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      if (static_cast<int>(digits.size()) <= exp + 1) {
        out = digits + std::string(static_cast<size_t>(exp + 1) - digits.size(), '0') + ".0";
      } else {
        out = digits.substr(0, static_cast<size_t>(exp + 1)) + "." + digits.substr(static_cast<size_t>(exp + 1));
      }
    } else {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) {
      out += '.';
      out.append(digits, 1);
    }
    char ebuf[16];
    std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += ebuf;
  }
  if (neg) out.insert(out.begin(), '-');
  return out;
}

namespace {

std::string repr_string(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  const char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<unsigned char>(q)) {
      out += '\\';
      out += q;
    }
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + q;
}

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void json_dump(std::string& out, const Value& v, int indent, bool sort_keys, int level) {
  if (v.is_none() || v.is_undefined()) {
    out += "null";
  } else if (v.is_bool()) {
    out += v.as_bool() ? "true" : "false";
  } else if (v.is_int()) {
    out += std::to_string(v.as_int());
  } else if (v.is_float()) {
    const double d = v.as_number();
    out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : float_repr(d);
  } else if (v.is_string()) {
    json_string(out, v.as_string());
  } else if (v.is_list() || v.is_dict()) {
    const bool list = v.is_list();
    std::vector<std::pair<std::string, const Value*>> entries;
    if (list) {
      for (const auto& e : v.list()) entries.emplace_back(std::string(), &e);
    } else {
      for (const auto& [k, e] : v.dict().items) entries.emplace_back(k, &e);
      if (sort_keys) std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    }
    out += list ? '[' : '{';
    if (entries.empty()) {
      out += list ? ']' : '}';
      return;
    }
    std::string pad;
    if (indent >= 0) pad.assign(1, '\n').append(static_cast<size_t>(indent * (level + 1)), ' ');
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i) out += indent >= 0 ? "," : ", ";
      out += pad;
      if (!list) {
        json_string(out, entries[i].first);
        out += ": ";
      }
      json_dump(out, *entries[i].second, indent, sort_keys, level + 1);
    }
    if (indent >= 0) {
      out += '\n';
      out.append(static_cast<size_t>(indent * level), ' ');
    }
    out += list ? ']' : '}';
  } else {
    SY_THROW("tojson: cannot serialise " << v.type_name());
  }
}

}  // namespace

std::string to_json_text(const Value& v, int indent, bool sort_keys) {
  std::string out;
  json_dump(out, v, indent, sort_keys, 0);
  return out;
}

std::string Value::str() const {
  if (is_undefined()) return "";
  if (is_none()) return "None";
  if (is_bool()) return as_bool() ? "True" : "False";
  if (is_int()) return std::to_string(as_int());
  if (is_float()) return float_repr(std::get<double>(v_));
  if (is_string()) return as_string();
  return repr();
}

std::string Value::repr() const {
  if (is_string()) return repr_string(as_string());
  if (is_list()) {
    std::string out = is_tuple() ? "(" : "[";
    for (size_t i = 0; i < list().size(); ++i) {
      if (i) out += ", ";
      out += list()[i].repr();
    }
    if (is_tuple() && list().size() == 1) out += ',';
    out += is_tuple() ? ")" : "]";
    return out;
  }
  if (is_dict()) {
    std::string out = "{";
    for (size_t i = 0; i < dict().items.size(); ++i) {
      if (i) out += ", ";
      out += repr_string(dict().items[i].first);
      out += ": ";
      out += dict().items[i].second.repr();
    }
    return out + "}";
  }
  if (is_callable()) return "<function>";
  return str();
}

std::string Value::type_name() const {
  if (is_undefined()) return "undefined";
  if (is_none()) return "none";
  if (is_bool()) return "bool";
  if (is_int()) return "int";
  if (is_float()) return "float";
  if (is_string()) return "string";
  if (is_list()) return "list";
  if (is_dict()) return "dict";
  return "function";
}

bool operator==(const Value& a, const Value& b) {
  if ((a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool())) return a.as_number() == b.as_number();
  if (a.v_.index() != b.v_.index() || a.is_tuple() != b.is_tuple()) return false;
  if (a.is_string()) return a.as_string() == b.as_string();
  if (a.is_none() || a.is_undefined()) return true;
  if (a.is_list()) {
    if (a.list().size() != b.list().size()) return false;
    for (size_t i = 0; i < a.list().size(); ++i)
      if (!(a.list()[i] == b.list()[i])) return false;
    return true;
  }
  if (a.is_dict()) {
    if (a.dict().items.size() != b.dict().items.size()) return false;
    for (const auto& [k, v] : a.dict().items) {
      const Value* o = b.dict().find(k);
      if (!o || !(*o == v)) return false;
    }
    return true;
  }
  return &a.callable() == &b.callable();
}

}  // namespace sy::jinja
