// Template source to the tree of jinja_ast.h: segments and tokens from the
// lexer, statements and expressions by recursive descent (Python's operator
// precedence). Errors name the template, the line and the construct.
#include <algorithm>
#include <cctype>

#include "text/jinja_ast.h"
#include "text/jinja_syntax.h"

namespace sy::jinja {

namespace detail {
namespace {

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
    if (word == "filter") {
      auto n = std::make_unique<FilterBlock>();
      n->line = s.line;
      while (true) {
        std::string name = expect_name();
        CallArgs args;
        if (peek_op("(")) args = call_args();
        n->filters.emplace_back(std::move(name), std::move(args));
        if (!peek_op("|")) break;
        ++at_;
      }
      end_of_tag();
      n->body = parse_body({"endfilter"});
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
    error("unsupported statement '{% " + word + " %}' (supported: if, for, set, macro, filter, break, continue, raw, generation)");
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
}  // namespace detail

Template Template::parse(const std::string& source, const std::string& name) {
  auto segs = detail::scan(source, name);
  detail::Parser p(segs, name);
  auto root = std::make_shared<detail::Root>();
  root->body = p.parse_all();
  Template t;
  t.root_ = root;
  t.name_ = name;
  return t;
}

}  // namespace sy::jinja
