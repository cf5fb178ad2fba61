// Replaces shape arithmetic with constants where the symbolic shapes (from
// the model and ONNX shape inference) make a dimension static: Shape(x) of a
// fully static x, and Gather(Shape(x), i) of a static dimension i. Constant
// folding then collapses whatever was computed from them.
#include "passes/pass.h"

namespace sy {
namespace {

class ShapeFoldingPass : public GraphPass {
 public:
  std::string name() const override { return "shape-folding"; }
  bool run(Graph& g, PassContext&) override {
    bool changed = false;
    std::vector<NodeId> prod = g.producers();
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      Node& n = g.nodes[i];
      if (n.dead || !n.domain.empty()) continue;
      // Models newer than the ONNX schemas skip the checker: arity is not guaranteed.
      if (n.inputs.empty() || n.inputs[0] == kNoValue || n.outputs.size() != 1 || n.outputs[0] == kNoValue) continue;
      if (n.op_type == "Shape") {
        const Value& x = g.values[static_cast<size_t>(n.inputs[0])];
        if (!x.has_static_shape()) continue;
        int64_t r = static_cast<int64_t>(x.shape->size());
        auto clampi = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + r : v, 0, r); };
        int64_t b = clampi(n.attr_int("start", 0)), e = clampi(n.attr_int("end", r));
        std::vector<int64_t> dims;
        for (int64_t d = b; d < e; ++d) dims.push_back((*x.shape)[static_cast<size_t>(d)].value);
        fold(g, n, Tensor::from<int64_t>(Shape{static_cast<int64_t>(dims.size())}, std::span<const int64_t>(dims)));
        changed = true;
      } else if (n.op_type == "Gather" && n.inputs.size() == 2 && n.inputs[1] != kNoValue) {
        NodeId p = prod[static_cast<size_t>(n.inputs[0])];
        const Value& idx = g.values[static_cast<size_t>(n.inputs[1])];
        if (p < 0 || !idx.constant || idx.constant->numel() != 1) continue;
        const Node& shape_node = g.nodes[static_cast<size_t>(p)];
        if (shape_node.op_type != "Shape" || !shape_node.domain.empty() || shape_node.attr("start") || shape_node.attr("end") ||
            shape_node.inputs.empty() || shape_node.inputs[0] == kNoValue)
          continue;
        const Value& x = g.values[static_cast<size_t>(shape_node.inputs[0])];
        if (!x.shape) continue;
        int64_t r = static_cast<int64_t>(x.shape->size());
        int64_t k = idx.constant->to_int64_vector()[0];
        if (k < 0) k += r;
        if (k < 0 || k >= r || !(*x.shape)[static_cast<size_t>(k)].is_static()) continue;
        int64_t dim = (*x.shape)[static_cast<size_t>(k)].value;
        Tensor t = idx.constant->rank() == 0 ? Tensor::from<int64_t>(Shape{}, {dim}) : Tensor::from<int64_t>(Shape{1}, {dim});
        fold(g, n, std::move(t));
        changed = true;
      }
    }
    return changed;
  }

 private:
  static void fold(Graph& g, Node& n, Tensor t) {
    ValueId out = n.outputs[0];
    Value& v = g.values[static_cast<size_t>(out)];
    v.dtype = t.dtype();
    std::vector<Dim> dims;
    for (int64_t d : t.shape()) dims.push_back(Dim{d, {}});
    v.shape = dims;
    v.constant = std::move(t);
    n.dead = true;
  }
};

}  // namespace

std::unique_ptr<GraphPass> make_shape_folding_pass() { return std::make_unique<ShapeFoldingPass>(); }

}  // namespace sy
