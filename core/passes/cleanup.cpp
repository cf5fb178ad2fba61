// Identity elimination and dead-node removal.
#include "kernels/kernel_util.h"
#include "passes/pass.h"

namespace sy {
namespace {

// Nodes that provably return their input unchanged: Identity, Dropout
// (inference), Cast to the same type, a Concat of one input, Expand/Tile/
// Reshape that do not change a statically known shape.
bool is_noop(const Graph& g, const Node& n) {
  if (!n.domain.empty() || n.inputs.empty() || n.inputs[0] == kNoValue || n.outputs.empty() || n.outputs[0] == kNoValue) return false;
  const Value& x = g.values[static_cast<size_t>(n.inputs[0])];
  auto const_input = [&](size_t i) -> const Tensor* {
    if (i >= n.inputs.size() || n.inputs[i] == kNoValue) return nullptr;
    const Value& v = g.values[static_cast<size_t>(n.inputs[i])];
    return v.constant ? &*v.constant : nullptr;
  };
  if (n.op_type == "Identity") return true;
  if (n.op_type == "Concat") return n.inputs.size() == 1;  // TorchScript exports of a DynamicCache
  if (n.op_type == "Dropout") return n.outputs.size() == 1 || n.outputs[1] == kNoValue;
  if (n.op_type == "Cast") return x.dtype != DType::Undefined && static_cast<int64_t>(x.dtype) == n.attr_int("to", -1);
  if (n.op_type == "Tile") {
    const Tensor* reps = const_input(1);
    if (!reps) return false;
    for (int64_t r : reps->to_int64_vector())
      if (r != 1) return false;
    return true;
  }
  if (n.op_type == "Expand") {
    // Expanding to all-ones of no greater rank never changes the tensor.
    const Tensor* shape = const_input(1);
    if (!shape || !x.shape) return false;
    auto s = shape->to_int64_vector();
    if (s.size() > x.shape->size()) return false;
    for (int64_t d : s)
      if (d != 1) return false;
    return true;
  }
  if (n.op_type == "Reshape") {
    const Tensor* shape = const_input(1);
    if (!shape || !x.has_static_shape()) return false;
    auto s = shape->to_int64_vector();
    if (s.size() != x.shape->size()) return false;
    for (size_t i = 0; i < s.size(); ++i)
      if (s[i] != (*x.shape)[i].value) return false;
    return true;
  }
  return false;
}

class IdentityEliminationPass : public GraphPass {
 public:
  std::string name() const override { return "identity-elimination"; }
  bool run(Graph& g, PassContext&) override {
    bool changed = false;
    for (Node& n : g.nodes) {
      if (n.dead || !is_noop(g, n)) continue;
      g.replace_all_uses(n.outputs[0], n.inputs[0]);
      n.dead = true;
      changed = true;
    }
    return changed;
  }
};

class DeadNodeEliminationPass : public GraphPass {
 public:
  std::string name() const override { return "dead-node-elimination"; }
  bool run(Graph& g, PassContext&) override {
    std::vector<int> uses = g.use_counts();
    std::vector<NodeId> order = g.topological_order();
    bool changed = false;
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      Node& n = g.nodes[static_cast<size_t>(*it)];
      bool used = false;
      for (ValueId o : n.outputs)
        if (o != kNoValue && uses[static_cast<size_t>(o)] > 0) used = true;
      if (used) continue;
      n.dead = true;
      changed = true;
      for (ValueId in : n.inputs)
        if (in != kNoValue) --uses[static_cast<size_t>(in)];
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<GraphPass> make_identity_elimination_pass() { return std::make_unique<IdentityEliminationPass>(); }
std::unique_ptr<GraphPass> make_dead_node_elimination_pass() { return std::make_unique<DeadNodeEliminationPass>(); }

size_t simplify_graph(Graph& g, PassContext& ctx) {
  size_t before = g.live_node_count();
  std::vector<std::unique_ptr<GraphPass>> passes;
  passes.push_back(make_constant_folding_pass());
  passes.push_back(make_shape_folding_pass());
  passes.push_back(make_identity_elimination_pass());
  passes.push_back(make_cse_pass());
  passes.push_back(make_dead_node_elimination_pass());
  for (int round = 0; round < 16; ++round) {
    bool changed = false;
    for (auto& p : passes) changed = p->run(g, ctx) || changed;
    if (!changed) break;
  }
  g.compact();
  return before - g.live_node_count();
}

}  // namespace sy
