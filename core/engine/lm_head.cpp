#include "engine/lm_head.h"

#include <algorithm>
#include <map>

#include "base/error.h"
#include "switchyard/plugin.h"

namespace sy {

std::unique_ptr<LmHead> LmHead::split_off(const Graph& g, const KernelRegistry& registry, ThreadPool* threads) {
  const std::optional<ValueId> indices = g.find_value("logits_indices");
  auto out = std::find_if(g.outputs.begin(), g.outputs.end(), [](const GraphOutput& o) { return o.name == "logits"; });
  if (!indices || out == g.outputs.end()) return nullptr;
  // The selected rows: the Gather the logits-selection pass put before the head.
  ValueId selected = kNoValue;
  for (const Node& n : g.nodes)
    if (!n.dead && n.op_type == "Gather" && n.domain.empty() && n.inputs.size() == 2 && n.inputs[1] == *indices) selected = n.outputs[0];
  if (selected == kNoValue) return nullptr;
  // The nodes from there to the logits, in the order they ran.
  const std::vector<NodeId> prod = g.producers();
  std::vector<NodeId> chain;
  for (ValueId v = out->value; v != selected;) {
    const NodeId p = prod[static_cast<size_t>(v)];
    if (p < 0) return nullptr;
    const Node& n = g.nodes[static_cast<size_t>(p)];
    ValueId next = kNoValue;
    for (ValueId in : n.inputs) {
      if (in == kNoValue || g.values[static_cast<size_t>(in)].constant) continue;
      if (next != kNoValue) return nullptr;  // more than one varying input: not a row-wise head
      next = in;
    }
    if (next == kNoValue || chain.size() == 8) return nullptr;
    chain.push_back(p);
    v = next;
  }
  std::reverse(chain.begin(), chain.end());

  auto head = std::make_unique<LmHead>();
  const Node& mm = g.nodes[static_cast<size_t>(chain.front())];
  if (mm.op_type == "MatMul" && mm.inputs.size() == 2 && g.values[static_cast<size_t>(mm.inputs[1])].constant) {
    const Tensor& w = *g.values[static_cast<size_t>(mm.inputs[1])].constant;
    if (w.rank() == 2) head->hidden_ = w.dim(0), head->vocab_ = w.dim(1);
  } else if ((mm.op_type == SY_OP_QMATMUL && mm.domain == SY_OP_DOMAIN) || (mm.op_type == SY_ORT_OP_MATMUL_NBITS && mm.domain == SY_ORT_DOMAIN)) {
    head->hidden_ = mm.attr_int("K", -1);
    head->vocab_ = mm.attr_int("N", -1);
  }

  // A graph of its own: the selected rows in, the same nodes sharing the
  // same weight tensors, `logits` out.
  auto sub = std::make_shared<Graph>();
  sub->opsets = g.opsets;
  std::map<ValueId, ValueId> mapped;
  Value in;
  in.name = "hidden_states";
  in.dtype = DType::F32;
  in.shape = std::vector<Dim>{Dim{1, {}}, Dim{-1, "rows"}, Dim{head->hidden_, {}}};
  in.is_graph_input = true;
  mapped[selected] = sub->add_value(in);
  sub->inputs.push_back(mapped[selected]);
  for (NodeId id : chain) {
    Node n = g.nodes[static_cast<size_t>(id)];
    for (ValueId& v : n.inputs) {
      if (v == kNoValue) continue;
      auto it = mapped.find(v);
      if (it != mapped.end()) {
        v = it->second;
        continue;
      }
      const Value& src = g.values[static_cast<size_t>(v)];
      SY_CHECK(src.constant, "LM head: node " << n.display_name() << " reads " << src.name << ", neither a weight nor the rows");
      v = mapped[v] = sub->add_constant(src.name, *src.constant);  // shares the target's tensor
    }
    for (ValueId& v : n.outputs) {
      Value o = g.values[static_cast<size_t>(v)];
      o.shape.reset();
      o.constant.reset();
      v = mapped[v] = sub->add_value(o);
    }
    sub->add_node(std::move(n));
  }
  sub->outputs.push_back(GraphOutput{"logits", mapped.at(out->value)});
  head->executor_ = std::make_unique<Executor>(sub, registry, threads);
  return head;
}

Tensor LmHead::project(const Tensor& rows) {
  SY_CHECK(rows.rank() == 2 && rows.dtype() == DType::F32, "LM head: rows must be float32 [n, hidden], got " << rows.shape().str());
  SY_CHECK(hidden_ < 0 || rows.dim(1) == hidden_, "LM head: rows of " << rows.dim(1) << " values; the model's hidden size is " << hidden_);
  const Tensor in = rows.reshaped(Shape{1, rows.dim(0), rows.dim(1)});
  std::vector<Tensor> out = executor_->run(std::span<const Tensor>(&in, 1));
  const Tensor& logits = out[0];
  SY_CHECK(logits.rank() == 3 && logits.dim(1) == rows.dim(0), "LM head: logits of shape " << logits.shape().str());
  return logits.reshaped(Shape{rows.dim(0), logits.dim(2)});
}

}  // namespace sy
