// A Jinja2 interpreter for the subset Hugging Face chat templates use, with
// transformers' environment: trim_blocks and lstrip_blocks on, loop controls,
// its tojson, raise_exception and strftime_now. Statements: for (else,
// loop.*, tuple targets, inline if), if/elif/else, set (namespaces, block
// set), macro, break/continue, raw; whitespace control {%- -%}; expressions
// with Python semantics, filters and tests. Anything else fails at parse or
// render time with the template's name and line and the construct.
#pragma once
#include <memory>
#include <string>

#include "text/jinja_value.h"

namespace sy::jinja {

class Template {
 public:
  // Throws sy::Error "<name>:<line>: ..." for syntax it does not support.
  static Template parse(const std::string& source, const std::string& name = "template");
  // context: a dict of variables (messages, add_generation_prompt, ...).
  std::string render(const Value& context) const;

  struct Node;

 private:
  std::shared_ptr<const Node> root_;
  std::string name_;
};

}  // namespace sy::jinja
