// The parsed template (jinja_parser.cpp builds it): expressions that
// evaluate to a Value and statements that render text, each evaluated by
// jinja_eval.cpp. Not part of the public API.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja.h"
#include "text/jinja_internal.h"

namespace sy::jinja {

struct Template::Node {
  int line = 0;
  virtual ~Node() = default;
  virtual void render(detail::Ctx& c, std::string& out) const = 0;
};

namespace detail {

struct Expr {
  int line = 0;
  virtual ~Expr() = default;
  virtual Value eval(Ctx& c) const = 0;
};
using ExprPtr = std::unique_ptr<Expr>;
using NodePtr = std::unique_ptr<Template::Node>;
using Body = std::vector<NodePtr>;

// Expressions.
struct Literal : Expr {
  Value v;
  Value eval(Ctx&) const override;
};
struct Name : Expr {
  std::string n;
  Value eval(Ctx& c) const override;
};
struct ListExpr : Expr {
  std::vector<ExprPtr> items;
  bool tuple = false;  // (a, b)
  Value eval(Ctx& c) const override;
};
struct DictExpr : Expr {
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
  Value eval(Ctx& c) const override;
};

struct Attr : Expr {
  ExprPtr obj;
  std::string key;
  Value eval(Ctx& c) const override;
};
struct Subscript : Expr {
  ExprPtr obj, index;
  Value eval(Ctx& c) const override;
};
struct Slice : Expr {
  ExprPtr obj, start, stop, step;
  Value eval(Ctx& c) const override;
};

struct CallArgs {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
  Args eval(Ctx& c) const;
};

struct Call : Expr {
  ExprPtr fn;
  CallArgs args;
  Value eval(Ctx& c) const override;
};

struct Filter : Expr {
  ExprPtr obj;
  std::string name;
  CallArgs args;
  Value eval(Ctx& c) const override;
};
struct Test : Expr {
  ExprPtr obj;
  std::string name;
  CallArgs args;
  bool negate = false;
  Value eval(Ctx& c) const override;
};
struct Unary : Expr {
  std::string op;
  ExprPtr e;
  Value eval(Ctx& c) const override;
};
struct Binary : Expr {
  std::string op;
  ExprPtr a, b;
  Value eval(Ctx& c) const override;
};
struct Cond : Expr {
  ExprPtr then, cond, otherwise;
  Value eval(Ctx& c) const override;
};

// Statements.
struct TextNode : Template::Node {
  std::string text;
  void render(Ctx&, std::string& out) const override;
};
struct Output : Template::Node {
  ExprPtr e;
  void render(Ctx& c, std::string& out) const override;
};
struct If : Template::Node {
  std::vector<std::pair<ExprPtr, Body>> branches;  // null condition: else
  void render(Ctx& c, std::string& out) const override;
};

struct For : Template::Node {
  std::vector<std::string> targets;
  ExprPtr iter, filter;
  Body body, otherwise;
  void render(Ctx& c, std::string& out) const override;
};
struct Set : Template::Node {
  std::vector<std::string> targets;
  std::string attr;  // set ns.attr = ...
  ExprPtr value;
  Body block;        // {% set x %}...{% endset %}
  void render(Ctx& c, std::string& out) const override;
};
struct Group : Template::Node {
  Body body;
  void render(Ctx& c, std::string& out) const override;
};
// {% filter f(args) | g %}...{% endfilter %}: the body's text through the filters.
struct FilterBlock : Template::Node {
  Body body;
  std::vector<std::pair<std::string, CallArgs>> filters;
  void render(Ctx& c, std::string& out) const override;
};
struct LoopControl : Template::Node {
  Flow flow;
  void render(Ctx& c, std::string&) const override;
};
struct Macro : Template::Node {
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // defaults may be null
  Body body;
  void render(Ctx& c, std::string&) const override;
};
struct Root : Template::Node {
  Body body;
  void render(Ctx& c, std::string& out) const override;
};

}  // namespace detail
}  // namespace sy::jinja
