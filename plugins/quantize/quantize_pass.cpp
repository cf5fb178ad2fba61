// The quantize pass: MatMul(A, W) and Gemm(A, W, bias) with a constant fp32
// W, and weight-only QDQ (MatMul(A, DequantizeLinear(W8, scale, zp))), become
// one quantized matmul node per weight. Options pick the scheme, per node
// name pattern: skip the LM head, int8 for attention, int4 elsewhere, ...
// switchyard::ExpertMatMul (the moe plugin's fuse-experts, which must run
// first) becomes ExpertMatMulNBits, every expert in the node's scheme.
// Sibling matmuls (one input, one format: q/k/v, gate/up) become one node
// over their concatenated rows and a Split (fuse_siblings): every output
// row is computed as it was, and a decode step has three fewer parallel
// regions per layer.
#include <fnmatch.h>

#include <cmath>
#include <map>
#include <tuple>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "quantize_plugin.h"

namespace sy_quant {

namespace {

using sy::plugin::Error;
using sy::plugin::GraphRef;

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, sep);)
    if (!trim(item).empty()) out.push_back(trim(item));
  return out;
}

struct Rule {
  std::string pattern;
  std::optional<QuantSpec> spec;  // nullopt: keep fp32
};

// Scheme per node: the first rule whose glob matches the node's name or its
// weight's name; skip patterns are rules to "none"; else the default.
class SchemeTable {
 public:
  explicit SchemeTable(const sy::plugin::Options& o) {
    const int64_t group = o.get_int("group_size");
    auto parse = [&](const std::string& scheme, const std::string& where) -> std::optional<QuantSpec> {
      if (scheme == "none" || scheme == "fp32") return std::nullopt;
      try {
        return parse_scheme(scheme, group);
      } catch (const std::exception& e) {
        throw Error(where + ": " + e.what(), SY_INVALID_ARGUMENT);
      }
    };
    for (const auto& p : split(o.get_string("skip"), ',')) rules_.push_back({p, std::nullopt});
    for (const auto& r : split(o.get_string("rules"), ',')) {
      auto eq = r.find('=');
      if (eq == std::string::npos) throw Error("rules: '" + r + "' is not PATTERN=SCHEME", SY_INVALID_ARGUMENT);
      rules_.push_back({trim(r.substr(0, eq)), parse(trim(r.substr(eq + 1)), "rules '" + r + "'")});
    }
    default_ = parse(o.get_string("scheme"), "scheme");
  }
  std::optional<QuantSpec> lookup(const std::string& node, const std::string& weight) const {
    for (const auto& r : rules_)
      if (fnmatch(r.pattern.c_str(), node.c_str(), 0) == 0 || fnmatch(r.pattern.c_str(), weight.c_str(), 0) == 0) return r.spec;
    return default_;
  }

 private:
  std::vector<Rule> rules_;
  std::optional<QuantSpec> default_;
};

bool is_power_of_two(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

struct Rewrite {
  sy_node_id node;
  sy_value_id a, out;
  QuantizedWeight q;
  std::vector<float> bias;
};

// MatMulNBits' constant inputs for q: codes, scales, zero points (none when
// symmetric).
struct StoredWeight {
  sy_value_id codes, scales, zero_points;
};
StoredWeight add_weight_constants(GraphRef& g, const QuantizedWeight& q, const std::string& base) {
  StoredWeight s;
  s.codes = g.add_constant(base + "_qweight", SY_DTYPE_UINT8, {q.N, q.n_blocks, q.blob_bytes()}, q.codes.data());
  s.scales = g.add_constant(base + "_scales", SY_DTYPE_FLOAT32, {q.N * q.n_blocks}, q.scales.data());
  s.zero_points = !q.float_zero_points.empty()
                      ? g.add_constant(base + "_zero_points", SY_DTYPE_FLOAT32, {static_cast<int64_t>(q.float_zero_points.size())},
                                       q.float_zero_points.data())
                  : q.zero_points.empty()
                      ? SY_NO_VALUE
                      : g.add_constant(base + "_zero_points", SY_DTYPE_UINT8, {static_cast<int64_t>(q.zero_points.size())}, q.zero_points.data());
  return s;
}

// Rows of `part` appended to `all` (MatMulNBits' layout is row-major in N).
void append_rows(QuantizedWeight& all, const QuantizedWeight& part) {
  if (all.N == 0) {
    all = part;
    return;
  }
  all.N += part.N;
  all.codes.insert(all.codes.end(), part.codes.begin(), part.codes.end());
  all.scales.insert(all.scales.end(), part.scales.begin(), part.scales.end());
  all.zero_points.insert(all.zero_points.end(), part.zero_points.begin(), part.zero_points.end());
  all.float_zero_points.insert(all.float_zero_points.end(), part.float_zero_points.begin(), part.float_zero_points.end());
}

// Adds the quantized node for r.q reading r.a; returns its output.
sy_value_id emit_node(GraphRef& g, const Rewrite& r, const std::string& base) {
  const QuantizedWeight& q = r.q;
  const StoredWeight w = add_weight_constants(g, q, base);
  std::vector<sy_value_id> inputs{r.a, w.codes, w.scales, w.zero_points};
  if (!r.bias.empty()) {
    inputs.push_back(SY_NO_VALUE);  // g_idx
    inputs.push_back(g.add_constant(base + "_bias", SY_DTYPE_FLOAT32, {q.N}, r.bias.data()));
  }
  // ONNX Runtime's op when its constraints hold, so other runtimes can read
  // the optimized model; else the same op in our domain.
  const bool ort = is_power_of_two(q.block_size) && q.block_size >= 16;
  std::vector<sy_value_id> out;
  sy_node_id n = g.add_node(ort ? kOrtDomain : kDomain, ort ? kOrtOp : kOp, base + "_q" + std::to_string(q.bits), inputs, out);
  g.set_attr(n, "K", q.K);
  g.set_attr(n, "N", q.N);
  g.set_attr(n, "bits", int64_t{q.bits});
  g.set_attr(n, "block_size", q.block_size);
  return out[0];
}

// Adds the quantized node in place of r.node.
void emit(GraphRef& g, const Rewrite& r) {
  sy_value_id out = emit_node(g, r, g.name(r.node));
  g.set_type(out, SY_DTYPE_FLOAT32, g.value_shape(r.out));
  g.replace_all_uses(r.out, out);
  g.remove_node(r.node);
}

// Siblings: same input, same format, no bias (a bias would have to be
// concatenated too; exports with biased q/k/v, Qwen2's, stay separate).
using SiblingKey = std::tuple<sy_value_id, int, int64_t, int64_t, bool, bool>;
SiblingKey sibling_key(const Rewrite& r) {
  return {r.a, r.q.bits, r.q.block_size, r.q.K, r.q.zero_points.empty(), r.q.float_zero_points.empty()};
}

// One node over the siblings' rows, in order, and a Split of its last axis
// back into their outputs. Rows are independent in every kernel path (a
// row's sums never see another row), so each output keeps its bits.
void emit_siblings(GraphRef& g, const std::vector<const Rewrite*>& group) {
  Rewrite fused{group[0]->node, group[0]->a, SY_NO_VALUE, group[0]->q, {}};
  std::vector<int64_t> parts{fused.q.N};
  std::string base = g.name(group[0]->node);
  for (size_t i = 1; i < group.size(); ++i) {
    append_rows(fused.q, group[i]->q);
    parts.push_back(group[i]->q.N);
    base.push_back('+');
    base += g.name(group[i]->node);
  }
  const sy_value_id joined = emit_node(g, fused, base);
  std::vector<sy_value_id> inputs{joined};
  const int64_t opset = g.opset("");
  if (opset >= 13) inputs.push_back(g.add_constant(base + "_split", SY_DTYPE_INT64, {static_cast<int64_t>(parts.size())}, parts.data()));
  std::vector<sy_value_id> outs;
  sy_node_id split = g.add_node("", "Split", base + "_split", inputs, outs, static_cast<int32_t>(group.size()));
  g.set_attr(split, "axis", int64_t{-1});
  if (opset < 13) g.set_attr(split, "split", parts);
  for (size_t i = 0; i < group.size(); ++i) {
    g.set_type(outs[i], SY_DTYPE_FLOAT32, g.value_shape(group[i]->out));
    g.replace_all_uses(group[i]->out, outs[i]);
    g.remove_node(group[i]->node);
  }
}

// W [K, N] fp32 of a MatMul/Gemm, transposed/scaled as the node uses it.
std::optional<std::vector<float>> float_weight(const GraphRef& g, sy_value_id v, bool transposed, float alpha, int64_t& K, int64_t& N) {
  auto t = g.constant(v);
  if (!t || t->dtype() != SY_DTYPE_FLOAT32 || t->rank() != 2 || t->numel() == 0) return std::nullopt;
  K = transposed ? t->dim(1) : t->dim(0);
  N = transposed ? t->dim(0) : t->dim(1);
  std::vector<float> w(static_cast<size_t>(K * N));
  const float* src = t->data<float>();
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) w[static_cast<size_t>(k * N + n)] = alpha * (transposed ? src[n * K + k] : src[k * N + n]);
  return w;
}

// Weight-only QDQ: B = DequantizeLinear(W8 [K, N] const, scale, zero_point)
// per tensor or per output channel (axis 1) maps onto per-channel int8 codes.
std::optional<QuantizedWeight> qdq_weight(const GraphRef& g, sy_value_id b, std::string& weight_name) {
  sy_node_id dq = g.producer(b);
  if (dq < 0 || !g.is(dq, "DequantizeLinear")) return std::nullopt;
  auto x = g.constant(g.input(dq, 0));
  auto s = g.constant(g.input_count(dq) > 1 ? g.input(dq, 1) : SY_NO_VALUE);
  auto z = g.constant(g.input_count(dq) > 2 ? g.input(dq, 2) : SY_NO_VALUE);
  if (!x || !s || x->rank() != 2 || s->dtype() != SY_DTYPE_FLOAT32) return std::nullopt;
  if (x->dtype() != SY_DTYPE_INT8 && x->dtype() != SY_DTYPE_UINT8) return std::nullopt;
  const int64_t K = x->dim(0), N = x->dim(1);
  const int64_t axis = g.attr_int(dq, "axis").value_or(1);
  const bool per_channel = s->numel() != 1;
  if (per_channel && ((axis != 1 && axis != -1) || s->numel() != N)) return std::nullopt;
  if (z && (z->dtype() != x->dtype() || z->numel() != s->numel())) return std::nullopt;
  const int offset = x->dtype() == SY_DTYPE_INT8 ? 128 : 0;  // codes are unsigned
  QuantizedWeight q;
  q.bits = 8;
  q.K = K;
  q.N = N;
  q.block_size = K;
  q.n_blocks = 1;
  q.codes.resize(static_cast<size_t>(K * N));
  q.scales.resize(static_cast<size_t>(N));
  q.zero_points.resize(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) {
    const int64_t c = per_channel ? n : 0;
    q.scales[static_cast<size_t>(n)] = s->data<float>()[c];
    int zp = z ? (offset ? z->data<int8_t>()[c] : z->data<uint8_t>()[c]) : 0;
    q.zero_points[static_cast<size_t>(n)] = static_cast<uint8_t>(zp + offset);
    for (int64_t k = 0; k < K; ++k) {
      int v = offset ? x->data<int8_t>()[k * N + n] : x->data<uint8_t>()[k * N + n];
      q.codes[static_cast<size_t>(n * K + k)] = static_cast<uint8_t>(v + offset);
    }
  }
  weight_name = g.value_name(g.input(dq, 0));
  return q;
}

// switchyard::ExpertMatMul(x, experts, weight [E, ., .]) with a constant
// weight becomes ExpertMatMulNBits: each expert quantized as the matrix it
// multiplies by ([K, N], MatMul's B), the experts' rows stacked.
bool quantize_experts(GraphRef& g, sy_node_id n, const QuantSpec& spec, int64_t& bytes_before, int64_t& bytes_after) {
  auto w = g.constant(g.input(n, 2));
  if (!w || w->dtype() != SY_DTYPE_FLOAT32 || w->rank() != 3) return false;
  const bool columns = g.attr_int(n, "columns").value_or(0) != 0;
  const int64_t E = w->dim(0), K = columns ? w->dim(2) : w->dim(1), N = columns ? w->dim(1) : w->dim(2);
  QuantizedWeight all;
  std::vector<float> we(static_cast<size_t>(K * N));
  for (int64_t e = 0; e < E; ++e) {
    const float* src = w->data<float>() + e * K * N;
    for (int64_t k = 0; k < K; ++k)
      for (int64_t c = 0; c < N; ++c) we[static_cast<size_t>(k * N + c)] = columns ? src[c * K + k] : src[k * N + c];
    try {
      append_rows(all, quantize(we.data(), K, N, spec));
    } catch (const std::exception& ex) {
      throw Error("quantize: node '" + g.name(n) + "', expert " + std::to_string(e) + ": " + ex.what(), SY_INVALID_ARGUMENT);
    }
  }
  const std::string base = g.name(n);
  const StoredWeight stored = add_weight_constants(g, all, base);
  std::vector<sy_value_id> out;
  sy_node_id q = g.add_node(kDomain, kExpertOp, base + "_q" + std::to_string(all.bits),
                            {g.input(n, 0), g.input(n, 1), stored.codes, stored.scales, stored.zero_points}, out);
  g.set_attr(q, "K", K);
  g.set_attr(q, "N", N);
  g.set_attr(q, "bits", int64_t{all.bits});
  g.set_attr(q, "block_size", all.block_size);
  g.set_attr(q, "experts", E);
  g.set_attr(q, "columns", int64_t{columns});
  g.set_type(out[0], SY_DTYPE_FLOAT32, g.value_shape(g.output(n, 0)));
  g.replace_all_uses(g.output(n, 0), out[0]);
  g.remove_node(n);
  bytes_before += E * K * N * 4;
  bytes_after += static_cast<int64_t>(all.codes.size() + all.scales.size() * 4 + all.zero_points.size() + all.float_zero_points.size() * 4);
  return true;
}

}  // namespace

bool QuantizePass::run(GraphRef& g, const sy::plugin::Options& options) {
  SchemeTable table(options);
  int quantized = 0, from_qdq = 0, kept = 0, experts = 0;
  int64_t bytes_before = 0, bytes_after = 0;
  std::vector<Rewrite> rewrites;  // emitted after the scan, siblings together
  std::vector<std::string> left;  // constant-weight matmuls the pass cannot take, and why
  const int32_t count = g.node_count();
  for (sy_node_id n = 0; n < count; ++n) {
    if (g.is(n, "ExpertMatMul", kDomain)) {
      auto spec = table.lookup(g.name(n), g.value_name(g.input(n, 2)));
      if (!spec) ++kept;
      else if (quantize_experts(g, n, *spec, bytes_before, bytes_after)) ++experts;
      else left.push_back("ExpertMatMul '" + g.name(n) + "': its expert stack is not a constant float32 [E, ., .]");
      continue;
    }
    const bool matmul = g.is(n, "MatMul"), gemm = g.is(n, "Gemm");
    if (!matmul && !gemm) continue;
    Rewrite r{n, g.input(n, 0), g.output(n, 0), {}, {}};
    const sy_value_id b = g.input(n, 1);
    std::string weight_name = g.value_name(b);
    if (matmul) {
      if (auto q = qdq_weight(g, b, weight_name)) {
        r.q = std::move(*q);
        bytes_before += r.q.K * r.q.N;
        bytes_after += static_cast<int64_t>(r.q.codes.size() + r.q.scales.size() * 4 + r.q.zero_points.size() + r.q.float_zero_points.size() * 4);
        rewrites.push_back(std::move(r));
        ++from_qdq;
        continue;
      }
    }
    float alpha = 1.f, beta = 1.f;
    bool trans_b = false;
    if (gemm) {
      if (g.attr_int(n, "transA").value_or(0) != 0) {
        if (g.constant(b)) left.push_back("Gemm '" + g.name(n) + "': transA (its A transposed)");
        continue;
      }
      trans_b = g.attr_int(n, "transB").value_or(0) != 0;
      alpha = g.attr_float(n, "alpha").value_or(1.f);
      beta = g.attr_float(n, "beta").value_or(1.f);
    }
    int64_t K = 0, N = 0;
    if (!g.constant(b)) continue;
    auto spec = table.lookup(g.name(n), weight_name);
    if (!spec) {
      ++kept;
      continue;
    }
    auto w = float_weight(g, b, trans_b, alpha, K, N);
    if (!w) {
      left.push_back(g.op_type(n) + " '" + g.name(n) + "': its constant weight is not a float32 matrix");
      continue;
    }
    if (gemm && g.input_count(n) > 2 && g.input(n, 2) != SY_NO_VALUE) {
      auto c = g.constant(g.input(n, 2));
      if (!c || c->dtype() != SY_DTYPE_FLOAT32 || (c->numel() != N && c->numel() != 1)) {
        left.push_back("Gemm '" + g.name(n) + "': its C is not a constant bias of N values");
        continue;
      }
      r.bias.resize(static_cast<size_t>(N));
      for (int64_t i = 0; i < N; ++i) r.bias[static_cast<size_t>(i)] = beta * c->data<float>()[c->numel() == 1 ? 0 : i];
    }
    try {
      r.q = quantize(w->data(), K, N, *spec);
    } catch (const std::exception& e) {
      throw Error("quantize: node '" + g.name(n) + "': " + e.what(), SY_INVALID_ARGUMENT);
    }
    bytes_before += K * N * 4;
    bytes_after += static_cast<int64_t>(r.q.codes.size() + r.q.scales.size() * 4 + r.q.zero_points.size() + r.q.float_zero_points.size() * 4);
    rewrites.push_back(std::move(r));
    ++quantized;
  }
  // Group siblings in the order their first member was found.
  std::vector<std::vector<const Rewrite*>> groups;
  std::map<SiblingKey, size_t> group_of;
  const bool fuse_siblings = options.get_bool("fuse_siblings");
  for (const Rewrite& r : rewrites) {
    if (!fuse_siblings || !r.bias.empty()) {
      groups.push_back({&r});
      continue;
    }
    auto [it, fresh] = group_of.emplace(sibling_key(r), groups.size());
    if (fresh) groups.emplace_back();
    groups[it->second].push_back(&r);
  }
  int fused = 0;
  for (const auto& found : groups) {
    // Members whose rows fill whole prefill tiles first, then at most one
    // that does not (its last tile is then the one it had alone); any other
    // stays separate.
    std::vector<const Rewrite*> group, alone;
    for (const Rewrite* r : found) (r->q.N % kPrefillTileRows == 0 ? group : alone).push_back(r);
    if (!alone.empty()) {
      group.push_back(alone.front());
      alone.erase(alone.begin());
    }
    if (group.size() == 1) {
      emit(g, *group[0]);
    } else {
      emit_siblings(g, group);
      fused += static_cast<int>(group.size());
    }
    for (const Rewrite* r : alone) emit(g, *r);
  }
  std::ostringstream msg;
  msg << "quantize: " << quantized << " weights quantized, " << experts << " expert stacks, " << from_qdq << " QDQ weights mapped, " << kept
      << " kept in fp32 by rule; weight bytes " << bytes_before << " -> " << bytes_after << "; " << fused
      << " siblings joined";
  sy::plugin::log(SY_LOG_INFO, msg.str());
  if (!left.empty()) {
    std::string list;
    for (const auto& l : left) {
      if (!list.empty()) list += "; ";
      list += l;
    }
    sy::plugin::log(SY_LOG_WARNING, "quantize: " + std::to_string(left.size()) + " matmuls with constant weights kept in fp32: " + list);
  }
  // Re-quantized weights change the outputs by design (eval measures by how
  // much); weights mapped from QDQ keep their values and stay probed.
  if (quantized + experts > 0) g.mark_approximate(std::to_string(quantized + experts) + " weights quantized");
  return quantized + from_qdq + experts > 0;
}

}  // namespace sy_quant
