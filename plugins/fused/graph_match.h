// Small graph queries the fused plugin's matchers share: constants of a
// given kind, producers with a given number of readers, ReduceMean's axes.
#pragma once
#include <map>
#include <optional>
#include <vector>

#include "fused_plugin.h"

namespace sy_fused {

using sy::plugin::GraphRef;

// A float32 scalar constant (any shape with one element).
std::optional<float> scalar_f32(const GraphRef& g, sy_value_id v);
// An int32/int64 constant's values.
std::optional<std::vector<int64_t>> int_constant(const GraphRef& g, sy_value_id v);

// The ONNX node producing v if it is `op` (default domain) and v has exactly
// one reader and is no graph output; -1 otherwise.
sy_node_id single_use_producer(const GraphRef& g, sy_value_id v, const char* op);
// The same with exactly `readers` readers.
sy_node_id producer_with_readers(const GraphRef& g, sy_value_id v, const char* op, int32_t readers);

// The live nodes that read v.
std::vector<sy_node_id> readers(const GraphRef& g, sy_value_id v);

// The axes of a ReduceMean (attribute or opset-18 input), if constant.
std::optional<std::vector<int64_t>> reduce_axes(const GraphRef& g, sy_node_id n);

// The dims and small integer contents of values evaluated on one synthetic
// decoder step.
struct ProbeFacts {
  std::map<sy_value_id, std::vector<int64_t>> dims, ints;
};
// `values` evaluated on two synthetic decoder steps of different lengths
// (one batch, whatever the number of values). Exporters compute shapes from
// Shape nodes and many exports leave them unknown to static inference; a
// property that holds on both steps is taken, and the host's equivalence
// probe then checks the rewrite. Empty (with a log line naming `what`) when
// the host cannot evaluate them.
std::vector<ProbeFacts> evaluate_on_probes(const GraphRef& g, const std::vector<sy_value_id>& values, const char* what);

// A rotary embedding on q or k (rotary_match.cpp): switchyard::Rotary's
// operands and attributes, the value it replaces and the nodes that die.
struct RotaryMatch {
  sy_value_id x, cos, sin, out;
  bool interleaved;
  std::vector<sy_node_id> nodes;
};
// Every rotary of the graph, confirmed on evaluated shapes.
std::vector<RotaryMatch> match_rotaries(const GraphRef& g);

}  // namespace sy_fused
