// The interpreter: what each expression evaluates to and what each
// statement renders, with Python's semantics for the values.
#include <algorithm>
#include <cmath>
#include <map>

#include "base/error.h"
#include "text/jinja_ast.h"

namespace sy::jinja {

namespace detail {

void fail(const std::string& name, int line, const std::string& what) { SY_THROW(name << ":" << line << ": " << what); }

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
  if (hay.is_dict()) {
    if (needle.is_int()) return hay.dict().find(std::to_string(needle.as_int())) != nullptr;  // integer keys are kept as text
    return needle.is_string() && hay.dict().find(needle.as_string()) != nullptr;
  }
  // Jinja2's Undefined iterates as empty: 'x' in undefined is false (Granite's templates rely on it).
  if (hay.is_undefined()) return false;
  c.error("argument of type '" + hay.type_name() + "' is not iterable");
}

namespace {

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

std::string as_str(const Value& v) { return v.str(); }

int64_t as_index(Ctx& c, const Value& v, const char* what) {
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return v.as_bool() ? 1 : 0;
  c.error(std::string(what) + " must be an integer, got " + v.type_name());
}



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

}  // namespace

Value Literal::eval(Ctx&) const { return v; }

Value Name::eval(Ctx& c) const { return c.lookup(n); }

Value ListExpr::eval(Ctx& c) const {
  List l;
  for (const auto& e : items) l.push_back(e->eval(c));
  return tuple ? Value::tuple(std::move(l)) : Value(std::move(l));
}

Value DictExpr::eval(Ctx& c) const {
  Dict d;
  for (const auto& [k, v] : items) {
    Value key = k->eval(c);
    // Integer keys are kept as their decimal text (and looked up so), which
    // is what a template prints of them.
    if (key.is_int()) key = Value(std::to_string(key.as_int()));
    if (!key.is_string()) c.error("dict keys must be strings or integers here, got " + key.type_name());
    d.set(key.as_string(), v->eval(c));
  }
  return Value(std::move(d));
}

Value Attr::eval(Ctx& c) const {
  Value o = obj->eval(c);
  c.line = line;
  return member(c, o, key, true);
}

Value Subscript::eval(Ctx& c) const {
  Value o = obj->eval(c), k = index->eval(c);
  c.line = line;
  if (o.is_undefined()) c.error("'" + o.undefined_name() + "' is undefined");
  if (k.is_string()) return member(c, o, k.as_string(), false);
  if (o.is_dict() && k.is_int()) return member(c, o, std::to_string(k.as_int()), false);
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

Value Slice::eval(Ctx& c) const {
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

Args CallArgs::eval(Ctx& c) const {
  Args a;
  for (const auto& e : positional) a.positional.push_back(e->eval(c));
  for (const auto& [k, e] : keyword) a.keyword.emplace_back(k, e->eval(c));
  return a;
}

Value Call::eval(Ctx& c) const {
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

Value Filter::eval(Ctx& c) const {
  Value v = obj->eval(c);
  Args a = args.eval(c);
  c.line = line;
  return filter(c, name, v, a);
}

Value Test::eval(Ctx& c) const {
  Value v = obj->eval(c);
  Args a = args.eval(c);
  c.line = line;
  return Value(test(c, name, v, a) != negate);
}

Value Unary::eval(Ctx& c) const {
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

Value Binary::eval(Ctx& c) const {
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

Value Cond::eval(Ctx& c) const {
  if (cond->eval(c).truthy()) return then->eval(c);
  return otherwise ? otherwise->eval(c) : Value(Undefined{"(conditional without else)"});
}

void TextNode::render(Ctx&, std::string& out) const { out += text; }

void Output::render(Ctx& c, std::string& out) const { out += e->eval(c).str(); }

void If::render(Ctx& c, std::string& out) const {
  for (const auto& [cond, body] : branches) {
    c.line = line;
    if (!cond || cond->eval(c).truthy()) {
      render_body(body, c, out);
      return;
    }
  }
}

void For::render(Ctx& c, std::string& out) const {
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

void Set::render(Ctx& c, std::string& out) const {
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

void Group::render(Ctx& c, std::string& out) const { render_body(body, c, out); }

void FilterBlock::render(Ctx& c, std::string& out) const {
  std::string text;
  render_body(body, c, text);
  Value v(text);
  for (const auto& [name, args] : filters) {
    Args a = args.eval(c);
    c.line = line;
    v = filter(c, name, v, a);
  }
  out += v.str();
}

void LoopControl::render(Ctx& c, std::string&) const { c.flow = flow; }

void Macro::render(Ctx& c, std::string&) const {
  const Macro* self = this;
  Ctx* ctx = &c;
  c.set(name, Value(Callable([self, ctx](Args& a) -> Value {
    Ctx& cc = *ctx;
    if (++cc.depth > 200) cc.error("macro recursion too deep");
    // Macros see the globals, the template's top-level names (other
    // macros, namespaces: as they are when called, as in Jinja2) and their
    // arguments, not the caller's locals.
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
    if (saved.size() > 1) cc.scopes.push_back(saved[1]);
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

void Root::render(Ctx& c, std::string& out) const { render_body(body, c, out); }

}  // namespace detail

std::string Template::render(const Value& context) const {
  detail::Ctx c;
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
