// Jinja2's tests (`x is defined`, `n is divisibleby 3`, ...), one table
// entry each, with Python's semantics.
#include <map>

#include "text/jinja_builtins.h"

// Every entry has the table's signature; most use only part of it.
#pragma GCC diagnostic ignored "-Wunused-parameter"

namespace sy::jinja::detail {

namespace {

using TestFn = bool (*)(Ctx& c, const std::string& name, const Value& v, Args& a);

// The test's one argument (`is divisibleby 3`): an error naming the test when absent.
const Value& test_operand(Ctx& c, const std::string& name, Args& a) {
  const Value* x = arg(a, 0, "value");
  if (!x) c.error("test '" + name + "' needs an argument");
  return *x;
}

const std::map<std::string, TestFn, std::less<>>& tests() {
  static const std::map<std::string, TestFn, std::less<>> table = [] {
    std::map<std::string, TestFn, std::less<>> t;
    auto add = [&t](std::initializer_list<const char*> names, TestFn fn) {
      for (const char* n : names) t.emplace(n, fn);
    };
    add({"defined"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> bool { return !v.is_undefined(); });
    add({"undefined"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> bool { return v.is_undefined(); });
    add({"none"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> bool { return v.is_none(); });
    add({"boolean"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> bool { return v.is_bool(); });
    add({"true"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> bool { return v.is_bool() && v.as_bool(); });
    add({"false"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> bool { return v.is_bool() && !v.as_bool(); });
    add({"integer"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> bool { return v.is_int(); });
    add({"float"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> bool { return v.is_float(); });
    add({"number"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> bool { return v.is_number() || v.is_bool(); });
    add({"string"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> bool { return v.is_string(); });
    add({"mapping"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> bool { return v.is_dict(); });
    add({"iterable"},
        [](Ctx& c, const std::string& name, const Value& v, Args& a) -> bool { return v.is_list() || v.is_dict() || v.is_string(); });
    add({"sequence"},
        [](Ctx& c, const std::string& name, const Value& v, Args& a) -> bool { return v.is_list() || v.is_dict() || v.is_string(); });
    add({"callable"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> bool { return v.is_callable(); });
    add({"sameas"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> bool {
      const Value& o = test_operand(c, name, a);
      if (v.is_none() || v.is_bool() || v.is_undefined()) return v.type_name() == o.type_name() && v == o;
      return v == o && v.type_name() == o.type_name() &&
             (v.is_list()   ? &v.list() == &o.list()
              : v.is_dict() ? &v.dict() == &o.dict()
                            : true);
    });
    add({"eq", "equalto", "=="},
        [](Ctx& c, const std::string& name, const Value& v, Args& a) -> bool { return v == test_operand(c, name, a); });
    add({"ne", "!="}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> bool { return !(v == test_operand(c, name, a)); });
    add({"lt", "lessthan", "<"},
        [](Ctx& c, const std::string& name, const Value& v, Args& a) -> bool { return compare(c, v, test_operand(c, name, a)) < 0; });
    add({"gt", "greaterthan", ">"},
        [](Ctx& c, const std::string& name, const Value& v, Args& a) -> bool { return compare(c, v, test_operand(c, name, a)) > 0; });
    add({"le", "<="},
        [](Ctx& c, const std::string& name, const Value& v, Args& a) -> bool { return compare(c, v, test_operand(c, name, a)) <= 0; });
    add({"ge", ">="},
        [](Ctx& c, const std::string& name, const Value& v, Args& a) -> bool { return compare(c, v, test_operand(c, name, a)) >= 0; });
    add({"in"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> bool { return contains(c, test_operand(c, name, a), v); });
    add({"odd", "even", "divisibleby"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> bool {
      if (!v.is_int()) c.error("test '" + name + "' needs an integer, got " + v.type_name());
      if (name == "divisibleby") {
        const Value& d = test_operand(c, name, a);
        if (!d.is_int() || d.as_int() == 0) c.error("divisibleby needs a non-zero integer");
        return v.as_int() % d.as_int() == 0;
      }
      return (((v.as_int() % 2) + 2) % 2 == 1) == (name == "odd");
    });
    add({"lower"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> bool {
      return v.is_string() && lower(v.as_string()) == v.as_string();
    });
    add({"upper"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> bool {
      return v.is_string() && upper(v.as_string()) == v.as_string();
    });
    add({"escaped"}, [](Ctx& c, const std::string& name, const Value& v, Args& a) -> bool { return false; });
    return t;
  }();
  return table;
}

}  // namespace

bool test(Ctx& c, const std::string& name, const Value& v, Args& a) {
  const auto& t = tests();
  const auto it = t.find(name);
  if (it == t.end()) c.error("unknown test '" + name + "'");
  return it->second(c, name, v, a);
}

}  // namespace sy::jinja::detail
