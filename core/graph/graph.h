// The graph IR: what ONNX import produces, what passes rewrite and what the
// executor plans. Values and nodes live in flat vectors addressed by index;
// removal marks a node dead and compact() drops dead nodes and unused values.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "base/tensor.h"

namespace sy {

using ValueId = int32_t;
using NodeId = int32_t;
constexpr ValueId kNoValue = -1;

// One dimension of a symbolic shape: a fixed size or a named symbol
// ("batch_size", "past_sequence_length + sequence_length").
struct Dim {
  int64_t value = -1;  // >= 0 when known
  std::string symbol;  // set when value < 0 and the exporter named it
  bool is_static() const { return value >= 0; }
  std::string str() const { return is_static() ? std::to_string(value) : (symbol.empty() ? "?" : symbol); }
};

struct Value {
  std::string name;
  DType dtype = DType::Undefined;
  std::optional<std::vector<Dim>> shape;  // nullopt: rank unknown
  std::optional<Tensor> constant;         // initializers and folded constants
  bool is_graph_input = false;

  bool has_static_shape() const;
  std::string shape_str() const;
};

using Attribute = std::variant<int64_t, float, std::string, std::vector<int64_t>, std::vector<float>,
                               std::vector<std::string>, Tensor>;

struct Node {
  std::string name;
  std::string domain;  // "" is the default ONNX domain
  std::string op_type;
  std::vector<ValueId> inputs;  // kNoValue for an omitted optional input
  std::vector<ValueId> outputs;
  std::map<std::string, Attribute> attrs;
  bool dead = false;

  const Attribute* attr(const std::string& key) const;
  int64_t attr_int(const std::string& key, int64_t fallback) const;
  float attr_float(const std::string& key, float fallback) const;
  std::string attr_string(const std::string& key, const std::string& fallback) const;
  std::optional<std::vector<int64_t>> attr_ints(const std::string& key) const;
  std::string display_name() const;  // "op_type 'name'" for error messages
};

struct GraphOutput {
  std::string name;  // the name users ask for ("logits", "present.0.key")
  ValueId value;
};

class Graph {
 public:
  std::vector<Value> values;
  std::vector<Node> nodes;
  std::vector<ValueId> inputs;       // runtime inputs, in declaration order
  std::vector<GraphOutput> outputs;  // in declaration order
  std::map<std::string, int64_t> opsets;  // domain -> version
  std::map<std::string, std::string> metadata;

  ValueId add_value(Value v);
  ValueId add_constant(const std::string& name_hint, Tensor t);
  NodeId add_node(Node n);
  void remove_node(NodeId id) { nodes[static_cast<size_t>(id)].dead = true; }

  // Point every consumer (and graph output) of `from` at `to`.
  void replace_all_uses(ValueId from, ValueId to);

  // Producer node of each value (-1 for inputs/constants), over live nodes.
  std::vector<NodeId> producers() const;
  // Number of live node inputs and graph outputs that read each value.
  std::vector<int> use_counts() const;
  // Live nodes in an order where producers come before consumers. Throws on
  // a cycle or a value that nothing produces.
  std::vector<NodeId> topological_order() const;

  // Drop dead nodes and values nothing refers to; renumbers ids.
  void compact();

  std::optional<ValueId> find_value(const std::string& name) const;
  int64_t opset(const std::string& domain) const;
  size_t live_node_count() const;
  std::map<std::string, int> op_counts() const;  // "Domain::Op" or "Op" -> count
  std::string unique_name(const std::string& hint);

 private:
  int name_counter_ = 0;
};

}  // namespace sy
