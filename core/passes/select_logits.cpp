// Logits selection for the step engine: a prefill chunk needs the logits of
// its last token only (a verification step, of its drafted positions), yet
// the exported graph multiplies every token by the LM head, often the
// largest matrix in the model. This pass gathers the selected rows first:
//   logits = MatMul(x, W)  ->  logits = MatMul(Gather(x, logits_indices, axis=1), W)
// with a new int64 graph input `logits_indices` that the engine fills per
// step. Weight-only quantized heads (com.microsoft::MatMulNBits and its
// switchyard::QMatMul twin: row-wise, constant weights) are handled alike.
// Graphs whose logits come from anything else are left alone (the engine then
// selects rows after the fact).
#include <algorithm>

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

class SelectLogitsPass : public GraphPass {
 public:
  std::string name() const override { return "logits-selection"; }
  bool run(Graph& g, PassContext&) override {
    if (g.find_value("logits_indices")) return false;
    auto out = std::find_if(g.outputs.begin(), g.outputs.end(), [](const GraphOutput& o) { return o.name == "logits"; });
    if (out == g.outputs.end()) return false;
    std::vector<NodeId> prod = g.producers();
    NodeId mm = prod[static_cast<size_t>(out->value)];
    if (mm < 0) return false;
    const Node head = g.nodes[static_cast<size_t>(mm)];
    if (!is_row_wise_head(g, head)) return false;
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

    Value logits;
    logits.name = g.unique_name("selected_logits");
    logits.dtype = DType::F32;
    const Value& old = g.values[static_cast<size_t>(out->value)];
    if (old.shape && old.shape->size() == 3)
      logits.shape = std::vector<Dim>{(*old.shape)[0], Dim{-1, "selected_tokens"}, (*old.shape)[2]};
    ValueId lg = g.add_value(logits);
    Node matmul = head;  // same op, weights and attributes, on the selected rows
    matmul.name = g.unique_name("select_logits_matmul");
    matmul.inputs[0] = sel;
    matmul.outputs = {lg};
    g.add_node(std::move(matmul));
    out->value = lg;  // the old head has no reader left: dead-node elimination drops it
    return true;
  }
};

}  // namespace

std::unique_ptr<GraphPass> make_select_logits_pass() { return std::make_unique<SelectLogitsPass>(); }

}  // namespace sy
