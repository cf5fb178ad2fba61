// Replaces shape arithmetic with constants where the symbolic shapes (from
// the model and ONNX shape inference) make a dimension static: Shape(x) of a
// fully static x, Gather(Shape(x), i) of a static dimension i, and
// Slice(Shape(x)) of static dimensions (a head size read as shape[-1:]).
// Constant folding then collapses whatever was computed from them.
#include <algorithm>
#include <optional>

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
      } else if (n.op_type == "Slice" && n.inputs.size() >= 3) {
        if (auto dims = sliced_static_dims(g, n, prod)) {
          fold(g, n, Tensor::from<int64_t>(Shape{static_cast<int64_t>(dims->size())}, std::span<const int64_t>(*dims)));
          changed = true;
        }
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
  // The dims Slice(Shape(x), starts, ends[, axes, steps]) selects, when all
  // its operands are constants and every selected dim of x is static.
  static std::optional<std::vector<int64_t>> sliced_static_dims(const Graph& g, const Node& n, const std::vector<NodeId>& prod) {
    NodeId p = prod[static_cast<size_t>(n.inputs[0])];
    if (p < 0) return std::nullopt;
    const Node& sn = g.nodes[static_cast<size_t>(p)];
    if (sn.op_type != "Shape" || !sn.domain.empty() || sn.attr("start") || sn.attr("end") || sn.inputs.empty() || sn.inputs[0] == kNoValue)
      return std::nullopt;
    const Value& x = g.values[static_cast<size_t>(sn.inputs[0])];
    if (!x.shape) return std::nullopt;
    std::vector<std::vector<int64_t>> args;
    for (size_t i = 1; i < n.inputs.size(); ++i) {
      if (n.inputs[i] == kNoValue) {
        args.emplace_back();
        continue;
      }
      const Value& v = g.values[static_cast<size_t>(n.inputs[i])];
      if (!v.constant) return std::nullopt;
      args.push_back(v.constant->to_int64_vector());
    }
    if (args[0].size() != 1 || args[1].size() != 1) return std::nullopt;
    if (args.size() > 2 && !args[2].empty() && (args[2].size() != 1 || (args[2][0] != 0 && args[2][0] != -1))) return std::nullopt;
    const int64_t step = args.size() > 3 && !args[3].empty() ? args[3][0] : 1;
    if (step != 1) return std::nullopt;
    const auto r = static_cast<int64_t>(x.shape->size());
    auto clampi = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + r : v, 0, r); };
    std::vector<int64_t> dims;
    for (int64_t d = clampi(args[0][0]); d < clampi(args[1][0]); ++d) {
      const Dim& dim = (*x.shape)[static_cast<size_t>(d)];
      if (!dim.is_static()) return std::nullopt;
      dims.push_back(dim.value);
    }
    return dims;
  }

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
