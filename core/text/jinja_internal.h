// What the interpreter's parts share (lexer, parser, evaluator, builtins,
// filters, tests): the render context and Python's iteration, ordering and
// membership. Not part of the public API.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "text/jinja_value.h"

namespace sy::jinja::detail {

[[noreturn]] void fail(const std::string& name, int line, const std::string& what);

enum class Flow { Normal, Break, Continue };

struct Ctx {
  std::string name;
  std::vector<std::map<std::string, Value>> scopes;  // [0]: globals and the context
  Flow flow = Flow::Normal;
  int depth = 0;
  int line = 0;
  int64_t steps = 0;  // nodes rendered, bounded

  Value lookup(const std::string& n) const {
    for (auto it = scopes.rbegin(); it != scopes.rend(); ++it) {
      auto f = it->find(n);
      if (f != it->end()) return f->second;
    }
    return Value(Undefined{n});
  }
  void set(const std::string& n, Value v) { scopes.back()[n] = std::move(v); }
  [[noreturn]] void error(const std::string& what) const { fail(name, line, what); }
};

List iterate(Ctx& c, const Value& v);
int compare(Ctx& c, const Value& a, const Value& b);
bool contains(Ctx& c, const Value& hay, const Value& needle);

// Builtins: obj.key / obj[key] (methods of str, list and dict included),
// filters, tests and the global functions.
Value member(Ctx& c, const Value& obj, const std::string& key, bool attribute_first);
Value filter(Ctx& c, const std::string& name, const Value& v, Args& a);
bool test(Ctx& c, const std::string& name, const Value& v, Args& a);
void install_globals(std::map<std::string, Value>& g);

}  // namespace sy::jinja::detail
