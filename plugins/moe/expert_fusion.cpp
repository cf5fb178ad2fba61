// fuse-experts: Gather(stacked expert weights, indices) -> MatMul becomes
// ExpertMatMul (moe_plugin.h). The gathered copy must have no other reader
// (it dies with the rewrite); anything else about the pair that the op does
// not express leaves it as exported, with the reason logged.
#include <map>
#include <sstream>

#include "moe_plugin.h"

namespace sy_moe {

using sy::plugin::GraphReader;
using sy::plugin::GraphRef;

namespace {

using Dims = std::vector<int64_t>;

// Why a gather of a stacked constant feeding m.matmul cannot become an
// ExpertMatMul, shapes aside; empty when nothing else stands in the way.
std::string refusal(const GraphReader& g, const ExpertMatch& m, sy_value_id gathered, const sy::plugin::TensorView& w) {
  if (w.dtype() != SY_DTYPE_FLOAT32) return "the stacked weight is not float32";
  if (g.is(m.gather, "Gather") && g.attr_int(m.gather, "axis").value_or(0) != 0) return "the Gather is not on the expert axis (0)";
  if (g.is(m.gather, "GatherND")) {
    if (g.attr_int(m.gather, "batch_dims").value_or(0) != 0) return "GatherND with batch_dims";
    auto s = g.value_shape(m.experts);
    if (!s || s->empty() || s->back() != 1) return "GatherND's index tuples are not single expert indices";
  }
  if (g.use_count(gathered) != 1 || g.is_graph_output(gathered)) return "the gathered weights are read by another node too";
  return "";
}

// The op needs x to hold one matrix per gathered one: the same rank and
// leading dims (no broadcasting).
std::string shape_refusal(const Dims& xs, const Dims& gs) {
  if (xs.size() != gs.size() || xs.size() < 3) return "the operands' ranks differ (a broadcast MatMul)";
  for (size_t i = 0; i + 2 < xs.size(); ++i)
    if (xs[i] >= 0 && gs[i] >= 0 && xs[i] != gs[i]) return "the operands' entries differ (a broadcast MatMul)";
  return "";
}

}  // namespace

std::vector<ExpertMatch> find_expert_matmuls(const GraphReader& g) {
  std::vector<ExpertMatch> found;
  std::vector<std::pair<Dims, Dims>> shapes;  // x's and the gathered weights', as far as known
  std::vector<sy_value_id> unknown;           // values static inference left without a shape
  for (sy_node_id n = 0; n < g.node_count(); ++n) {
    if (!g.is(n, "MatMul") || g.input_count(n) != 2) continue;
    for (int side = 0; side < 2; ++side) {
      const sy_value_id gathered = g.input(n, side);
      const sy_node_id p = g.producer(gathered);
      if (p < 0 || !(g.is(p, "Gather") || g.is(p, "GatherND"))) continue;
      auto w = g.constant(g.input(p, 0));
      if (!w || w->rank() != 3) continue;  // not a stack of expert matrices
      ExpertMatch m;
      m.matmul = n;
      m.gather = p;
      m.weight = g.input(p, 0);
      m.experts = g.input(p, 1);
      m.x = g.input(n, 1 - side);
      m.columns = side == 0;  // weight @ x
      m.refusal = refusal(g, m, gathered, *w);
      auto xs = g.value_shape(m.x), gs = g.value_shape(gathered);
      if (!xs) unknown.push_back(m.x);
      if (!gs) unknown.push_back(gathered);
      shapes.emplace_back(xs.value_or(Dims{}), gs.value_or(Dims{}));
      found.push_back(m);
      break;
    }
  }
  // Exports often leave these shapes to Shape/Slice arithmetic that static
  // inference does not follow: evaluate them all on one synthetic decoder
  // step (the host's equivalence probe then checks each rewrite itself).
  std::map<sy_value_id, Dims> evaluated;
  std::string eval_error;
  if (!unknown.empty()) {
    try {
      auto v = g.evaluate(2, 3, 2, {}, unknown);
      for (size_t i = 0; i < unknown.size(); ++i) evaluated[unknown[i]] = v[i].dims();
    } catch (const std::exception& e) {
      eval_error = e.what();
    }
  }
  for (size_t i = 0; i < found.size(); ++i) {
    ExpertMatch& m = found[i];
    if (!m.refusal.empty()) continue;
    auto [xs, gs] = shapes[i];
    const sy_value_id gathered = g.output(m.gather, 0);
    for (auto [v, dims] : {std::pair{m.x, &xs}, std::pair{gathered, &gs}}) {
      if (!dims->empty()) continue;
      auto it = evaluated.find(v);
      if (it == evaluated.end()) {
        m.refusal = "the operands' shapes are unknown and could not be evaluated (" + eval_error + ")";
        break;
      }
      *dims = it->second;
    }
    if (m.refusal.empty()) m.refusal = shape_refusal(xs, gs);
  }
  return found;
}

bool ExpertFusionPass::run(GraphRef& g, const sy::plugin::Options&) {
  int fused = 0;
  std::ostringstream left;
  int left_count = 0;
  for (const ExpertMatch& m : find_expert_matmuls(g)) {
    if (!m.refusal.empty()) {
      left << (left_count++ ? "; " : "") << "'" << g.name(m.matmul) << "': " << m.refusal;
      continue;
    }
    const sy_value_id old_out = g.output(m.matmul, 0);
    std::vector<sy_value_id> outs;
    const sy_node_id f = g.add_node(kDomain, kOp, g.name(m.matmul) + "/ExpertMatMul", {m.x, m.experts, m.weight}, outs);
    g.set_attr(f, "columns", int64_t{m.columns});
    g.set_type(outs[0], SY_DTYPE_FLOAT32, g.value_shape(old_out));
    g.replace_all_uses(old_out, outs[0]);
    g.remove_node(m.matmul);
    if (g.use_count(g.output(m.gather, 0)) == 0) g.remove_node(m.gather);
    ++fused;
  }
  if (fused + left_count == 0) return false;
  sy::plugin::log(SY_LOG_INFO, "fuse-experts: " + std::to_string(fused) + " expert matmuls fused");
  if (left_count)
    sy::plugin::log(SY_LOG_WARNING, "fuse-experts: " + std::to_string(left_count) + " gathered expert matmuls left as exported: " + left.str());
  return fused > 0;
}

}  // namespace sy_moe
