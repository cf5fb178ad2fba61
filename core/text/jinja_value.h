// The values a chat template computes with: Python's None, bool, int, float,
// str, list and dict (lists and dicts shared by reference, as in Python),
// Jinja's Undefined, and callables (macros, globals, methods). Rendering and
// comparison follow Python and Jinja2 so templates render byte-identically.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace sy::jinja {

class Value;
using List = std::vector<Value>;
// Insertion-ordered, string keys (what JSON messages and templates use).
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(const std::string& key) const;
  Value* find(const std::string& key);
  void set(const std::string& key, Value v);
};
struct Undefined {
  std::string name;  // what was looked up, for messages
};
struct None {};

// Arguments of a call: positional, then keyword.
struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  const Value* kw(const std::string& name) const;
};
using Callable = std::function<Value(Args&)>;

class Value {
 public:
  using Storage = std::variant<Undefined, None, bool, int64_t, double, std::string, std::shared_ptr<List>, std::shared_ptr<Dict>,
                               std::shared_ptr<Callable>>;
  Value() : v_(Undefined{}) {}
  Value(None) : v_(None{}) {}
  Value(Undefined u) : v_(std::move(u)) {}
  Value(bool b) : v_(b) {}
  Value(int v) : v_(static_cast<int64_t>(v)) {}
  Value(int64_t v) : v_(v) {}
  Value(double v) : v_(v) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(List l) : v_(std::make_shared<List>(std::move(l))) {}
  Value(Dict d) : v_(std::make_shared<Dict>(std::move(d))) {}
  Value(std::shared_ptr<List> l) : v_(std::move(l)) {}
  Value(std::shared_ptr<Dict> d) : v_(std::move(d)) {}
  Value(Callable c) : v_(std::make_shared<Callable>(std::move(c))) {}

  // ordered_json keeps the keys in the order the client sent them, which
  // tojson and dict iteration reproduce.
  // Python's tuple: a list that prints with parentheses ((1, 2), dict items).
  static Value tuple(List l) {
    Value v(std::move(l));
    v.tuple_ = true;
    return v;
  }
  bool is_tuple() const { return tuple_ && is_list(); }

  static Value from_json(const nlohmann::ordered_json& j);
  nlohmann::json to_json() const;  // throws for undefined or callables

  bool is_undefined() const { return std::holds_alternative<Undefined>(v_); }
  bool is_none() const { return std::holds_alternative<None>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_int() const { return std::holds_alternative<int64_t>(v_); }
  bool is_float() const { return std::holds_alternative<double>(v_); }
  bool is_number() const { return is_int() || is_float(); }
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_list() const { return std::holds_alternative<std::shared_ptr<List>>(v_); }
  bool is_dict() const { return std::holds_alternative<std::shared_ptr<Dict>>(v_); }
  bool is_callable() const { return std::holds_alternative<std::shared_ptr<Callable>>(v_); }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_number() const { return is_int() ? static_cast<double>(as_int()) : is_bool() ? (as_bool() ? 1.0 : 0.0) : std::get<double>(v_); }
  const std::string& as_string() const { return std::get<std::string>(v_); }
  List& list() const { return *std::get<std::shared_ptr<List>>(v_); }
  Dict& dict() const { return *std::get<std::shared_ptr<Dict>>(v_); }
  Callable& callable() const { return *std::get<std::shared_ptr<Callable>>(v_); }
  const std::string& undefined_name() const { return std::get<Undefined>(v_).name; }

  bool truthy() const;
  std::string str() const;   // Python's str() (what {{ }} renders)
  std::string repr() const;  // Python's repr()
  std::string type_name() const;

  friend bool operator==(const Value& a, const Value& b);

 private:
  Storage v_;
  bool tuple_ = false;
};

// Python's repr of a float: shortest round trip, always with a '.' or exponent.
std::string float_repr(double d);
// Python's json.dumps(v, ensure_ascii=False, indent=..., sort_keys=...):
// what transformers' tojson filter produces.
std::string to_json_text(const Value& v, int indent, bool sort_keys);

}  // namespace sy::jinja
