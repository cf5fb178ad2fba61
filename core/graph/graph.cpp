#include "graph/graph.h"

#include <algorithm>
#include <sstream>
#include <unordered_set>

namespace sy {

bool Value::has_static_shape() const {
  if (!shape) return false;
  for (const Dim& d : *shape)
    if (!d.is_static()) return false;
  return true;
}

std::string Value::shape_str() const {
  if (!shape) return "?";
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape->size(); ++i) os << (i ? "," : "") << (*shape)[i].str();
  os << ']';
  return os.str();
}

const Attribute* Node::attr(const std::string& key) const {
  auto it = attrs.find(key);
  return it == attrs.end() ? nullptr : &it->second;
}

int64_t Node::attr_int(const std::string& key, int64_t fallback) const {
  const Attribute* a = attr(key);
  if (!a) return fallback;
  if (auto* v = std::get_if<int64_t>(a)) return *v;
  SY_THROW(display_name() << ": attribute '" << key << "' is not an int");
}

float Node::attr_float(const std::string& key, float fallback) const {
  const Attribute* a = attr(key);
  if (!a) return fallback;
  if (auto* v = std::get_if<float>(a)) return *v;
  SY_THROW(display_name() << ": attribute '" << key << "' is not a float");
}

std::string Node::attr_string(const std::string& key, const std::string& fallback) const {
  const Attribute* a = attr(key);
  if (!a) return fallback;
  if (auto* v = std::get_if<std::string>(a)) return *v;
  SY_THROW(display_name() << ": attribute '" << key << "' is not a string");
}

std::optional<std::vector<int64_t>> Node::attr_ints(const std::string& key) const {
  const Attribute* a = attr(key);
  if (!a) return std::nullopt;
  if (auto* v = std::get_if<std::vector<int64_t>>(a)) return *v;
  SY_THROW(display_name() << ": attribute '" << key << "' is not a list of ints");
}

std::string Node::display_name() const {
  std::string op = domain.empty() ? op_type : domain + "::" + op_type;
  return name.empty() ? op : op + " '" + name + "'";
}

ValueId Graph::add_value(Value v) {
  values.push_back(std::move(v));
  return static_cast<ValueId>(values.size() - 1);
}

ValueId Graph::add_constant(const std::string& name_hint, Tensor t) {
  Value v;
  v.name = unique_name(name_hint);
  v.dtype = t.dtype();
  std::vector<Dim> dims;
  for (int64_t d : t.shape()) dims.push_back(Dim{d, {}});
  v.shape = dims;
  v.constant = std::move(t);
  return add_value(std::move(v));
}

NodeId Graph::add_node(Node n) {
  nodes.push_back(std::move(n));
  return static_cast<NodeId>(nodes.size() - 1);
}

void Graph::replace_all_uses(ValueId from, ValueId to) {
  for (Node& n : nodes) {
    if (n.dead) continue;
    for (ValueId& in : n.inputs)
      if (in == from) in = to;
  }
  for (GraphOutput& o : outputs)
    if (o.value == from) o.value = to;
}

std::vector<NodeId> Graph::producers() const {
  std::vector<NodeId> p(values.size(), -1);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].dead) continue;
    for (ValueId o : nodes[i].outputs)
      if (o != kNoValue) p[static_cast<size_t>(o)] = static_cast<NodeId>(i);
  }
  return p;
}

std::vector<int> Graph::use_counts() const {
  std::vector<int> uses(values.size(), 0);
  for (const Node& n : nodes) {
    if (n.dead) continue;
    for (ValueId in : n.inputs)
      if (in != kNoValue) ++uses[static_cast<size_t>(in)];
  }
  for (const GraphOutput& o : outputs) ++uses[static_cast<size_t>(o.value)];
  return uses;
}

std::vector<NodeId> Graph::topological_order() const {
  std::vector<NodeId> prod = producers();
  std::vector<int> missing(nodes.size(), 0);
  std::vector<std::vector<NodeId>> consumers(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].dead) continue;
    std::unordered_set<NodeId> deps;
    for (ValueId in : nodes[i].inputs) {
      if (in == kNoValue) continue;
      const Value& v = values[static_cast<size_t>(in)];
      NodeId p = prod[static_cast<size_t>(in)];
      if (p < 0) {
        SY_CHECK(v.constant || v.is_graph_input,
                 nodes[i].display_name() << " reads '" << v.name
                                         << "', which is neither a graph input, an initializer nor a node output");
        continue;
      }
      if (deps.insert(p).second) consumers[static_cast<size_t>(p)].push_back(static_cast<NodeId>(i));
    }
    missing[i] = static_cast<int>(deps.size());
  }
  // Kahn's algorithm, seeded in file order so the plan follows the exporter's order.
  std::vector<NodeId> order, ready;
  for (size_t i = nodes.size(); i-- > 0;)
    if (!nodes[i].dead && missing[i] == 0) ready.push_back(static_cast<NodeId>(i));
  while (!ready.empty()) {
    NodeId n = ready.back();
    ready.pop_back();
    order.push_back(n);
    auto& cs = consumers[static_cast<size_t>(n)];
    for (auto it = cs.rbegin(); it != cs.rend(); ++it)
      if (--missing[static_cast<size_t>(*it)] == 0) ready.push_back(*it);
  }
  SY_CHECK(order.size() == live_node_count(), "the graph has a cycle");
  return order;
}

void Graph::compact() {
  std::vector<int> uses(values.size(), 0);
  std::vector<bool> keep(values.size(), false);
  for (const Node& n : nodes) {
    if (n.dead) continue;
    for (ValueId v : n.inputs)
      if (v != kNoValue) keep[static_cast<size_t>(v)] = true;
    for (ValueId v : n.outputs)
      if (v != kNoValue) keep[static_cast<size_t>(v)] = true;
  }
  for (ValueId v : inputs) keep[static_cast<size_t>(v)] = true;
  for (const GraphOutput& o : outputs) keep[static_cast<size_t>(o.value)] = true;

  std::vector<ValueId> remap(values.size(), kNoValue);
  std::vector<Value> new_values;
  for (size_t i = 0; i < values.size(); ++i) {
    if (!keep[i]) continue;
    remap[i] = static_cast<ValueId>(new_values.size());
    new_values.push_back(std::move(values[i]));
  }
  auto fix = [&](ValueId& v) {
    if (v != kNoValue) v = remap[static_cast<size_t>(v)];
  };
  std::vector<Node> new_nodes;
  for (Node& n : nodes) {
    if (n.dead) continue;
    for (ValueId& v : n.inputs) fix(v);
    for (ValueId& v : n.outputs) fix(v);
    new_nodes.push_back(std::move(n));
  }
  for (ValueId& v : inputs) fix(v);
  for (GraphOutput& o : outputs) fix(o.value);
  values = std::move(new_values);
  nodes = std::move(new_nodes);
}

std::optional<ValueId> Graph::find_value(const std::string& name) const {
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].name == name) return static_cast<ValueId>(i);
  return std::nullopt;
}

int64_t Graph::opset(const std::string& domain) const {
  auto it = opsets.find(domain == "ai.onnx" ? "" : domain);
  return it == opsets.end() ? 0 : it->second;
}

size_t Graph::live_node_count() const {
  return static_cast<size_t>(std::count_if(nodes.begin(), nodes.end(), [](const Node& n) { return !n.dead; }));
}

std::map<std::string, int> Graph::op_counts() const {
  std::map<std::string, int> counts;
  for (const Node& n : nodes)
    if (!n.dead) ++counts[n.domain.empty() ? n.op_type : n.domain + "::" + n.op_type];
  return counts;
}

std::string Graph::unique_name(const std::string& hint) {
  return hint + "__sy" + std::to_string(name_counter_++);
}

}  // namespace sy
