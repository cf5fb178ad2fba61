// The attention-fusion pass: finds each layer's attention subgraph in a
// decoder-with-past export and replaces it with one switchyard::PagedAttention
// node that reads and writes the KV cache of the step engine.
//
// Matched shape (torch / optimum exports of Llama, Mistral, GPT-style):
//   present_k = Concat(past_key_values.i.key, K_new, axis=2)     (same for V)
//   K_rep     = [Unsqueeze, Expand, Tile, Reshape]* (present_k)    (GQA/MQA head repeat; absent for MHA)
//   scores    = MatMul(Q, Transpose(K_rep, perm=[0,1,3,2]))
//   scores    = Div(scores, c) | Mul(scores, c)                    (optional scaling)
//   scores    = Add(scores, mask)                                  (optional causal/padding mask)
//   out       = MatMul(Softmax(scores, axis=-1), V_rep)
// becomes out = PagedAttention(Q, K_new, V_new) {layer, scale, window}. The
// present.i.* outputs are dropped (the cache manager owns the KV) and the
// mask subgraph dies with them. A Softmax that does not fit is left alone
// and the reason is logged.
#include "attention_plugin.h"

#include <cmath>
#include <optional>
#include <string>

namespace sy_attention {
namespace {

using sy::plugin::GraphRef;

std::optional<float> scalar_constant(const GraphRef& g, sy_value_id v) {
  auto t = g.constant(v);
  if (!t || t->numel() != 1) return std::nullopt;
  if (t->dtype() == SY_DTYPE_FLOAT32) return t->data<float>()[0];
  if (t->dtype() == SY_DTYPE_FLOAT64) return static_cast<float>(t->data<double>()[0]);
  return std::nullopt;
}

struct KvSource {
  sy_value_id past_input = SY_NO_VALUE;
  sy_value_id new_kv = SY_NO_VALUE;
  sy_value_id present = SY_NO_VALUE;
  int layer = -1;
  bool is_key = false;
};

// Walks back from the attention operand through the head-repeat ops to the
// Concat with the past input.
std::optional<KvSource> trace_kv(const GraphRef& g, sy_value_id v, std::string& why) {
  for (int depth = 0; depth < 8; ++depth) {
    sy_node_id n = g.producer(v);
    if (n < 0) {
      why = "the KV operand does not come from a Concat with a past_key_values input";
      return std::nullopt;
    }
    std::string op = g.op_type(n);
    if (op == "Unsqueeze" || op == "Expand" || op == "Tile" || op == "Reshape") {
      v = g.input(n, 0);
      continue;
    }
    if (op != "Concat") break;
    auto axis = g.attr_int(n, "axis");
    if (g.input_count(n) != 2 || !axis || (*axis != 2 && *axis != -2)) {
      why = "the KV Concat is not a (past, new) concat on the sequence axis";
      return std::nullopt;
    }
    KvSource s;
    s.past_input = g.input(n, 0);
    s.new_kv = g.input(n, 1);
    s.present = g.output(n, 0);
    std::string name = g.value_name(s.past_input);
    const std::string prefix = "past_key_values.";
    if (g.producer(s.past_input) >= 0 || name.rfind(prefix, 0) != 0) {
      why = "the KV Concat does not read a past_key_values.N input";
      return std::nullopt;
    }
    size_t dot = name.find('.', prefix.size());
    if (dot == std::string::npos) {
      why = "cannot read the layer number of '" + name + "'";
      return std::nullopt;
    }
    s.layer = std::stoi(name.substr(prefix.size(), dot - prefix.size()));
    s.is_key = name.substr(dot) == ".key";
    return s;
  }
  why = "the KV operand does not come from a Concat with a past_key_values input";
  return std::nullopt;
}

// The value consumed by the node, skipping a Transpose that swaps the last two axes.
std::optional<sy_value_id> untranspose_last2(const GraphRef& g, sy_value_id v) {
  sy_node_id n = g.producer(v);
  if (n < 0 || !g.is(n, "Transpose")) return std::nullopt;
  auto perm = g.attr_ints(n, "perm");
  if (!perm || perm->size() != 4 || (*perm)[0] != 0 || (*perm)[1] != 1 || (*perm)[2] != 3 || (*perm)[3] != 2) return std::nullopt;
  return g.input(n, 0);
}

struct Match {
  sy_value_id q, k_new, v_new, out, past_k;
  sy_node_id pv_matmul;
  float scale;
  int layer;
  std::string present_k, present_v;
};

std::optional<Match> match_softmax(const GraphRef& g, sy_node_id sm, std::string& why) {
  auto axis = g.attr_int(sm, "axis");
  if (axis && *axis != -1 && *axis != 3) {
    why = "Softmax is not over the last axis";
    return std::nullopt;
  }
  // Consumer: MatMul(P, V_rep) — find it among the nodes reading the softmax.
  sy_value_id p = g.output(sm, 0);
  sy_node_id pv = -1;
  for (sy_node_id n = 0; n < g.node_count(); ++n)
    if (g.is(n, "MatMul") && g.input(n, 0) == p) pv = n;
  if (pv < 0 || g.use_count(p) != 1) {
    why = "the Softmax output does not feed exactly one MatMul with V";
    return std::nullopt;
  }
  // Producer chain of the scores.
  sy_value_id s = g.input(sm, 0);
  float scale = 1.0f;
  sy_node_id n = g.producer(s);
  if (n >= 0 && g.is(n, "Add")) {
    // One side is the scores, the other the mask.
    sy_value_id a = g.input(n, 0), b = g.input(n, 1);
    auto scores_like = [&](sy_value_id v) {
      sy_node_id pn = g.producer(v);
      return pn >= 0 && (g.is(pn, "Div") || g.is(pn, "Mul") || g.is(pn, "MatMul"));
    };
    s = scores_like(a) ? a : b;
    n = g.producer(s);
  }
  if (n >= 0 && (g.is(n, "Div") || g.is(n, "Mul"))) {
    auto c = scalar_constant(g, g.input(n, 1));
    sy_value_id x = g.input(n, 0);
    if (!c && g.is(n, "Mul")) {
      c = scalar_constant(g, g.input(n, 0));
      x = g.input(n, 1);
    }
    if (!c) {
      why = "the score scaling is not by a scalar constant";
      return std::nullopt;
    }
    scale = g.is(n, "Div") ? 1.0f / *c : *c;
    n = g.producer(x);
  }
  if (n < 0 || !g.is(n, "MatMul")) {
    why = "the scores are not MatMul(Q, K^T)";
    return std::nullopt;
  }
  sy_value_id q = g.input(n, 0);
  auto k_rep = untranspose_last2(g, g.input(n, 1));
  if (!k_rep) {
    why = "K enters the score MatMul without a Transpose(perm=[0,1,3,2])";
    return std::nullopt;
  }
  auto k = trace_kv(g, *k_rep, why);
  if (!k) return std::nullopt;
  auto v = trace_kv(g, g.input(pv, 1), why);
  if (!v) return std::nullopt;
  if (!k->is_key || v->is_key || k->layer != v->layer) {
    why = "K and V come from mismatched past inputs";
    return std::nullopt;
  }
  Match m;
  m.q = q;
  m.k_new = k->new_kv;
  m.past_k = k->past_input;
  m.v_new = v->new_kv;
  m.out = g.output(pv, 0);
  m.pv_matmul = pv;
  m.scale = scale;
  m.layer = k->layer;
  m.present_k = "present." + std::to_string(k->layer) + ".key";
  m.present_v = "present." + std::to_string(k->layer) + ".value";
  return m;
}

// Mean-pools the KV heads of K_new / V_new ([B, KVH, T, D]) into `target`
// groups. Equivalent to mean-pooling each group's projection weights (the
// GQA paper's checkpoint conversion): RoPE rotates every head alike.
sy_value_id pool_heads(GraphRef& g, sy_value_id kv, int64_t kv_heads, int64_t target, int64_t head_dim, const std::string& name) {
  int64_t shape[5] = {0, target, kv_heads / target, -1, head_dim};
  sy_value_id shape_c = g.add_constant(name + "_pool_shape", SY_DTYPE_INT64, {5}, shape);
  std::vector<sy_value_id> r, m;
  g.add_node("", "Reshape", name + "_pool_reshape", {kv, shape_c}, r);
  sy_node_id mean = g.add_node("", "ReduceMean", name + "_pool_mean", {r[0]}, m);
  g.set_attr(mean, "axes", std::vector<int64_t>{2});
  g.set_attr(mean, "keepdims", int64_t{0});
  return m[0];
}

}  // namespace

bool AttentionFusion::run(GraphRef& g, const sy::plugin::Options& options) {
  const int64_t target_kv = options.get_int("kv_heads");
  const int64_t window = options.get_int("window");
  if (window < 0) throw sy::plugin::Error("window must be >= 0", SY_INVALID_ARGUMENT);
  // Pooling KV heads or imposing a window changes the model's attention.
  if (target_kv > 0 || window > 0) g.mark_approximate("kv_heads/window options change the attention");
  int fused = 0;
  const int32_t count = g.node_count();
  for (sy_node_id sm = 0; sm < count; ++sm) {
    if (!g.is(sm, "Softmax")) continue;
    std::string why;
    auto m = match_softmax(g, sm, why);
    if (!m) {
      sy::plugin::log(SY_LOG_WARNING, "attention-fusion: Softmax '" + g.name(sm) + "' left unfused: " + why);
      continue;
    }
    sy_value_id k_new = m->k_new, v_new = m->v_new;
    // KV geometry from the past input's declared shape [batch, kv_heads, past, head_dim].
    auto kshape = g.value_shape(m->past_k);
    if (!kshape || kshape->size() != 4 || (*kshape)[1] <= 0 || (*kshape)[3] <= 0) {
      sy::plugin::log(SY_LOG_WARNING, "attention-fusion: layer " + std::to_string(m->layer) +
                                          " left unfused: past key input has no static [_, kv_heads, _, head_dim] shape");
      continue;
    }
    int64_t kv_heads = (*kshape)[1], head_dim = (*kshape)[3];
    if (target_kv > 0) {
      int64_t kvh = kv_heads;
      if (kvh % target_kv != 0)
        throw sy::plugin::Error("kv_heads=" + std::to_string(target_kv) + " does not divide the model's " + std::to_string(kvh) + " KV heads",
                                SY_INVALID_ARGUMENT);
      if (target_kv != kvh) {
        std::string base = "layer" + std::to_string(m->layer);
        k_new = pool_heads(g, k_new, kvh, target_kv, (*kshape)[3], base + "_k");
        v_new = pool_heads(g, v_new, kvh, target_kv, (*kshape)[3], base + "_v");
        kv_heads = target_kv;
      }
    }
    std::vector<sy_value_id> out;
    sy_node_id node = g.add_node(kDomain, kOp, "layer" + std::to_string(m->layer) + "_paged_attention", {m->q, k_new, v_new}, out);
    g.set_attr(node, "layer", int64_t{m->layer});
    g.set_attr(node, "scale", m->scale);
    g.set_attr(node, "window", window);
    g.set_attr(node, "kv_heads", kv_heads);
    g.set_attr(node, "head_dim", head_dim);
    g.set_type(out[0], SY_DTYPE_FLOAT32, g.value_shape(m->out));
    g.replace_all_uses(m->out, out[0]);
    g.remove_node(m->pv_matmul);
    g.remove_output(m->present_k);
    g.remove_output(m->present_v);
    ++fused;
  }
  sy::plugin::log(SY_LOG_INFO, "attention-fusion: fused " + std::to_string(fused) + " attention subgraphs");
  return fused > 0;
}

}  // namespace sy_attention
