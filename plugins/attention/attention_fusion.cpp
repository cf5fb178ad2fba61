// The attention-fusion pass: replaces each layer's attention in a
// decoder-with-past export with one switchyard::PagedAttention node that
// reads and writes the step engine's KV cache.
//
// Recognition is anchored on what every decoder export has, the layer's past
// key/value inputs (found by role, whatever their spelling), not on one
// exporter's op pattern:
//   explicit attention   past -> Concat(past, new) -> [head repeat, transpose,
//                        scalar scale]* -> MatMul(Q, K^T) -> [scale, soft-cap
//                        tanh(x/c)*c, mask Add/Where, Cast, sinks Concat(s,
//                        per-head constant), max shift s - max(s)]* ->
//                        Softmax -> [Cast, NaN guard, the sink column
//                        dropped]* -> MatMul(P, V)
//   GroupQueryAttention  (onnxruntime-genai) mapped attribute for attribute,
//                        rotary included
// Everything between is either carried into the fused op's attributes
// (scale, softcap, window; gpt-oss's sinks as its input 5) or the layer is
// refused with the construct named.
// The mask is not pattern-matched: the pass evaluates it (the scores fed as
// zeros, so the softmax input is the additive mask) on a prefill, a chunk and
// a long decode, and accepts only a causal mask with at most a sliding window;
// a bias of any other value (ALiBi, relative positions) is refused. The
// host's equivalence probe then proves each rewritten layer.
#include "attention_plugin.h"

#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>

namespace sy_attention {
namespace {

using sy::plugin::Error;
using sy::plugin::GraphRef;

// A layer whose attention the fused op cannot express.
struct Refusal {
  std::string why;
};
[[noreturn]] void refuse(const std::string& why) { throw Refusal{why}; }

std::optional<float> scalar_constant(const GraphRef& g, sy_value_id v) {
  auto t = g.constant(v);
  if (!t || t->numel() != 1) return std::nullopt;
  switch (t->dtype()) {
    case SY_DTYPE_FLOAT32: return t->data<float>()[0];
    case SY_DTYPE_FLOAT64: return static_cast<float>(t->data<double>()[0]);
    default: return std::nullopt;
  }
}

std::string node_label(const GraphRef& g, sy_node_id n) { return g.op_type(n) + " '" + g.name(n) + "'"; }

// Which nodes read each value (built once, before any rewriting).
class Consumers {
 public:
  explicit Consumers(const GraphRef& g) {
    for (sy_node_id n = 0; n < g.node_count(); ++n) {
      if (g.op_type(n).empty()) continue;  // removed
      for (int32_t i = 0; i < g.input_count(n); ++i)
        if (g.input(n, i) != SY_NO_VALUE) by_value_[g.input(n, i)].push_back(n);
    }
  }
  const std::vector<sy_node_id>& of(sy_value_id v) const {
    static const std::vector<sy_node_id> none;
    auto it = by_value_.find(v);
    return it == by_value_.end() ? none : it->second;
  }

 private:
  std::map<sy_value_id, std::vector<sy_node_id>> by_value_;
};

// The value of a scalar operand: a constant, or a data-independent scalar an
// exporter computes from shapes (GPT-2's 1/sqrt(head size) from Shape(q)[-1]),
// which must evaluate to the same value on two different probe shapes.
std::optional<float> scalar_value(const GraphRef& g, sy_value_id v) {
  if (auto c = scalar_constant(g, v)) return c;
  if (g.constant(v)) return std::nullopt;
  static thread_local std::map<std::pair<const void*, sy_value_id>, std::optional<float>> memo;
  auto key = std::make_pair(static_cast<const void*>(&g), v);
  if (auto it = memo.find(key); it != memo.end()) return it->second;
  std::optional<float> out;
  try {
    auto a = g.evaluate(1, 0, 4, {}, {v}), b = g.evaluate(1, 3, 2, {}, {v});
    auto read = [](const sy::plugin::TensorView& t) -> std::optional<float> {
      if (t.numel() != 1) return std::nullopt;
      if (t.dtype() == SY_DTYPE_FLOAT32) return t.data<float>()[0];
      if (t.dtype() == SY_DTYPE_FLOAT64) return static_cast<float>(t.data<double>()[0]);
      return std::nullopt;
    };
    auto x = read(a[0]), y = read(b[0]);
    if (x && y && *x == *y) out = x;
  } catch (const Error&) {
    // Not a scalar that can be evaluated on its own.
  }
  memo[key] = out;
  return out;
}

// Scalar factor of a Mul/Div node whose other operand is a scalar.
std::optional<float> scalar_factor(const GraphRef& g, sy_node_id n, sy_value_id chain) {
  const bool mul = g.is(n, "Mul"), div = g.is(n, "Div");
  if (!mul && !div) return std::nullopt;
  const sy_value_id a = g.input(n, 0), b = g.input(n, 1);
  if (div) {
    if (a != chain) return std::nullopt;  // c / x is not a scaling
    auto c = scalar_value(g, b);
    if (!c || *c == 0.f) return std::nullopt;
    return 1.f / *c;
  }
  return scalar_value(g, a == chain ? b : a);
}

// The one KV layer of a model: its past inputs and present outputs.
struct KvLayer {
  int layer = -1;
  sy_value_id past_k = SY_NO_VALUE, past_v = SY_NO_VALUE;
  std::string present_k, present_v;  // output names
};

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

// What one layer's attention became after matching.
struct Match {
  int layer = -1;
  sy_value_id q = SY_NO_VALUE, k_new = SY_NO_VALUE, v_new = SY_NO_VALUE;
  sy_value_id out = SY_NO_VALUE;           // value the fused op replaces
  std::vector<sy_node_id> replaced;        // nodes that die with it (the final MatMul or the GQA node)
  sy_value_id scores = SY_NO_VALUE;        // explicit form: the score MatMul's output
  sy_value_id softmax_in = SY_NO_VALUE;    // explicit form: the softmax input
  bool has_mask = false;
  // ONNX Attention (opset 23) as the score and value product: its mask input
  // (bool or additive, may be absent) and is_causal.
  bool sdpa = false, sdpa_causal = false;
  sy_value_id sdpa_mask = SY_NO_VALUE;
  bool keys_transposed = false;            // K_new stored [B, KVH, D, S]
  float scale = 1.f, softcap = 0.f;
  int64_t window = 0;
  // GroupQueryAttention form: [1, T, H*D] layout, rotary in the op.
  bool packed_layout = false;
  int64_t heads = 0;
  sy_value_id cos = SY_NO_VALUE, sin = SY_NO_VALUE;
  bool rotary_interleaved = false;
  // Attention sinks (gpt-oss): a logit per query head concatenated to the
  // scores as one more key, its probability column dropped after the softmax.
  std::vector<float> sinks;
  std::vector<std::string> carried;        // what was understood, for the log and inspect
  // Latent attention (MLA): the cache holds the latent and the shared rotary
  // key (as keys and values, KD and VD values a token); each head's key and
  // value are linear in them. The query takes the key maps (q_map
  // [H, Dq, KD+VD]: q . k = (q q_map) . [key row ; value row]), the op
  // attends over the cached rows as one KV head, and out_map
  // [H, value_dim, Dv] makes each head's value from the weighted sum.
  bool latent = false;
  int64_t latent_dim = 0, value_dim = 0;  // KD; the weighted sum's size (KD, or KD + VD)
  std::vector<int64_t> q_map_dims, out_map_dims;
  std::vector<float> q_map, out_map;
};

// Follows a value through ops that only repeat, reshape or scale it, to the
// nodes that consume it otherwise. Shape queries are ignored.
class Walker {
 public:
  Walker(const GraphRef& g, const Consumers& c) : g_(g), c_(c) {}

  // From the concatenated keys to the score MatMul (K is its input 1).
  sy_node_id keys_to_scores(sy_value_id k, float& scale, std::vector<std::string>& carried) {
    sy_node_id found = -1;
    std::vector<sy_value_id> frontier{k};
    std::set<sy_value_id> seen;
    while (!frontier.empty()) {
      sy_value_id v = frontier.back();
      frontier.pop_back();
      if (!seen.insert(v).second) continue;
      for (sy_node_id n : c_.of(v)) {
        const std::string op = g_.op_type(n);
        if (op == "Shape" || op == "Size") continue;
        // The score product: MatMul(Q, K^T), or ONNX's Attention(Q, K, V, mask) (opset 23).
        if ((op == "MatMul" || op == "Attention") && g_.domain(n).empty() && g_.input(n, 1) == v) {
          if (found >= 0 && found != n) refuse("the keys feed two score products ('" + g_.name(found) + "' and '" + g_.name(n) + "')");
          found = n;
          continue;
        }
        if (op == "Unsqueeze" || op == "Expand" || op == "Reshape" || op == "Tile" || op == "Transpose" || op == "Cast" ||
            op == "Identity" || op == "Squeeze") {
          if (g_.input(n, 0) != v) refuse("the keys are the shape operand of " + node_label(g_, n));
          frontier.push_back(g_.output(n, 0));
          continue;
        }
        if (auto f = scalar_factor(g_, n, v)) {
          scale *= *f;
          carried.push_back("key scaling " + std::to_string(*f) + " (" + node_label(g_, n) + ")");
          frontier.push_back(g_.output(n, 0));
          continue;
        }
        refuse("the keys feed " + node_label(g_, n) + ", which the fused op cannot express");
      }
    }
    if (found < 0) refuse("the keys reach no score product MatMul(Q, K^T)");
    return found;
  }

  // From the probabilities back to... forward to the value product; returns the MatMul.
  sy_node_id probs_to_output(sy_value_id p, bool drop_sink_column) {
    for (int depth = 0; depth < 8; ++depth) {
      std::vector<sy_node_id> users;
      for (sy_node_id n : c_.of(p))
        if (!g_.is(n, "IsNaN") && !g_.is(n, "Shape")) users.push_back(n);
      if (users.size() != 1) refuse("the attention probabilities feed " + std::to_string(users.size()) + " nodes, expected one value product");
      sy_node_id n = users[0];
      if (g_.is(n, "MatMul") && g_.input(n, 0) == p) return n;
      if (g_.is(n, "Cast") || g_.is(n, "Identity")) {
        p = g_.output(n, 0);
        continue;
      }
      // The sink's column dropped: Slice(p, 0, -1) on the last axis.
      if (drop_sink_column && g_.is(n, "Slice") && g_.input(n, 0) == p && drops_last_column(n)) {
        drop_sink_column = false;
        p = g_.output(n, 0);
        continue;
      }
      // NaN guard of fully masked rows: Where(IsNaN(p), 0, p) (no causal row is fully masked).
      if (g_.is(n, "Where") && g_.input(n, 2) == p) {
        sy_node_id cond = g_.producer(g_.input(n, 0));
        if (cond >= 0 && g_.is(cond, "IsNaN") && g_.input(cond, 0) == p) {
          p = g_.output(n, 0);
          continue;
        }
      }
      refuse("the attention probabilities pass through " + node_label(g_, n) + ", which the fused op cannot express");
    }
    refuse("no value product MatMul(P, V) after the softmax");
  }

  // Slice(x, starts [0], ends [-1], axes [-1 or 3], steps [1]): every key but the last.
  bool drops_last_column(sy_node_id n) const {
    auto ints = [&](int32_t i) -> std::optional<std::vector<int64_t>> {
      if (g_.input_count(n) <= i || g_.input(n, i) == SY_NO_VALUE) return std::nullopt;
      auto t = g_.constant(g_.input(n, i));
      if (!t || t->numel() != 1) return std::nullopt;
      if (t->dtype() == SY_DTYPE_INT64) return std::vector<int64_t>{t->data<int64_t>()[0]};
      if (t->dtype() == SY_DTYPE_INT32) return std::vector<int64_t>{t->data<int32_t>()[0]};
      return std::nullopt;
    };
    const auto starts = ints(1), ends = ints(2), axes = ints(3), steps = ints(4);
    if (!starts || !ends || !axes || (*starts)[0] != 0 || (*ends)[0] != -1) return false;
    if ((*axes)[0] != -1 && (*axes)[0] != 3) return false;
    return g_.input_count(n) <= 4 || g_.input(n, 4) == SY_NO_VALUE || (steps && (*steps)[0] == 1);
  }

  // Back from the value product's V operand to the Concat with the past values.
  sy_node_id values_to_concat(sy_value_id v) {
    for (int depth = 0; depth < 10; ++depth) {
      sy_node_id n = g_.producer(v);
      if (n < 0) refuse("the value operand does not come from a Concat with the layer's past values");
      const std::string op = g_.op_type(n);
      if (op == "Concat") return n;
      if (op == "Unsqueeze" || op == "Expand" || op == "Reshape" || op == "Tile" || op == "Cast" || op == "Identity") {
        v = g_.input(n, 0);
        continue;
      }
      refuse("the values pass through " + node_label(g_, n) + ", which the fused op cannot express");
    }
    refuse("the value operand does not come from a Concat with the layer's past values");
  }

 private:
  const GraphRef& g_;
  const Consumers& c_;
};

// Concat(past, new) along the sequence axis; returns the new part.
sy_value_id new_part_of(const GraphRef& g, sy_node_id concat, sy_value_id past, bool& transposed) {
  auto axis = g.attr_int(concat, "axis");
  if (g.input_count(concat) != 2 || g.input(concat, 0) != past || !axis)
    refuse("the past is concatenated as " + node_label(g, concat) + ", not Concat(past, new)");
  auto shape = g.value_shape(past);
  const int64_t rank = shape ? static_cast<int64_t>(shape->size()) : 4;
  const int64_t ax = *axis < 0 ? *axis + rank : *axis;
  if (ax != 2 && ax != 3) refuse("the past is concatenated on axis " + std::to_string(*axis) + ", not the sequence axis");
  transposed = ax == 3;
  return g.input(concat, 1);
}

// ONNX Attention (opset 23) reading the concatenated keys and values: its
// attributes carry scale and soft-cap, its mask input is read by evaluation.
Match match_sdpa_node(const GraphRef& g, Walker& w, const KvLayer& kv, sy_node_id n, float key_scale, Match& m) {
  auto qshape = g.value_shape(m.q);
  if (!qshape || qshape->size() != 4) refuse("ONNX Attention with 3-D inputs (only the [batch, heads, seq, head] form is fused)");
  const int64_t D = (*qshape)[3];
  if (g.input_count(n) > 4 && g.input(n, 4) != SY_NO_VALUE) refuse("ONNX Attention with past_key/past_value inputs after a Concat");
  if (g.input_count(n) > 6 && g.input(n, 6) != SY_NO_VALUE) refuse("ONNX Attention with nonpad_kv_seqlen");
  for (int32_t o = 1; o < g.output_count(n); ++o)
    if (g.output(n, o) != SY_NO_VALUE && g.use_count(g.output(n, o)) > 0) refuse("ONNX Attention whose present or qk outputs are read");
  const float attr_scale = g.attr_float(n, "scale").value_or(0.f);
  if (attr_scale == 0.f && D <= 0) refuse("ONNX Attention without scale and with an unknown head size");
  m.sdpa = true;
  m.scale = key_scale * (attr_scale != 0.f ? attr_scale : 1.f / std::sqrt(static_cast<float>(D)));
  m.softcap = g.attr_float(n, "softcap").value_or(0.f);
  m.sdpa_causal = g.attr_int(n, "is_causal").value_or(0) != 0;
  m.sdpa_mask = g.input_count(n) > 3 ? g.input(n, 3) : SY_NO_VALUE;
  if (!m.sdpa_causal && m.sdpa_mask == SY_NO_VALUE) refuse("ONNX Attention without a mask or is_causal: not causal, and the fused op is");
  m.has_mask = true;
  m.carried.push_back("ONNX Attention '" + g.name(n) + "' (scale, softcap" + std::string(m.sdpa_causal ? ", is_causal" : "") + ")");
  sy_node_id v_concat = w.values_to_concat(g.input(n, 2));
  bool v_transposed = false;
  if (g.input(v_concat, 0) != kv.past_v) refuse("the value product reads a Concat of another layer's past values");
  m.v_new = new_part_of(g, v_concat, kv.past_v, v_transposed);
  if (v_transposed) refuse("the values are concatenated on the head-size axis");
  m.out = g.output(n, 0);
  m.replaced.push_back(n);
  return m;
}

// The per-head sink logits a Concat appends to the scores: a float32
// constant reached through the ops that only broadcast or reshape it.
std::vector<float> sink_logits(const GraphRef& g, sy_value_id v) {
  for (int depth = 0; depth < 6; ++depth) {
    if (auto t = g.constant(v)) {
      if (t->dtype() != SY_DTYPE_FLOAT32 || t->numel() < 1) refuse("attention sinks that are not float32 constants");
      const auto dims = t->dims();
      int wide = 0;
      for (size_t i = 0; i < dims.size(); ++i)
        if (dims[i] != 1) {
          ++wide;
          if (dims.size() == 4 && i != 1) refuse("attention sinks that vary along another axis than the heads'");
        }
      if (wide > 1) refuse("attention sinks that are not one value per head");
      return std::vector<float>(t->data<float>(), t->data<float>() + t->numel());
    }
    sy_node_id n = g.producer(v);
    if (n < 0 || !(g.is(n, "Expand") || g.is(n, "Reshape") || g.is(n, "Unsqueeze") || g.is(n, "Cast") || g.is(n, "Identity")))
      refuse("the scores are concatenated with something other than constant per-head sinks");
    v = g.input(n, 0);
  }
  refuse("the scores are concatenated with something other than constant per-head sinks");
}

// From the score product MatMul(Q, K^T) to the value product MatMul(P, V):
// scale, soft-cap, mask, sinks and the softmax carried into m; returns the
// value product.
sy_node_id scores_to_values(const GraphRef& g, const Consumers& c, Walker& w, sy_node_id qk, float scale, Match& m) {
  m.scores = g.output(qk, 0);
  // Scores to Softmax: scale, soft-cap, masks, casts.
  sy_value_id s = m.scores;
  bool capped = false;
  sy_node_id softmax = -1;
  for (int depth = 0; depth < 16 && softmax < 0; ++depth) {
    std::vector<sy_node_id> users;
    sy_node_id row_max = -1;  // ReduceMax(s) of a max shift s - max(s)
    for (sy_node_id n : c.of(s)) {
      if (g.is(n, "Shape")) continue;
      if (g.is(n, "ReduceMax") && g.input(n, 0) == s && row_max < 0) {
        row_max = n;
        continue;
      }
      users.push_back(n);
    }
    if (users.size() != 1) refuse("the scores feed " + std::to_string(users.size()) + " nodes, expected one chain to the softmax");
    sy_node_id n = users[0];
    const std::string op = g.op_type(n);
    if (row_max >= 0) {
      // softmax(x - max(x)) = softmax(x): a shift on the last axis is dropped.
      if (!g.is(n, "Sub") || g.input(n, 0) != s || g.input(n, 1) != g.output(row_max, 0) || g.attr_int(row_max, "keepdims").value_or(1) != 1)
        refuse("the scores feed " + node_label(g, row_max) + " other than as a max shift before the softmax");
      m.carried.push_back("max shift (" + node_label(g, n) + ")");
      s = g.output(n, 0);
      continue;
    }
    if (auto f = scalar_factor(g, n, s)) {
      if (capped || m.has_mask) refuse("the scores are scaled after the soft-cap or the mask (" + node_label(g, n) + ")");
      scale *= *f;
      m.carried.push_back("score scaling " + std::to_string(*f) + " (" + node_label(g, n) + ")");
    } else if (op == "Tanh") {
      // A soft-cap c * tanh(x) with x = dot * scale is the fused op's
      // c * tanh(dot * scale * c / c): scale * c and cap c. The Mul by c may be
      // missing (c = 1, folded away by an exporter's optimiser).
      auto next = c.of(g.output(n, 0));
      const std::optional<float> factor = next.size() == 1 ? scalar_factor(g, next[0], g.output(n, 0)) : std::nullopt;
      const float cap = factor.value_or(1.f);
      if (capped || m.has_mask || cap <= 0.f) refuse("a tanh on the scores that is not a soft-cap c * tanh(x / c) (" + node_label(g, n) + ")");
      scale *= cap;
      m.softcap = cap;
      capped = true;
      m.carried.push_back("soft-cap " + std::to_string(cap) + " (" + node_label(g, n) + ")");
      if (factor) n = next[0];
    } else if (op == "Add") {
      m.has_mask = true;
      m.carried.push_back("mask (" + node_label(g, n) + ")");
    } else if (op == "Where" && (g.input(n, 1) == s || g.input(n, 2) == s)) {
      m.has_mask = true;
      m.carried.push_back("mask (" + node_label(g, n) + ")");
    } else if (op == "Concat" && g.input_count(n) == 2 && g.input(n, 0) == s && m.sinks.empty()) {
      // Sinks: Concat(scores, Expand(sinks as [1, H, 1, 1])) on the key axis.
      auto axis = g.attr_int(n, "axis");
      if (!axis || (*axis != -1 && *axis != 3)) refuse("the scores are concatenated on another axis than the keys' (" + node_label(g, n) + ")");
      m.sinks = sink_logits(g, g.input(n, 1));
      if (!m.has_mask) refuse("attention sinks before the mask (" + node_label(g, n) + ")");
      m.softmax_in = s;  // the mask is read before the sink joins
      m.carried.push_back("attention sinks (" + node_label(g, n) + ")");
    } else if (op == "Cast" || op == "Identity") {
    } else if (op == "Softmax") {
      auto axis = g.attr_int(n, "axis");
      auto shape = g.value_shape(s);
      const int64_t rank = shape ? static_cast<int64_t>(shape->size()) : 4;
      if (axis && *axis != -1 && *axis != rank - 1) refuse("the softmax is not over the keys (axis " + std::to_string(*axis) + ")");
      softmax = n;
      if (m.sinks.empty()) m.softmax_in = s;
      break;
    } else {
      refuse("the scores pass through " + node_label(g, n) + ", which the fused op cannot express");
    }
    s = g.output(n, 0);
  }
  if (softmax < 0) refuse("no softmax over the scores");
  if (!m.has_mask) refuse("the scores have no mask: this attention is not causal, and the fused op is");
  m.scale = scale;
  return w.probs_to_output(g.output(softmax, 0), !m.sinks.empty());
}

// Latent attention (multi-head latent attention, DeepSeek V2/V3 and Kimi K2
// as transformers exports them with a compressed cache): one of the past
// tensors is the normalised latent (R values a token; transformers 5 caches
// it as the "keys"), the other the rotary key shared by the heads (P values;
// some ports swap the two). Per-token linear maps (the up-projection MatMul,
// reshapes, splits, concatenations, scatters) make every head's key and
// value from them before the usual score and value products.
//
// The fused form absorbs those maps instead of recomputing every head's keys
// and values from the whole context each step: q . k_h(t) = (q M_h) .
// [key row_t ; value row_t] with M_h the key map read back as a matrix, so
// the op attends over the cache's rows as one KV head, and each head's value
// is (sum_t p_t [key row_t ; value row_t]) V_h, over the first rows only
// when the values read nothing else. The maps are not pattern-matched but
// measured: the graph is evaluated with both cached parts fed as unit
// vectors, which reads every column of them whatever ops the exporter chose,
// and a zero token must give zero keys and values (no constant part). The
// equivalence probe then proves the rewrite on the whole layer.

// The up-projection that marks a latent cache: MatMul(cached, constant).
bool feeds_latent_projection(const GraphRef& g, const Consumers& c, sy_value_id cached) {
  for (sy_node_id n : c.of(cached))
    if (g.is(n, "MatMul") && g.input(n, 0) == cached && g.constant(g.input(n, 1))) return true;
  return false;
}

// Everything the latent and the rotary key reach through per-token linear
// ops, and the products that read what they reach as their second operand.
struct LatentReach {
  std::set<sy_value_id> reached;
  std::vector<sy_node_id> products;
};

LatentReach reach_from_latent(const GraphRef& g, const Consumers& c, const std::vector<sy_value_id>& starts) {
  LatentReach r;
  std::set<sy_value_id> outputs;  // what the graph returns stays computed: it cannot be absorbed
  for (int32_t i = 0; i < g.output_count(); ++i) outputs.insert(g.output_value(i));
  std::vector<sy_value_id> frontier(starts.begin(), starts.end());
  std::vector<sy_node_id> joins;  // Concat / ScatterND: every data operand checked after the walk
  while (!frontier.empty()) {
    sy_value_id v = frontier.back();
    frontier.pop_back();
    if (!r.reached.insert(v).second) continue;
    if (outputs.count(v) && std::find(starts.begin(), starts.end(), v) == starts.end())
      refuse("a value made from the latent cache is also a graph output ('" + g.value_name(v) + "')");
    for (sy_node_id n : c.of(v)) {
      const std::string op = g.op_type(n);
      if (op == "Shape" || op == "Size") continue;
      auto follow = [&] {
        for (int32_t o = 0; o < g.output_count(n); ++o)
          if (g.output(n, o) != SY_NO_VALUE) frontier.push_back(g.output(n, o));
      };
      if (op == "MatMul" && g.domain(n).empty()) {
        if (g.input(n, 0) == v && g.constant(g.input(n, 1))) {
          follow();  // an up-projection
        } else if (g.input(n, 1) == v) {
          if (std::find(r.products.begin(), r.products.end(), n) == r.products.end()) r.products.push_back(n);
        } else {
          refuse("the latent cache reaches " + node_label(g, n) + " as its first operand, which is not a projection by a constant");
        }
        continue;
      }
      if (op == "Reshape" || op == "Transpose" || op == "Unsqueeze" || op == "Squeeze" || op == "Expand" || op == "Tile" || op == "Cast" ||
          op == "Identity" || op == "Slice" || op == "Split" || op == "Flatten") {
        if (g.input(n, 0) != v) refuse("the latent cache is the shape operand of " + node_label(g, n));
        follow();
        continue;
      }
      if (op == "Concat" || (op == "ScatterND" && g.input(n, 1) != v)) {
        joins.push_back(n);
        follow();
        continue;
      }
      if (scalar_factor(g, n, v)) {
        follow();
        continue;
      }
      refuse("the latent cache feeds " + node_label(g, n) + ", which latent attention fusion cannot express");
    }
  }
  for (sy_node_id n : joins) {
    // A Concat joins reached parts only; a ScatterND writes reached updates
    // into reached data or into a buffer the zero-token check shows is zero.
    if (g.is(n, "Concat")) {
      for (int32_t i = 0; i < g.input_count(n); ++i)
        if (!r.reached.count(g.input(n, i)))
          refuse("the latent cache is concatenated with something else (" + node_label(g, n) + ")");
    } else if (!r.reached.count(g.input(n, 2))) {
      refuse("the latent cache is scattered as indices or into another value (" + node_label(g, n) + ")");
    }
  }
  return r;
}

// The past values' Concat(past, new), or -1.
sy_node_id value_concat(const GraphRef& g, const Consumers& c, const KvLayer& kv) {
  std::vector<sy_node_id> users;
  for (sy_node_id n : c.of(kv.past_v))
    if (!g.is(n, "Shape") && !g.is(n, "Size")) users.push_back(n);
  return users.size() == 1 && g.is(users[0], "Concat") ? users[0] : -1;
}

// Whether either cached part feeds an up-projection (a latent cache).
bool is_latent_layer(const GraphRef& g, const Consumers& c, const KvLayer& kv, sy_node_id k_concat) {
  if (feeds_latent_projection(g, c, g.output(k_concat, 0))) return true;
  const sy_node_id v_concat = value_concat(g, c, kv);
  return v_concat >= 0 && feeds_latent_projection(g, c, g.output(v_concat, 0));
}

Match match_latent(const GraphRef& g, const Consumers& c, const KvLayer& kv, sy_node_id k_concat, const sy_model_info& info) {
  Match m;
  m.layer = kv.layer;
  m.latent = true;
  bool transposed = false;
  m.k_new = new_part_of(g, k_concat, kv.past_k, transposed);
  if (transposed) refuse("the cached keys are concatenated on their feature axis");
  const sy_node_id v_concat = value_concat(g, c, kv);
  if (v_concat < 0) refuse("the past values do not feed one Concat with the new ones");
  m.v_new = new_part_of(g, v_concat, kv.past_v, transposed);
  if (transposed) refuse("the cached values are concatenated on their feature axis");
  // The two cached parts: the key rows (A, KD values) and the value rows (B).
  const sy_value_id part_a = g.output(k_concat, 0), part_b = g.output(v_concat, 0);
  const LatentReach reach = reach_from_latent(g, c, {part_a, part_b});
  // The score product is the one whose output reaches a softmax.
  Walker w(g, c);
  sy_node_id qk = -1, pv = -1;
  std::string why = "the latent cache reaches no score product MatMul(Q, K^T)";
  for (sy_node_id n : reach.products) {
    Match trial = m;
    try {
      pv = scores_to_values(g, c, w, n, 1.f, trial);
    } catch (const Refusal& r) {
      why = r.why;
      continue;
    }
    if (qk >= 0) refuse("the latent cache feeds two score products ('" + g.name(qk) + "' and '" + g.name(n) + "')");
    qk = n;
    m = trial;
  }
  if (qk < 0) refuse(why);
  if (!reach.reached.count(g.input(pv, 1))) refuse("the value product '" + g.name(pv) + "' reads values that do not come from the latent cache");
  for (sy_node_id n : reach.products)
    if (n != qk && n != pv) refuse("the latent cache also feeds " + node_label(g, n) + ", besides the score and value products");
  m.q = g.input(qk, 0);
  m.out = g.output(pv, 0);
  m.replaced.push_back(pv);

  // Measure the maps: T = KD + VD + 1 tokens, the key rows' unit vectors,
  // the value rows', then a zero token.
  auto kshape = g.value_shape(kv.past_k), vshape = g.value_shape(kv.past_v);
  const int64_t KD = kshape && kshape->size() == 4 ? (*kshape)[3] : -1, VD = vshape && vshape->size() == 4 ? (*vshape)[3] : -1;
  if (KD <= 0 || VD <= 0 || (*kshape)[1] != 1 || (*vshape)[1] != 1)
    refuse("the latent cache's keys and values are not one static head each ([batch, 1, past, size])");
  const int64_t T = KD + VD + 1;
  if (info.max_context > 0 && T > info.max_context) refuse("the model's context is shorter than the latent's size");
  std::vector<float> a(static_cast<size_t>(T * KD), 0.f), b(static_cast<size_t>(T * VD), 0.f);
  for (int64_t i = 0; i < KD; ++i) a[static_cast<size_t>(i * KD + i)] = 1.f;
  for (int64_t i = 0; i < VD; ++i) b[static_cast<size_t>((KD + i) * VD + i)] = 1.f;
  const int64_t adims[4] = {1, 1, T, KD}, bdims[4] = {1, 1, T, VD};
  std::vector<sy::plugin::TensorView> got;
  try {
    got = g.evaluate(1, static_cast<int32_t>(T - 1), 1,
                     {{part_a, sy_tensor{SY_DTYPE_FLOAT32, 4, adims, a.data(), SY_DEVICE_CPU, 0}},
                      {part_b, sy_tensor{SY_DTYPE_FLOAT32, 4, bdims, b.data(), SY_DEVICE_CPU, 0}}},
                     {g.input(qk, 1), g.input(pv, 1), m.q});
  } catch (const Error& e) {
    refuse(std::string("its key and value maps cannot be evaluated: ") + e.what());
  }
  const auto& K = got[0];  // [1, Hk, Dq, T]
  const auto& V = got[1];  // [1, Hv, T, Dv]
  const auto& Q = got[2];  // [1, H, 1, Dq]
  if (Q.rank() != 4 || K.rank() != 4 || V.rank() != 4 || K.dtype() != SY_DTYPE_FLOAT32 || V.dtype() != SY_DTYPE_FLOAT32)
    refuse("the query, keys or values are not [batch, heads, tokens, size] float tensors");
  const int64_t H = Q.dim(1), Dq = Q.dim(3), Hk = K.dim(1), Hv = V.dim(1), Dv = V.dim(3);
  if (K.dim(2) != Dq || K.dim(3) != T || V.dim(2) != T || (Hk != 1 && Hk != H) || (Hv != 1 && Hv != H))
    refuse("the keys or values evaluate to an unexpected shape");
  const float* kd = K.data<float>();
  const float* vd = V.data<float>();
  auto key_at = [&](int64_t h, int64_t d, int64_t t) { return kd[((std::min(h, Hk - 1) * Dq) + d) * T + t]; };
  auto value_at = [&](int64_t h, int64_t t, int64_t d) { return vd[((std::min(h, Hv - 1) * T) + t) * Dv + d]; };
  bool values_read_b = false;
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t d = 0; d < Dq; ++d)
      if (key_at(h, d, T - 1) != 0.f) refuse("the keys have a part that does not come from the cache (a zero token gives nonzero keys)");
    for (int64_t d = 0; d < Dv; ++d) {
      if (value_at(h, T - 1, d) != 0.f) refuse("the values have a part that does not come from the cache (a zero token gives nonzero values)");
      for (int64_t t = KD; t < KD + VD; ++t) values_read_b = values_read_b || value_at(h, t, d) != 0.f;
    }
  }
  // q_map[h][d][j] = coordinate d of the key made from unit vector j (key rows, then value rows).
  const int64_t C = KD + VD;
  m.latent_dim = KD;
  m.value_dim = values_read_b ? C : KD;
  m.q_map_dims = {H, Dq, C};
  m.q_map.resize(static_cast<size_t>(H * Dq * C));
  for (int64_t h = 0; h < H; ++h)
    for (int64_t d = 0; d < Dq; ++d)
      for (int64_t j = 0; j < C; ++j) m.q_map[static_cast<size_t>((h * Dq + d) * C + j)] = key_at(h, d, j);
  m.out_map_dims = {H, m.value_dim, Dv};
  m.out_map.resize(static_cast<size_t>(H * m.value_dim * Dv));
  for (int64_t h = 0; h < H; ++h)
    for (int64_t j = 0; j < m.value_dim; ++j)
      for (int64_t d = 0; d < Dv; ++d) m.out_map[static_cast<size_t>((h * m.value_dim + j) * Dv + d)] = value_at(h, j, d);
  m.carried.push_back("latent attention (" + std::to_string(H) + " heads over cached rows of " + std::to_string(KD) + " + " +
                      std::to_string(VD) + ", keys of " + std::to_string(Dq) + " and values of " + std::to_string(Dv) + " absorbed" +
                      (values_read_b ? ", values reading both cached parts" : "") + ")");
  return m;
}

// Explicit attention: concat -> scores -> softmax -> value product.
Match match_explicit(const GraphRef& g, const Consumers& c, const KvLayer& kv, sy_node_id k_concat, const sy_model_info& info) {
  if (is_latent_layer(g, c, kv, k_concat)) return match_latent(g, c, kv, k_concat, info);
  Match m;
  m.layer = kv.layer;
  Walker w(g, c);
  m.k_new = new_part_of(g, k_concat, kv.past_k, m.keys_transposed);
  float scale = 1.f;
  sy_node_id qk = w.keys_to_scores(g.output(k_concat, 0), scale, m.carried);
  m.q = g.input(qk, 0);
  if (g.is(qk, "Attention")) return match_sdpa_node(g, w, kv, qk, scale, m);
  sy_node_id pv = scores_to_values(g, c, w, qk, scale, m);
  sy_node_id v_concat = w.values_to_concat(g.input(pv, 1));
  bool v_transposed = false;
  if (g.input(v_concat, 0) != kv.past_v) refuse("the value product reads a Concat of another layer's past values");
  m.v_new = new_part_of(g, v_concat, kv.past_v, v_transposed);
  if (v_transposed) refuse("the values are concatenated on the head-size axis");
  m.out = g.output(pv, 0);
  m.replaced.push_back(pv);
  return m;
}

// onnxruntime-genai's GroupQueryAttention, attribute for attribute.
Match match_gqa(const GraphRef& g, sy_node_id n, const KvLayer& kv) {
  Match m;
  m.layer = kv.layer;
  if (g.input(n, 3) != kv.past_k || g.input(n, 4) != kv.past_v) refuse("GroupQueryAttention reads another layer's past key/value");
  if (g.attr_int(n, "smooth_softmax").value_or(0) != 0) refuse("GroupQueryAttention with smooth_softmax=1");
  if (g.input_count(n) > 9 && g.input(n, 9) != SY_NO_VALUE) refuse("GroupQueryAttention with explicit position_ids");
  if (g.input_count(n) > 10 && g.input(n, 10) != SY_NO_VALUE) refuse("GroupQueryAttention with an attention_bias input");
  if (g.input_count(n) > 11 && g.input(n, 11) != SY_NO_VALUE) refuse("GroupQueryAttention with a head_sink input");
  if (g.attr_int(n, "k_quant_type").has_value()) refuse("GroupQueryAttention with a quantized KV cache");
  m.heads = g.attr_int(n, "num_heads").value_or(0);
  const int64_t kv_heads = g.attr_int(n, "kv_num_heads").value_or(0);
  if (m.heads <= 0 || kv_heads <= 0) refuse("GroupQueryAttention without num_heads/kv_num_heads");
  m.packed_layout = true;
  m.q = g.input(n, 0);
  m.k_new = g.input(n, 1);
  m.v_new = g.input(n, 2);
  m.out = g.output(n, 0);
  m.replaced.push_back(n);
  m.scale = g.attr_float(n, "scale").value_or(0.f);
  m.softcap = g.attr_float(n, "softcap").value_or(0.f);
  const int64_t lws = g.attr_int(n, "local_window_size").value_or(-1);
  m.window = lws > 0 ? lws : 0;
  if (g.attr_int(n, "do_rotary").value_or(0) != 0) {
    m.cos = g.input(n, 7);
    m.sin = g.input(n, 8);
    if (m.cos == SY_NO_VALUE || m.sin == SY_NO_VALUE) refuse("GroupQueryAttention with do_rotary=1 but no cos/sin caches");
    m.rotary_interleaved = g.attr_int(n, "rotary_interleaved").value_or(0) != 0;
    m.carried.push_back("rotary (cos/sin caches, " + std::string(m.rotary_interleaved ? "interleaved" : "halves") + ")");
  }
  m.carried.push_back("GroupQueryAttention '" + g.name(n) + "'");
  return m;
}

// What the mask probes have shown of one layer's window: rows where the
// window cut keys off give its size; rows that saw every earlier key bound it
// from below.
struct MaskState {
  std::optional<int64_t> window;  // seen exactly
  int64_t longest_full = 0;       // the longest row that saw all its keys
  int64_t verdict() const {
    if (window && longest_full > *window) refuse("the mask shows rows of " + std::to_string(longest_full) + " keys and a window of " + std::to_string(*window));
    return window.value_or(0);
  }
};

// Reads one [.., S, P+S] additive mask (the softmax input for zero scores):
// which keys each query of a step with `past` cached tokens may see. Only a
// causal mask, possibly with a sliding window, passes.
// Planes of [S, T] additive masks (float, -inf or very negative = blocked).
void classify_mask(const float* d, int64_t planes, int64_t past, int64_t fresh, MaskState& state) {
  const int64_t T = past + fresh, S = fresh;
  auto blocked = [&](float v, int64_t i, int64_t j) {
    if (v == 0.f) return false;
    if (v <= -1e4f) return true;  // -inf, the dtype's lowest, or a -10000 filter
    std::ostringstream os;
    os << "the scores get a bias that is not a 0/-inf mask (" << v << " at query " << past + i << ", key " << j
       << "): an ALiBi or relative-position bias, which the fused op cannot express";
    refuse(os.str());
  };
  for (int64_t i = 0; i < S; ++i) {
    const int64_t pos = past + i;
    int64_t first = -1, count = 0;
    for (int64_t j = 0; j < T; ++j) {
      const bool b = blocked(d[i * T + j], i, j);
      // Every (batch, head) plane must agree with the first.
      for (int64_t p = 1; p < planes; ++p)
        if (blocked(d[(p * S + i) * T + j], i, j) != b) refuse("the mask differs between heads or rows");
      if (b) continue;
      if (j > pos) refuse("the mask lets query " + std::to_string(pos) + " see the later key " + std::to_string(j) + ": not causal");
      if (first < 0) first = j;
      ++count;
    }
    if (count == 0) refuse("the mask hides every key from query " + std::to_string(pos));
    if (first + count != pos + 1) refuse("the keys query " + std::to_string(pos) + " sees are not one run ending at itself");
    if (count == pos + 1) {
      state.longest_full = std::max(state.longest_full, count);
    } else {
      if (state.window && *state.window != count)
        refuse("the mask's window changes between queries (" + std::to_string(*state.window) + " and " + std::to_string(count) + ")");
      state.window = count;
    }
  }
}

// The additive [planes, S, T] mask the softmax input shows for zero scores.
std::vector<float> explicit_mask(const sy::plugin::TensorView& t, int64_t past, int64_t fresh, int64_t& planes) {
  if (t.dtype() != SY_DTYPE_FLOAT32 || t.rank() < 2) refuse("the mask evaluates to a non-float tensor");
  const int64_t T = past + fresh, S = fresh;
  if (t.dim(t.rank() - 1) != T || t.dim(t.rank() - 2) != S)
    refuse("the mask evaluates to shape " + std::to_string(t.dim(t.rank() - 2)) + "x" + std::to_string(t.dim(t.rank() - 1)) +
           ", expected " + std::to_string(S) + "x" + std::to_string(T));
  planes = t.numel() / (S * T);
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

// ONNX Attention's mask input (bool: true attends; float: added), padded
// with -inf to the total length, with is_causal aligned to the start (no
// past input on the node), as one additive [planes, S, T] mask.
std::vector<float> sdpa_mask(const sy::plugin::TensorView* t, bool causal, int64_t past, int64_t fresh, int64_t& planes) {
  const int64_t T = past + fresh, S = fresh;
  const float blocked = -std::numeric_limits<float>::infinity();
  int64_t mp = 1, mrows = 1, mcols = T;
  if (t) {
    if (t->rank() < 2) refuse("ONNX Attention's mask evaluates to rank " + std::to_string(t->rank()));
    mrows = t->dim(t->rank() - 2);
    mcols = t->dim(t->rank() - 1);
    mp = t->numel() / std::max<int64_t>(mrows * mcols, 1);
    if ((mrows != S && mrows != 1) || mcols > T) refuse("ONNX Attention's mask does not fit the step's queries and keys");
    if (t->dtype() != SY_DTYPE_BOOL && t->dtype() != SY_DTYPE_FLOAT32) refuse("ONNX Attention's mask is neither bool nor float");
  }
  planes = mp;
  std::vector<float> out(static_cast<size_t>(mp * S * T));
  for (int64_t p = 0; p < mp; ++p)
    for (int64_t i = 0; i < S; ++i)
      for (int64_t j = 0; j < T; ++j) {
        float v = 0.f;
        if (causal && j > i) v = blocked;
        if (t) {
          if (j >= mcols) {
            v = blocked;
          } else {
            const int64_t at = (p * mrows + (mrows == 1 ? 0 : i)) * mcols + j;
            const float mv = t->dtype() == SY_DTYPE_BOOL ? (t->data<bool>()[at] ? 0.f : blocked) : t->data<float>()[at];
            v += mv;
          }
        }
        out[static_cast<size_t>((p * S + i) * T + j)] = v;
      }
  return out;
}

// A latent layer: the query through its key maps, the op over the latent
// cache, each head's value map after it.
void rewrite_latent(GraphRef& g, const Match& m, const KvLayer& kv, int64_t window_option) {
  const std::string base = "layer" + std::to_string(m.layer);
  const int64_t H = m.q_map_dims[0], C = m.q_map_dims[2], R = m.latent_dim;
  std::vector<sy_value_id> q, out, o;
  g.add_node("", "MatMul", base + "_latent_query", {m.q, g.add_constant(base + "_latent_q_map", SY_DTYPE_FLOAT32, m.q_map_dims, m.q_map.data())}, q);
  g.set_type(q[0], SY_DTYPE_FLOAT32, std::vector<int64_t>{1, H, -1, C});
  sy_node_id node = g.add_node(kDomain, kOp, base + "_paged_attention", {q[0], m.k_new, m.v_new}, out);
  g.set_attr(node, "layer", int64_t{m.layer});
  g.set_attr(node, "scale", m.scale);
  g.set_attr(node, "softcap", m.softcap);
  g.set_attr(node, "window", window_option > 0 ? window_option : m.window);
  g.set_attr(node, "kv_heads", int64_t{1});
  g.set_attr(node, "head_dim", R);
  g.set_attr(node, "value_head_dim", C - R);
  g.set_attr(node, "latent_dim", R);
  g.set_attr(node, "value_dim", m.value_dim);
  g.set_type(out[0], SY_DTYPE_FLOAT32, std::vector<int64_t>{1, H, -1, m.value_dim});
  g.add_node("", "MatMul", base + "_latent_values", {out[0], g.add_constant(base + "_latent_out_map", SY_DTYPE_FLOAT32, m.out_map_dims, m.out_map.data())}, o);
  g.set_type(o[0], SY_DTYPE_FLOAT32, g.value_shape(m.out));
  g.replace_all_uses(m.out, o[0]);
  for (sy_node_id n : m.replaced) g.remove_node(n);
  if (!kv.present_k.empty()) g.remove_output(kv.present_k);
  if (!kv.present_v.empty()) g.remove_output(kv.present_v);
  std::ostringstream os;
  os << "attention-fusion: layer " << m.layer << " fused (scale " << m.scale;
  if (m.softcap > 0) os << ", softcap " << m.softcap;
  if (m.window > 0) os << ", window " << m.window;
  os << "):";
  for (const auto& c : m.carried) os << " " << c << ";";
  sy::plugin::log(SY_LOG_INFO, os.str());
}

}  // namespace

bool AttentionFusion::run(GraphRef& g, const sy::plugin::Options& options) {
  const int64_t target_kv = options.get_int("kv_heads");
  const int64_t window_option = options.get_int("window");
  if (window_option < 0) throw Error("window must be >= 0", SY_INVALID_ARGUMENT);
  // Pooling KV heads or imposing a window changes the model's attention.
  if (target_kv > 0 || window_option > 0) g.mark_approximate("kv_heads/window options change the attention");

  std::map<int, KvLayer> layers;
  for (sy_value_id v : g.graph_inputs()) {
    auto [role, layer] = g.role(v);
    if (role != SY_ROLE_PAST_KEY && role != SY_ROLE_PAST_VALUE) continue;
    KvLayer& l = layers[layer];
    l.layer = layer;
    (role == SY_ROLE_PAST_KEY ? l.past_k : l.past_v) = v;
  }
  if (layers.empty()) throw Error("attention-fusion: the model has no past key/value inputs (not a decoder-with-past export)", SY_INVALID_ARGUMENT);
  for (int32_t i = 0; i < g.output_count(); ++i) {
    auto [role, layer] = g.role(g.output_value(i));
    if (role == SY_ROLE_PRESENT_KEY) layers[layer].present_k = g.output_name(i);
    if (role == SY_ROLE_PRESENT_VALUE) layers[layer].present_v = g.output_name(i);
  }
  const sy_model_info info = g.model_info();
  const Consumers consumers(g);

  // Layers fused already (a model written by `switchyard optimize`).
  std::set<int64_t> fused_before;
  for (sy_node_id n = 0; n < g.node_count(); ++n)
    if (g.is(n, kOp, kDomain)) fused_before.insert(g.attr_int(n, "layer").value_or(-1));

  // 1. Match every layer; a layer that cannot be fused refuses the pass.
  std::vector<Match> matches;
  for (const auto& [index, kv] : layers) {
    if (fused_before.count(index)) continue;
    try {
      std::vector<sy_node_id> users;
      for (sy_node_id n : consumers.of(kv.past_k))
        if (!g.is(n, "Shape") && !g.is(n, "Size")) users.push_back(n);
      if (users.size() != 1) refuse("the past keys feed " + std::to_string(users.size()) + " nodes, expected one");
      sy_node_id n = users[0];
      if (g.is(n, SY_ORT_OP_GROUP_QUERY_ATTENTION, SY_ORT_DOMAIN)) matches.push_back(match_gqa(g, n, kv));
      else if (g.is(n, "Concat")) matches.push_back(match_explicit(g, consumers, kv, n, info));
      else refuse("the past keys feed " + node_label(g, n) + ", neither a Concat with the new keys nor GroupQueryAttention");
    } catch (const Refusal& r) {
      throw Error("attention-fusion: layer " + std::to_string(index) + " cannot be fused: " + r.why, SY_UNSUPPORTED);
    }
  }

  // 2. Read each explicit layer's mask by evaluating it: zero scores make the
  //    softmax input the additive mask. A prefill, a chunk after a past, and
  //    a decode far enough to reveal any window the model uses.
  std::vector<size_t> explicit_layers;
  for (size_t i = 0; i < matches.size(); ++i)
    if (!matches[i].packed_layout) explicit_layers.push_back(i);
  if (!explicit_layers.empty()) {
    const int64_t ctx = info.max_context > 0 ? info.max_context : 4096;
    const int64_t long_past = std::min<int64_t>(ctx - 1, 4200);
    const std::pair<int64_t, int64_t> shapes[] = {{0, std::min<int64_t>(12, ctx)}, {std::min<int64_t>(5, ctx - 3), 3}, {long_past, 1}};
    std::map<size_t, MaskState> windows;
    for (const auto& [past, fresh] : shapes) {
      if (past + fresh > ctx || fresh < 1) continue;
      std::vector<float> zeros(static_cast<size_t>(fresh * (past + fresh)), 0.f);
      const int64_t dims[4] = {1, 1, fresh, past + fresh};
      std::vector<std::pair<sy_value_id, sy_tensor>> feeds;
      std::vector<sy_value_id> want;
      // Explicit chains: the softmax input with the scores fed as zeros.
      // ONNX Attention: its mask input as computed.
      std::vector<size_t> asked;  // index into explicit_layers of each wanted value, -1: none
      for (size_t k = 0; k < explicit_layers.size(); ++k) {
        const Match& m = matches[explicit_layers[k]];
        if (!m.sdpa) {
          feeds.push_back({m.scores, sy_tensor{SY_DTYPE_FLOAT32, 4, dims, zeros.data(), SY_DEVICE_CPU, 0}});
          want.push_back(m.softmax_in);
        } else if (m.sdpa_mask != SY_NO_VALUE) {
          want.push_back(m.sdpa_mask);
        }
      }
      std::vector<sy::plugin::TensorView> masks;
      try {
        if (!want.empty()) masks = g.evaluate(1, static_cast<int32_t>(past), static_cast<int32_t>(fresh), feeds, want);
      } catch (const Error& e) {
        throw Error("attention-fusion: cannot evaluate the model's mask (past " + std::to_string(past) + ", " +
                        std::to_string(fresh) + " new tokens): " + e.what(),
                    SY_UNSUPPORTED);
      }
      size_t next = 0;
      for (size_t k = 0; k < explicit_layers.size(); ++k) {
        Match& m = matches[explicit_layers[k]];
        try {
          int64_t planes = 1;
          std::vector<float> additive;
          if (!m.sdpa) additive = explicit_mask(masks[next++], past, fresh, planes);
          else if (m.sdpa_mask != SY_NO_VALUE) additive = sdpa_mask(&masks[next++], m.sdpa_causal, past, fresh, planes);
          else additive = sdpa_mask(nullptr, m.sdpa_causal, past, fresh, planes);
          classify_mask(additive.data(), planes, past, fresh, windows[explicit_layers[k]]);
        } catch (const Refusal& r) {
          throw Error("attention-fusion: layer " + std::to_string(m.layer) + " cannot be fused: " + r.why, SY_UNSUPPORTED);
        }
      }
    }
    for (size_t i : explicit_layers) {
      try {
        matches[i].window = windows[i].verdict();
      } catch (const Refusal& r) {
        throw Error("attention-fusion: layer " + std::to_string(matches[i].layer) + " cannot be fused: " + r.why, SY_UNSUPPORTED);
      }
      matches[i].carried.push_back(matches[i].window > 0 ? "sliding window " + std::to_string(matches[i].window) + " (from the mask)"
                                                         : "causal mask (from the mask)");
    }
  }

  // 3. Rewrite.
  for (Match& m : matches) {
    const KvLayer& kv = layers[m.layer];
    auto kshape = g.value_shape(kv.past_k);
    const int64_t kv_heads = info.kv_heads > 0 ? info.kv_heads : (kshape && kshape->size() == 4 ? (*kshape)[1] : 0);
    const int64_t head_dim = info.head_dim;
    if (kv_heads <= 0 || head_dim <= 0)
      throw Error("attention-fusion: layer " + std::to_string(m.layer) + ": the KV geometry (heads, head size) is unknown", SY_UNSUPPORTED);
    sy_value_id k_new = m.k_new, v_new = m.v_new;
    const std::string base = "layer" + std::to_string(m.layer);
    if (m.latent) {
      if (target_kv > 0) throw Error("kv_heads pooling does not apply to latent attention (layer " + std::to_string(m.layer) + ")", SY_UNSUPPORTED);
      rewrite_latent(g, m, kv, window_option);
      continue;
    }
    if (m.keys_transposed) {
      std::vector<sy_value_id> t;
      sy_node_id tr = g.add_node("", "Transpose", base + "_keys_untranspose", {k_new}, t);
      g.set_attr(tr, "perm", std::vector<int64_t>{0, 1, 3, 2});
      k_new = t[0];
    }
    int64_t op_kv_heads = kv_heads;
    if (target_kv > 0 && !m.packed_layout) {
      if (kv_heads % target_kv != 0)
        throw Error("kv_heads=" + std::to_string(target_kv) + " does not divide the model's " + std::to_string(kv_heads) + " KV heads",
                    SY_INVALID_ARGUMENT);
      if (target_kv != kv_heads) {
        k_new = pool_heads(g, k_new, kv_heads, target_kv, head_dim, base + "_k");
        v_new = pool_heads(g, v_new, kv_heads, target_kv, head_dim, base + "_v");
        op_kv_heads = target_kv;
      }
    } else if (target_kv > 0 && target_kv != kv_heads) {
      throw Error("kv_heads pooling is not supported for GroupQueryAttention models", SY_UNSUPPORTED);
    }
    if (m.packed_layout && k_new == SY_NO_VALUE) {
      // Packed QKV: split it into Q, K and V first.
      const int64_t sizes[3] = {m.heads * head_dim, kv_heads * head_dim, kv_heads * head_dim};
      sy_value_id split_sizes = g.add_constant(base + "_qkv_split", SY_DTYPE_INT64, {3}, sizes);
      std::vector<sy_value_id> parts;
      sy_node_id sp = g.add_node("", "Split", base + "_qkv_split", {m.q, split_sizes}, parts, 3);
      g.set_attr(sp, "axis", int64_t{2});
      m.q = parts[0];
      k_new = parts[1];
      v_new = parts[2];
    }
    std::vector<sy_value_id> inputs{m.q, k_new, v_new};
    if (m.cos != SY_NO_VALUE || !m.sinks.empty()) {
      inputs.push_back(m.cos);
      inputs.push_back(m.sin);
    }
    if (!m.sinks.empty())
      inputs.push_back(g.add_constant(base + "_sinks", SY_DTYPE_FLOAT32, {static_cast<int64_t>(m.sinks.size())}, m.sinks.data()));
    std::vector<sy_value_id> out;
    sy_node_id node = g.add_node(kDomain, kOp, base + "_paged_attention", inputs, out);
    const float scale = m.scale > 0.f ? m.scale : 1.f / std::sqrt(static_cast<float>(head_dim));
    g.set_attr(node, "layer", int64_t{m.layer});
    g.set_attr(node, "scale", scale);
    g.set_attr(node, "softcap", m.softcap);
    g.set_attr(node, "window", window_option > 0 ? window_option : m.window);
    g.set_attr(node, "kv_heads", op_kv_heads);
    g.set_attr(node, "head_dim", head_dim);
    if (m.packed_layout) {
      g.set_attr(node, "num_heads", m.heads);
      g.set_attr(node, "rotary_interleaved", int64_t{m.rotary_interleaved ? 1 : 0});
    }
    g.set_type(out[0], SY_DTYPE_FLOAT32, g.value_shape(m.out));
    g.replace_all_uses(m.out, out[0]);
    for (sy_node_id n : m.replaced) g.remove_node(n);
    if (!kv.present_k.empty()) g.remove_output(kv.present_k);
    if (!kv.present_v.empty()) g.remove_output(kv.present_v);
    std::ostringstream os;
    os << "attention-fusion: layer " << m.layer << " fused (scale " << scale;
    if (m.softcap > 0) os << ", softcap " << m.softcap;
    if (m.window > 0) os << ", window " << m.window;
    os << "):";
    for (const auto& c : m.carried) os << " " << c << ";";
    sy::plugin::log(SY_LOG_INFO, os.str());
  }
  sy::plugin::log(SY_LOG_INFO, "attention-fusion: fused " + std::to_string(matches.size()) + " attention layers");
  return !matches.empty();
}

}  // namespace sy_attention
