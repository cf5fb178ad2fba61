#include "graph_match.h"

#include <string>
#include <utility>

namespace sy_fused {

std::optional<float> scalar_f32(const GraphRef& g, sy_value_id v) {
  auto t = g.constant(v);
  if (!t || t->numel() != 1 || t->dtype() != SY_DTYPE_FLOAT32) return std::nullopt;
  return t->data<float>()[0];
}

std::optional<std::vector<int64_t>> int_constant(const GraphRef& g, sy_value_id v) {
  auto t = g.constant(v);
  if (!t) return std::nullopt;
  std::vector<int64_t> out(static_cast<size_t>(t->numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    if (t->dtype() == SY_DTYPE_INT64) out[i] = t->data<int64_t>()[i];
    else if (t->dtype() == SY_DTYPE_INT32) out[i] = t->data<int32_t>()[i];
    else return std::nullopt;
  }
  return out;
}

sy_node_id producer_with_readers(const GraphRef& g, sy_value_id v, const char* op, int32_t readers) {
  sy_node_id n = g.producer(v);
  if (n < 0 || !g.is(n, op) || g.use_count(v) != readers || g.is_graph_output(v)) return -1;
  return n;
}

sy_node_id single_use_producer(const GraphRef& g, sy_value_id v, const char* op) { return producer_with_readers(g, v, op, 1); }

std::vector<sy_node_id> readers(const GraphRef& g, sy_value_id v) {
  std::vector<sy_node_id> out;
  for (sy_node_id n = 0; n < g.node_count(); ++n) {
    if (g.op_type(n).empty()) continue;  // removed
    for (int32_t i = 0; i < g.input_count(n); ++i)
      if (g.input(n, i) == v) {
        out.push_back(n);
        break;
      }
  }
  return out;
}

std::optional<std::vector<int64_t>> reduce_axes(const GraphRef& g, sy_node_id n) {
  if (g.input_count(n) > 1) return g.input(n, 1) == SY_NO_VALUE ? std::nullopt : int_constant(g, g.input(n, 1));
  return g.attr_ints(n, "axes");
}

std::vector<ProbeFacts> evaluate_on_probes(const GraphRef& g, const std::vector<sy_value_id>& values, const char* what) {
  std::vector<ProbeFacts> out;
  if (values.empty()) return out;
  try {
    for (auto [past, len] : {std::pair{0, 4}, std::pair{3, 2}}) {
      auto views = g.evaluate(1, past, len, {}, values);
      ProbeFacts f;
      for (size_t i = 0; i < values.size(); ++i) {
        const auto& t = views[i];
        f.dims[values[i]] = t.dims();
        if (t.numel() <= 8 && (t.dtype() == SY_DTYPE_INT64 || t.dtype() == SY_DTYPE_INT32)) {
          std::vector<int64_t> v(static_cast<size_t>(t.numel()));
          for (size_t k = 0; k < v.size(); ++k) v[k] = t.dtype() == SY_DTYPE_INT64 ? t.data<int64_t>()[k] : t.data<int32_t>()[k];
          f.ints[values[i]] = v;
        }
      }
      out.push_back(std::move(f));
    }
  } catch (const sy::plugin::Error& e) {
    sy::plugin::log(SY_LOG_INFO, std::string("fuse-pointwise: ") + what + " could not be evaluated, left unfused: " + e.what());
    return {};
  }
  return out;
}

}  // namespace sy_fused
