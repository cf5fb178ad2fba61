// Pattern matching for the fused ops of fused_plugin.h. Every intermediate of
// a matched chain must have no other reader (else the rewrite would still
// need it and nothing is saved); a chain that does not match exactly is left
// alone. Rotary embeddings are matched in rotary_match.cpp.
#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "graph_match.h"

namespace sy_fused {
namespace {

struct RmsMatch {
  sy_value_id x, weight, out;
  float eps;
  bool divide;  // x / s rather than x * (1 / s)
  std::vector<sy_node_id> nodes;
};

// From Sqrt(Add(ReduceMean(Pow(x, 2), last axis), eps)) up to s's node; the
// nodes to remove are appended.
std::optional<float> match_mean_square(const GraphRef& g, sy_node_id sqrt, sy_value_id x, int64_t width, std::vector<sy_node_id>& nodes) {
  sy_node_id add = single_use_producer(g, g.input(sqrt, 0), "Add");
  if (add < 0) return std::nullopt;
  // x's shape may be unknown to static inference: the mean must then be
  // over axis -1 (the kernel checks x's last dim against the weight).
  auto shape = g.value_shape(x);
  if (shape && (shape->empty() || (shape->back() >= 0 && shape->back() != width))) return std::nullopt;
  const int64_t last = shape ? static_cast<int64_t>(shape->size()) - 1 : -1;
  for (int ei = 0; ei < 2; ++ei) {
    auto eps = scalar_f32(g, g.input(add, ei));
    sy_node_id mean = eps ? single_use_producer(g, g.input(add, 1 - ei), "ReduceMean") : -1;
    if (mean < 0 || g.attr_int(mean, "keepdims").value_or(1) != 1) continue;
    auto axes = reduce_axes(g, mean);
    if (!axes || axes->size() != 1 || ((*axes)[0] != -1 && (*axes)[0] != last)) continue;
    sy_node_id pow = single_use_producer(g, g.input(mean, 0), "Pow");
    if (pow < 0 || g.input(pow, 0) != x || scalar_f32(g, g.input(pow, 1)) != 2.0f) continue;
    nodes.insert(nodes.end(), {sqrt, add, mean, pow});
    return eps;
  }
  return std::nullopt;
}

// Mul(N, weight) with N = Mul(x, Div(1, s)), Mul(x, Reciprocal(s)) or
// Div(x, s), s = Sqrt(mean of squares + eps); operands in either order.
std::optional<RmsMatch> match_rmsnorm(const GraphRef& g, sy_node_id last) {
  if (!g.is(last, "Mul") || g.input_count(last) != 2) return std::nullopt;
  for (int wi = 0; wi < 2; ++wi) {
    sy_value_id weight = g.input(last, wi), normed = g.input(last, 1 - wi);
    auto wt = g.constant(weight);
    if (!wt || wt->dtype() != SY_DTYPE_FLOAT32 || wt->rank() != 1) continue;
    if (sy_node_id div = single_use_producer(g, normed, "Div"); div >= 0) {
      sy_node_id sqrt = single_use_producer(g, g.input(div, 1), "Sqrt");
      std::vector<sy_node_id> nodes{last, div};
      if (sqrt < 0) continue;
      if (auto eps = match_mean_square(g, sqrt, g.input(div, 0), wt->numel(), nodes))
        return RmsMatch{g.input(div, 0), weight, g.output(last, 0), *eps, true, nodes};
      continue;
    }
    sy_node_id mul = single_use_producer(g, normed, "Mul");
    if (mul < 0) continue;
    for (int xi = 0; xi < 2; ++xi) {
      sy_value_id x = g.input(mul, xi), inv = g.input(mul, 1 - xi);
      sy_node_id recip = single_use_producer(g, inv, "Div");
      sy_value_id root = SY_NO_VALUE;
      if (recip >= 0 && scalar_f32(g, g.input(recip, 0)) == 1.0f) root = g.input(recip, 1);
      else if ((recip = single_use_producer(g, inv, "Reciprocal")) >= 0) root = g.input(recip, 0);
      sy_node_id sqrt = root == SY_NO_VALUE ? -1 : single_use_producer(g, root, "Sqrt");
      if (sqrt < 0) continue;
      std::vector<sy_node_id> nodes{last, mul, recip};
      if (auto eps = match_mean_square(g, sqrt, x, wt->numel(), nodes)) return RmsMatch{x, weight, g.output(last, 0), *eps, false, nodes};
    }
  }
  return std::nullopt;
}

struct SiluMatch {
  sy_value_id gate, up, out;
  std::vector<sy_node_id> nodes;
};

// Mul(Mul(g, Sigmoid(g)), up), either operand order. Gate and up must have
// one shape (no broadcasting): see silu_shapes_agree.
std::optional<SiluMatch> match_silu_mul(const GraphRef& g, sy_node_id last) {
  if (!g.is(last, "Mul") || g.input_count(last) != 2) return std::nullopt;
  for (int ui = 0; ui < 2; ++ui) {
    sy_value_id up = g.input(last, ui);
    sy_node_id mul = single_use_producer(g, g.input(last, 1 - ui), "Mul");
    if (mul < 0 || g.constant(up)) continue;
    for (int gi = 0; gi < 2; ++gi) {
      sy_value_id gate = g.input(mul, gi);
      sy_node_id sig = single_use_producer(g, g.input(mul, 1 - gi), "Sigmoid");
      if (sig < 0 || g.input(sig, 0) != gate) continue;
      return SiluMatch{gate, up, g.output(last, 0), {last, mul, sig}};
    }
  }
  return std::nullopt;
}

bool fully_static(const std::optional<std::vector<int64_t>>& s) {
  return s && std::all_of(s->begin(), s->end(), [](int64_t d) { return d >= 0; });
}

// The matches whose gate and up have one shape: statically when inference
// knows both, else on evaluated probe steps (Phi-3 slices gate and up from
// one projection, and its exports leave those shapes unknown).
std::vector<SiluMatch> silu_shapes_agree(const GraphRef& g, const std::vector<SiluMatch>& matches) {
  std::vector<SiluMatch> out;
  std::vector<const SiluMatch*> unsure;
  std::vector<sy_value_id> values;
  for (const SiluMatch& m : matches) {
    auto gs = g.value_shape(m.gate), us = g.value_shape(m.up);
    if (fully_static(gs) && fully_static(us)) {
      if (*gs == *us) out.push_back(m);
      continue;
    }
    unsure.push_back(&m);
    values.insert(values.end(), {m.gate, m.up});
  }
  const std::vector<ProbeFacts> probes = evaluate_on_probes(g, values, "SiLU operand shapes");
  for (const SiluMatch* m : unsure)
    if (!probes.empty() && std::all_of(probes.begin(), probes.end(), [&](const ProbeFacts& f) { return f.dims.at(m->gate) == f.dims.at(m->up); }))
      out.push_back(*m);
  return out;
}

// Adds the fused node, moves old_out's readers to it, and removes the
// matched nodes (listed readers first) whose outputs nothing reads any more;
// one still read (a Shape of an intermediate) is left for the final
// simplify, which drops it once its own readers are gone.
void replace(GraphRef& g, const char* op, const std::string& name, const std::vector<sy_value_id>& inputs, sy_value_id old_out,
             const std::vector<sy_node_id>& dead, const std::function<void(sy_node_id)>& attrs) {
  std::vector<sy_value_id> outs;
  sy_node_id n = g.add_node(kDomain, op, name, inputs, outs);
  attrs(n);
  g.set_type(outs[0], SY_DTYPE_FLOAT32, g.value_shape(old_out));
  g.replace_all_uses(old_out, outs[0]);
  for (sy_node_id d : dead) {
    bool read = false;
    for (int32_t i = 0; i < g.output_count(d); ++i) read = read || g.use_count(g.output(d, i)) > 0;
    if (!read) g.remove_node(d);
  }
}

// The chains left unfused that look like the ones the pass fuses (a square
// averaged over the last axis; x * sigmoid(x)): an intermediate read by
// another node, or a form the ops do not express. Listed at load, so a
// model that runs slower than expected says why.
std::vector<std::string> near_misses(const GraphRef& g, bool rms, bool silu) {
  std::vector<std::string> out;
  for (sy_node_id n = 0; n < g.node_count(); ++n) {
    if (rms && g.is(n, "Pow") && scalar_f32(g, g.input(n, 1)) == 2.0f) {
      for (sy_node_id r : readers(g, g.output(n, 0)))
        if (g.is(r, "ReduceMean")) {
          out.push_back("RMSNorm-like '" + g.name(n) + "'");
          break;
        }
    }
    if (silu && g.is(n, "Sigmoid")) {
      for (sy_node_id r : readers(g, g.output(n, 0)))
        if (g.is(r, "Mul") && (g.input(r, 0) == g.input(n, 0) || g.input(r, 1) == g.input(n, 0))) {
          out.push_back("SiLU-like '" + g.name(n) + "'");
          break;
        }
    }
  }
  return out;
}

}  // namespace

bool FusionPass::run(GraphRef& g, const sy::plugin::Options& options) {
  const bool rms = options.get_bool("rmsnorm"), silu = options.get_bool("silu_mul"), rotary = options.get_bool("rotary");
  int rms_count = 0, silu_count = 0, rotary_count = 0;
  if (rotary) {
    for (const RotaryMatch& m : match_rotaries(g)) {
      replace(g, "Rotary", g.name(m.nodes[0]) + "/Rotary", {m.x, m.cos, m.sin}, m.out, m.nodes, [&](sy_node_id f) {
        g.set_attr(f, "interleaved", int64_t{m.interleaved});
      });
      ++rotary_count;
    }
  }
  if (silu) {
    std::vector<SiluMatch> found;
    for (sy_node_id n = 0; n < g.node_count(); ++n)
      if (auto m = match_silu_mul(g, n)) found.push_back(*m);
    for (const SiluMatch& m : silu_shapes_agree(g, found)) {
      replace(g, "SiluMul", g.name(m.nodes[0]) + "/SiluMul", {m.gate, m.up}, m.out, m.nodes, [](sy_node_id) {});
      ++silu_count;
    }
  }
  if (rms) {
    const int32_t count = g.node_count();
    for (sy_node_id n = 0; n < count; ++n) {
      if (auto m = match_rmsnorm(g, n)) {  // removed nodes report no op and never match
        replace(g, "RMSNorm", g.name(n) + "/RMSNorm", {m->x, m->weight}, m->out, m->nodes, [&](sy_node_id f) {
          g.set_attr(f, "epsilon", m->eps);
          if (m->divide) g.set_attr(f, "divide", int64_t{1});
        });
        ++rms_count;
      }
    }
  }
  sy::plugin::log(SY_LOG_INFO, "fuse-pointwise: " + std::to_string(rms_count) + " RMSNorm, " + std::to_string(silu_count) + " SiluMul, " +
                                   std::to_string(rotary_count) + " Rotary");
  if (auto left = near_misses(g, rms, silu); !left.empty()) {
    std::string list;
    for (const auto& l : left) {
      if (!list.empty()) list += ", ";
      list += l;
    }
    sy::plugin::log(SY_LOG_WARNING, "fuse-pointwise: " + std::to_string(left.size()) +
                                        " chains left as exported (an intermediate read elsewhere, or a form the fused ops do not "
                                        "express): " + list);
  }
  return rms_count + silu_count + rotary_count > 0;
}

}  // namespace sy_fused
