// Common-subexpression elimination. Torch exports repeat the same shape
// plumbing per use (four Shape(present.0.key) per layer, one Constant per
// Unsqueeze axis); merging them shrinks the per-step node count.
#include <unordered_map>

#include "passes/pass.h"

namespace sy {
namespace {

// Small constants are merged by content so nodes that read equal constants
// become equal themselves.
constexpr int64_t kMaxDedupElements = 64;

std::string constant_key(const Tensor& t) {
  std::string k = std::to_string(static_cast<int>(t.dtype())) + ":" + t.shape().str() + ":";
  k.append(static_cast<const char*>(t.raw()), t.bytes());
  return k;
}

std::string attribute_key(const Attribute& a) {
  std::ostringstream os;
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, Tensor>) os << "T" << constant_key(v);
        else if constexpr (std::is_same_v<T, std::vector<int64_t>> || std::is_same_v<T, std::vector<float>> ||
                           std::is_same_v<T, std::vector<std::string>>) {
          os << "L";
          for (const auto& e : v) os << e << ",";
        } else os << "S" << v;
      },
      a);
  return os.str();
}

class CsePass : public GraphPass {
 public:
  std::string name() const override { return "cse"; }
  bool run(Graph& g, PassContext&) override {
    bool changed = false;
    // 1. Equal small constants -> one value.
    std::unordered_map<std::string, ValueId> by_content;
    std::vector<ValueId> canon(g.values.size());
    for (size_t i = 0; i < g.values.size(); ++i) {
      canon[i] = static_cast<ValueId>(i);
      const Value& v = g.values[i];
      if (!v.constant || v.is_graph_input || v.constant->numel() > kMaxDedupElements) continue;
      auto [it, fresh] = by_content.emplace(constant_key(*v.constant), static_cast<ValueId>(i));
      if (!fresh) canon[i] = it->second;
    }
    for (Node& n : g.nodes) {
      if (n.dead) continue;
      for (ValueId& in : n.inputs)
        if (in != kNoValue && canon[static_cast<size_t>(in)] != in) {
          in = canon[static_cast<size_t>(in)];
          changed = true;
        }
    }
    // 2. Nodes with the same op, inputs and attributes -> the first one.
    std::unordered_map<std::string, NodeId> seen;
    for (NodeId nid : g.topological_order()) {
      Node& n = g.nodes[static_cast<size_t>(nid)];
      std::ostringstream key;
      key << n.domain << "|" << n.op_type << "|" << n.outputs.size() << "|";
      for (ValueId in : n.inputs) key << in << ",";
      for (const auto& [name, a] : n.attrs) key << "|" << name << "=" << attribute_key(a);
      auto [it, fresh] = seen.emplace(key.str(), nid);
      if (fresh) continue;
      const Node& first = g.nodes[static_cast<size_t>(it->second)];
      for (size_t i = 0; i < n.outputs.size(); ++i) {
        if (n.outputs[i] == kNoValue) continue;
        if (first.outputs[i] == kNoValue) goto keep;
      }
      for (size_t i = 0; i < n.outputs.size(); ++i)
        if (n.outputs[i] != kNoValue) g.replace_all_uses(n.outputs[i], first.outputs[i]);
      n.dead = true;
      changed = true;
    keep:;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<GraphPass> make_cse_pass() { return std::make_unique<CsePass>(); }

}  // namespace sy
