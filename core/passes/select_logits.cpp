// Logits selection for the step engine: a prefill chunk needs the logits of
// its last token only (a verification step, of its drafted positions), yet
// the exported graph multiplies every token by the LM head, often the
// largest matrix in the model. This pass gathers the selected rows first:
//   logits = MatMul(x, W)  ->  logits = MatMul(Gather(x, logits_indices, axis=1), W)
// with a new int64 graph input `logits_indices` that the engine fills per
// step. Weight-only quantized heads (com.microsoft::MatMulNBits and its
// switchyard::QMatMul twin: row-wise, constant weights) are handled alike.
// An elementwise tail by scalar constants after the head (Gemma 2's logit
// soft-capping) runs on the selected rows too. Graphs whose logits come from
// anything else are left alone (the engine then selects rows after the fact).
//
// The head's input (every token's final hidden state, after the last norm) is
// also a graph output, `switchyard.hidden_states`: what the embeddings endpoint pools.
// It is computed either way; the output only keeps it (tokens x hidden).
#include <algorithm>
#include <optional>

#include "passes/pass.h"
#include "switchyard/plugin.h"

namespace sy {
namespace {

// Each output row depends on the same input row only, through constant weights.
bool is_row_wise_head(const Graph& g, const Node& head) {
  auto constant = [&](size_t i) { return i < head.inputs.size() && head.inputs[i] != kNoValue && g.values[static_cast<size_t>(head.inputs[i])].constant; };
  if (head.op_type == "MatMul" && head.domain.empty())
    return head.inputs.size() == 2 && constant(1) && g.values[static_cast<size_t>(head.inputs[1])].constant->rank() == 2;
  const bool quantized = (head.op_type == SY_ORT_OP_MATMUL_NBITS && head.domain == SY_ORT_DOMAIN) ||
                         (head.op_type == SY_OP_QMATMUL && head.domain == SY_OP_DOMAIN);
  if (!quantized || head.outputs.size() != 1) return false;
  for (size_t i = 1; i < head.inputs.size(); ++i)
    if (head.inputs[i] != kNoValue && !constant(i)) return false;
  return true;
}

// A node of the elementwise tail some models put after the head (Gemma 2's
// soft-capping: Div, Tanh, Mul by scalar constants): row-wise, so it may run
// on the selected rows as well. Returns the index of its one non-constant
// input, or -1 when the node is not such a step.
int tail_input(const Graph& g, const Node& n) {
  static const char* ops[] = {"Mul", "Div", "Add", "Sub", "Tanh"};
  if (!n.domain.empty() || n.outputs.size() != 1 || std::none_of(std::begin(ops), std::end(ops), [&](const char* o) { return n.op_type == o; }))
    return -1;
  int variable = -1;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const auto& c = g.values[static_cast<size_t>(n.inputs[i])].constant;
    if (c && c->numel() == 1) continue;  // a scalar broadcasts the same to every row
    if (variable >= 0) return -1;
    variable = static_cast<int>(i);
  }
  return variable;
}

class SelectLogitsPass : public GraphPass {
 public:
  std::string name() const override { return "logits-selection"; }
  bool run(Graph& g, PassContext&) override {
    if (g.find_value("logits_indices")) return false;
    auto out = std::find_if(g.outputs.begin(), g.outputs.end(), [](const GraphOutput& o) { return o.name == "logits"; });
    if (out == g.outputs.end()) return false;
    std::vector<NodeId> prod = g.producers();
    // From the logits back through the tail (at most a few steps) to the head.
    std::vector<std::pair<Node, int>> tail;  // outermost first, with its variable input
    NodeId mm = prod[static_cast<size_t>(out->value)];
    while (mm >= 0 && !is_row_wise_head(g, g.nodes[static_cast<size_t>(mm)])) {
      const Node& n = g.nodes[static_cast<size_t>(mm)];
      const int in = tail_input(g, n);
      if (in < 0 || tail.size() == 4) return false;
      tail.emplace_back(n, in);
      mm = prod[static_cast<size_t>(n.inputs[static_cast<size_t>(in)])];
    }
    if (mm < 0) return false;
    const Node head = g.nodes[static_cast<size_t>(mm)];
    ValueId x = head.inputs[0];

    Value idx;
    idx.name = "logits_indices";
    idx.dtype = DType::I64;
    idx.shape = std::vector<Dim>{Dim{-1, "selected_tokens"}};
    idx.is_graph_input = true;
    ValueId idx_id = g.add_value(idx);
    g.inputs.push_back(idx_id);

    Value selected;
    selected.name = g.unique_name("selected_hidden");
    selected.dtype = DType::F32;
    ValueId sel = g.add_value(selected);
    Node gather;
    gather.name = g.unique_name("select_logits_gather");
    gather.op_type = "Gather";
    gather.inputs = {x, idx_id};
    gather.outputs = {sel};
    gather.attrs["axis"] = int64_t{1};
    g.add_node(std::move(gather));

    // The head, then the tail, again on the selected rows (same ops, weights
    // and attributes); the old ones have no reader left and dead-node
    // elimination drops them.
    const Value& old = g.values[static_cast<size_t>(out->value)];
    std::optional<std::vector<Dim>> shape;
    if (old.shape && old.shape->size() == 3) shape = std::vector<Dim>{(*old.shape)[0], Dim{-1, "selected_tokens"}, (*old.shape)[2]};
    auto clone = [&](Node n, size_t input, ValueId from, const char* name) {
      Value v;
      v.name = g.unique_name(name);
      v.dtype = DType::F32;
      v.shape = shape;
      const ValueId id = g.add_value(v);
      n.name = g.unique_name(std::string(name) + "_node");
      n.inputs[input] = from;
      n.outputs = {id};
      g.add_node(std::move(n));
      return id;
    };
    ValueId lg = clone(head, 0, sel, "selected_logits");
    for (auto it = tail.rbegin(); it != tail.rend(); ++it) lg = clone(it->first, static_cast<size_t>(it->second), lg, "selected_logits_tail");
    out->value = lg;
    g.outputs.push_back(GraphOutput{kHiddenStates, x});
    return true;
  }
};

}  // namespace

std::unique_ptr<GraphPass> make_select_logits_pass() { return std::make_unique<SelectLogitsPass>(); }

}  // namespace sy
