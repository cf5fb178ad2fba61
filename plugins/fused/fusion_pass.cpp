// Pattern matching for the fused ops of fused_plugin.h. Every intermediate of
// a matched chain must have no other reader (else the rewrite would still
// need it and nothing is saved); a chain that does not match exactly is left
// alone.
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "fused_plugin.h"

namespace sy_fused {
namespace {

using sy::plugin::GraphRef;

std::optional<float> scalar(const GraphRef& g, sy_value_id v) {
  auto t = g.constant(v);
  if (!t || t->numel() != 1 || t->dtype() != SY_DTYPE_FLOAT32) return std::nullopt;
  return t->data<float>()[0];
}

// The node producing v if it is `op` and v has exactly one reader.
sy_node_id single_use_producer(const GraphRef& g, sy_value_id v, const char* op) {
  sy_node_id n = g.producer(v);
  if (n < 0 || g.op_type(n) != op || !g.domain(n).empty() || g.use_count(v) != 1 || g.is_graph_output(v)) return -1;
  return n;
}

struct RmsMatch {
  sy_value_id x, weight, out;
  float eps;
  std::vector<sy_node_id> nodes;
};

// Mul(Mul(x, Div(1, Sqrt(Add(ReduceMean(Pow(x, 2)), eps)))), weight), either operand order.
std::optional<RmsMatch> match_rmsnorm(const GraphRef& g, sy_node_id last) {
  if (g.op_type(last) != "Mul" || !g.domain(last).empty() || g.input_count(last) != 2) return std::nullopt;
  for (int wi = 0; wi < 2; ++wi) {
    sy_value_id weight = g.input(last, wi), normed = g.input(last, 1 - wi);
    auto wt = g.constant(weight);
    if (!wt || wt->dtype() != SY_DTYPE_FLOAT32 || wt->rank() != 1) continue;
    sy_node_id mul = single_use_producer(g, normed, "Mul");
    if (mul < 0) continue;
    for (int xi = 0; xi < 2; ++xi) {
      sy_value_id x = g.input(mul, xi), inv = g.input(mul, 1 - xi);
      sy_node_id div = single_use_producer(g, inv, "Div");
      if (div < 0 || scalar(g, g.input(div, 0)) != 1.0f) continue;
      sy_node_id sqrt = single_use_producer(g, g.input(div, 1), "Sqrt");
      if (sqrt < 0) continue;
      sy_node_id add = single_use_producer(g, g.input(sqrt, 0), "Add");
      if (add < 0) continue;
      for (int ei = 0; ei < 2; ++ei) {
        auto eps = scalar(g, g.input(add, ei));
        sy_node_id mean = eps ? single_use_producer(g, g.input(add, 1 - ei), "ReduceMean") : -1;
        if (mean < 0 || g.attr_int(mean, "keepdims").value_or(1) != 1 || g.input_count(mean) != 1) continue;
        auto axes = g.attr_ints(mean, "axes");
        auto shape = g.value_shape(x);
        if (!axes || axes->size() != 1 || !shape || ((*axes)[0] != -1 && (*axes)[0] != static_cast<int64_t>(shape->size()) - 1))
          continue;
        if (shape->empty() || shape->back() != wt->numel()) continue;
        sy_node_id pow = single_use_producer(g, g.input(mean, 0), "Pow");
        if (pow < 0 || g.input(pow, 0) != x || scalar(g, g.input(pow, 1)) != 2.0f) continue;
        return RmsMatch{x, weight, g.output(last, 0), *eps, {last, mul, div, sqrt, add, mean, pow}};
      }
    }
  }
  return std::nullopt;
}

struct SiluMatch {
  sy_value_id gate, up, out;
  std::vector<sy_node_id> nodes;
};

// Mul(Mul(g, Sigmoid(g)), up), either operand order.
std::optional<SiluMatch> match_silu_mul(const GraphRef& g, sy_node_id last) {
  if (g.op_type(last) != "Mul" || !g.domain(last).empty() || g.input_count(last) != 2) return std::nullopt;
  for (int ui = 0; ui < 2; ++ui) {
    sy_value_id up = g.input(last, ui);
    sy_node_id mul = single_use_producer(g, g.input(last, 1 - ui), "Mul");
    if (mul < 0 || g.constant(up)) continue;
    for (int gi = 0; gi < 2; ++gi) {
      sy_value_id gate = g.input(mul, gi);
      sy_node_id sig = single_use_producer(g, g.input(mul, 1 - gi), "Sigmoid");
      if (sig < 0 || g.input(sig, 0) != gate) continue;
      auto gs = g.value_shape(gate), us = g.value_shape(up);
      if (!gs || !us || *gs != *us) continue;  // same static-or-symbolic shape: no broadcasting
      return SiluMatch{gate, up, g.output(last, 0), {last, mul, sig}};
    }
  }
  return std::nullopt;
}

void replace(GraphRef& g, const char* op, const std::string& name, const std::vector<sy_value_id>& inputs, sy_value_id old_out,
             const std::vector<sy_node_id>& dead, const std::function<void(sy_node_id)>& attrs) {
  std::vector<sy_value_id> outs;
  sy_node_id n = g.add_node(kDomain, op, name, inputs, outs);
  attrs(n);
  g.set_type(outs[0], SY_DTYPE_FLOAT32, g.value_shape(old_out));
  g.replace_all_uses(old_out, outs[0]);
  for (sy_node_id d : dead) g.remove_node(d);
}

}  // namespace

bool FusionPass::run(GraphRef& g, const sy::plugin::Options& options) {
  const bool rms = options.get_bool("rmsnorm"), silu = options.get_bool("silu_mul");
  int rms_count = 0, silu_count = 0;
  const int32_t count = g.node_count();
  for (sy_node_id n = 0; n < count; ++n) {
    if (g.op_type(n) != "Mul") continue;  // removed nodes report ""
    if (rms) {
      if (auto m = match_rmsnorm(g, n)) {
        replace(g, "RMSNorm", g.name(n) + "/RMSNorm", {m->x, m->weight}, m->out, m->nodes,
                [&](sy_node_id f) { g.set_attr(f, "epsilon", m->eps); });
        ++rms_count;
        continue;
      }
    }
    if (silu) {
      if (auto m = match_silu_mul(g, n)) {
        replace(g, "SiluMul", g.name(n) + "/SiluMul", {m->gate, m->up}, m->out, m->nodes, [](sy_node_id) {});
        ++silu_count;
      }
    }
  }
  sy::plugin::log(SY_LOG_INFO, "fuse-pointwise: " + std::to_string(rms_count) + " RMSNorm, " + std::to_string(silu_count) + " SiluMul");
  return rms_count + silu_count > 0;
}

}  // namespace sy_fused
