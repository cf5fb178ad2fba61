// Recognizes rotary position embedding as exporters write it, on q or k:
//   halves       Add(Mul(x, cos), Mul(Concat(Neg(Slice(x, h:)), Slice(x, :h)), sin))
//                (Hugging Face rotate_half)
//   interleaved  Reshape(Concat(Unsqueeze(Sub(Mul(e, c), Mul(o, s))),
//                               Unsqueeze(Add(Mul(e, s), Mul(o, c)))), shape of x)
//                with e = Slice(x, 0::2), o = Slice(x, 1::2) on the last axis
// Operands of Add and Mul in either order. Partial rotary (a Slice of the
// head first, a Concat with the rest after) matches on the rotated part.
//
// The structure is matched first. Whether the slices split x's last axis
// in halves (or pairs), the Concat joins on it and cos/sin broadcast onto x
// is then read from evaluated values: exporters compute slice bounds from
// Shape(x) and many exports leave shapes unknown to static inference, so
// every candidate's shapes and bounds are evaluated on two synthetic decoder
// steps (one batch for all candidates) and must hold on both. The host's
// equivalence probe then runs the fused graph against the export.
#include <algorithm>

#include "graph_match.h"

namespace sy_fused {
namespace {

using Ints = std::vector<int64_t>;
using Facts = ProbeFacts;

// The one-element integer operand of a Slice/Unsqueeze: an attribute before
// opset 10/13, a constant or an evaluated input after.
struct Operand {
  sy_value_id value = SY_NO_VALUE;
  std::optional<int64_t> fixed;  // attribute, constant or default
  std::optional<int64_t> on(const Facts& f) const {
    if (fixed || value == SY_NO_VALUE) return fixed;
    auto it = f.ints.find(value);
    if (it == f.ints.end() || it->second.size() != 1) return std::nullopt;
    return it->second[0];
  }
};

Operand operand(const GraphRef& g, sy_node_id n, int32_t input, const char* attr, std::optional<int64_t> absent) {
  Operand o;
  std::optional<Ints> v;
  if (g.input_count(n) > 1 || !attr) {
    if (input >= g.input_count(n) || g.input(n, input) == SY_NO_VALUE) return Operand{SY_NO_VALUE, absent};
    o.value = g.input(n, input);
    v = int_constant(g, o.value);
    if (!v) return o;  // evaluated later
  } else {
    v = g.attr_ints(n, attr);
    if (!v) return Operand{SY_NO_VALUE, absent};
  }
  if (v->size() == 1) o.fixed = (*v)[0];
  else o.value = SY_NO_VALUE;  // several entries: never a one-axis operand
  return o;
}

struct Slice {
  Operand start, end, axis, step;
};

Slice slice_of(const GraphRef& g, sy_node_id n) {
  return Slice{operand(g, n, 1, "starts", std::nullopt), operand(g, n, 2, "ends", std::nullopt), operand(g, n, 3, "axes", int64_t{0}),
               operand(g, n, 4, "steps", int64_t{1})};
}

std::optional<int64_t> normalize_axis(std::optional<int64_t> axis, int64_t rank) {
  if (!axis) return std::nullopt;
  int64_t a = *axis < 0 ? *axis + rank : *axis;
  return a >= 0 && a < rank ? std::optional<int64_t>(a) : std::nullopt;
}

// The slice takes [start, end) with `step` on x's last axis (end == dim:
// anything at or past the axis' end).
bool slice_takes(const Slice& s, const Facts& f, const Ints& x, int64_t start, int64_t end, int64_t step) {
  const int64_t rank = static_cast<int64_t>(x.size()), dim = x.back();
  auto a = normalize_axis(s.axis.on(f), rank);
  auto b = s.start.on(f), e = s.end.on(f), st = s.step.on(f);
  if (!a || *a != rank - 1 || !b || !e || !st || *st != step) return false;
  const int64_t lo = *b < 0 ? *b + dim : *b, hi = std::min(*e < 0 ? *e + dim : *e, dim);
  return lo == start && hi == end;
}

// cos/sin rows of `width` broadcast onto x, never x onto them.
bool broadcasts_onto(const Ints* cs, const Ints& x, int64_t width) {
  if (!cs || cs->empty() || cs->size() > x.size() || cs->back() != width) return false;
  const size_t off = x.size() - cs->size();
  for (size_t d = 0; d + 1 < cs->size(); ++d)
    if ((*cs)[d] != 1 && (*cs)[d] != x[d + off]) return false;
  return true;
}

// A structurally matched rotary, to be confirmed on evaluated values.
struct Candidate {
  RotaryMatch match;
  Slice first, second;         // halves: upper, lower; interleaved: even, odd
  sy_node_id concat = -1;      // joins on x's last axis (halves) or a new one (interleaved)
  Operand unsqueeze_even, unsqueeze_odd;  // interleaved
  std::vector<sy_value_id> needs() const {
    std::vector<sy_value_id> v{match.x, match.cos, match.sin, match.out};
    for (const Slice* s : {&first, &second})
      for (const Operand* o : {&s->start, &s->end, &s->axis, &s->step})
        if (o->value != SY_NO_VALUE && !o->fixed) v.push_back(o->value);
    for (const Operand* o : {&unsqueeze_even, &unsqueeze_odd})
      if (o->value != SY_NO_VALUE && !o->fixed) v.push_back(o->value);
    return v;
  }
};

bool holds(const GraphRef& g, const Candidate& c, const Facts& f) {
  auto find = [&](sy_value_id v) -> const Ints* {
    auto it = f.dims.find(v);
    return it == f.dims.end() ? nullptr : &it->second;
  };
  const Ints* x = find(c.match.x);
  const Ints* out = find(c.match.out);
  if (!x || x->empty() || !out || *out != *x) return false;  // the rotary keeps x's shape
  const int64_t rank = static_cast<int64_t>(x->size()), dim = x->back();
  if (dim <= 0 || dim % 2 != 0) return false;
  const int64_t cat_rank = c.match.interleaved ? rank + 1 : rank;
  if (normalize_axis(g.attr_int(c.concat, "axis"), cat_rank) != cat_rank - 1) return false;
  if (!c.match.interleaved)
    return slice_takes(c.first, f, *x, dim / 2, dim, 1) && slice_takes(c.second, f, *x, 0, dim / 2, 1) &&
           broadcasts_onto(find(c.match.cos), *x, dim) && broadcasts_onto(find(c.match.sin), *x, dim);
  return slice_takes(c.first, f, *x, 0, dim, 2) && slice_takes(c.second, f, *x, 1, dim, 2) &&
         normalize_axis(c.unsqueeze_even.on(f), rank + 1) == rank && normalize_axis(c.unsqueeze_odd.on(f), rank + 1) == rank &&
         broadcasts_onto(find(c.match.cos), *x, dim / 2) && broadcasts_onto(find(c.match.sin), *x, dim / 2);
}

// The other operand of a binary node, given one of them.
sy_value_id other_operand(const GraphRef& g, sy_node_id n, sy_value_id one) {
  if (g.input(n, 0) == one) return g.input(n, 1);
  if (g.input(n, 1) == one) return g.input(n, 0);
  return SY_NO_VALUE;
}

std::optional<Candidate> match_halves(const GraphRef& g, sy_node_id add) {
  for (int ai = 0; ai < 2; ++ai) {
    sy_node_id direct = single_use_producer(g, g.input(add, ai), "Mul"), rotated = single_use_producer(g, g.input(add, 1 - ai), "Mul");
    if (direct < 0 || rotated < 0) continue;
    for (int qi = 0; qi < 2; ++qi) {
      sy_node_id cat = single_use_producer(g, g.input(rotated, qi), "Concat");
      if (cat < 0 || g.input_count(cat) != 2) continue;
      sy_node_id neg = single_use_producer(g, g.input(cat, 0), "Neg");
      if (neg < 0) continue;
      sy_node_id upper = single_use_producer(g, g.input(neg, 0), "Slice");
      sy_node_id lower = single_use_producer(g, g.input(cat, 1), "Slice");
      if (upper < 0 || lower < 0 || g.input(upper, 0) != g.input(lower, 0)) continue;
      const sy_value_id x = g.input(upper, 0), cos = other_operand(g, direct, x);
      if (cos == SY_NO_VALUE) continue;
      Candidate c;
      c.match = RotaryMatch{x, cos, g.input(rotated, 1 - qi), g.output(add, 0), false, {add, direct, rotated, cat, neg, upper, lower}};
      c.first = slice_of(g, upper);
      c.second = slice_of(g, lower);
      c.concat = cat;
      return c;
    }
  }
  return std::nullopt;
}

// The pairs' Concat: read by the Reshape, and by the Shape nodes an exporter
// computes the Reshape's target from (they die with it).
sy_node_id pairs_concat(const GraphRef& g, sy_value_id pairs) {
  sy_node_id cat = g.producer(pairs);
  if (cat < 0 || !g.is(cat, "Concat") || g.input_count(cat) != 2 || g.is_graph_output(pairs)) return -1;
  int others = 0;
  for (sy_node_id r : readers(g, pairs)) others += g.is(r, "Shape") ? 0 : 1;
  return others == 1 ? cat : -1;
}

std::optional<Candidate> match_interleaved(const GraphRef& g, sy_node_id reshape) {
  sy_node_id cat = pairs_concat(g, g.input(reshape, 0));
  if (cat < 0) return std::nullopt;
  sy_node_id ue = single_use_producer(g, g.input(cat, 0), "Unsqueeze"), uo = single_use_producer(g, g.input(cat, 1), "Unsqueeze");
  if (ue < 0 || uo < 0) return std::nullopt;
  sy_node_id even_out = single_use_producer(g, g.input(ue, 0), "Sub"), odd_out = single_use_producer(g, g.input(uo, 0), "Add");
  if (even_out < 0 || odd_out < 0) return std::nullopt;
  // even' = e*c - o*s: the Sub's operands fix which slice is e and which factor is c.
  sy_node_id ec = single_use_producer(g, g.input(even_out, 0), "Mul"), os = single_use_producer(g, g.input(even_out, 1), "Mul");
  if (ec < 0 || os < 0) return std::nullopt;
  for (int ei = 0; ei < 2; ++ei) {
    sy_node_id even = producer_with_readers(g, g.input(ec, ei), "Slice", 2);
    for (int oi = 0; oi < 2; ++oi) {
      sy_node_id odd = producer_with_readers(g, g.input(os, oi), "Slice", 2);
      if (even < 0 || odd < 0 || g.input(even, 0) != g.input(odd, 0)) continue;
      const sy_value_id x = g.input(even, 0), e = g.input(ec, ei), o = g.input(os, oi), cos = g.input(ec, 1 - ei), sin = g.input(os, 1 - oi);
      // odd' = e*s + o*c, products and sum in either order.
      sy_node_id a = single_use_producer(g, g.input(odd_out, 0), "Mul"), b = single_use_producer(g, g.input(odd_out, 1), "Mul");
      if (a < 0 || b < 0) continue;
      if (other_operand(g, a, o) == cos) std::swap(a, b);
      if (other_operand(g, a, e) != sin || other_operand(g, b, o) != cos) continue;
      Candidate c;
      c.match = RotaryMatch{x, cos, sin, g.output(reshape, 0), true, {reshape, cat, ue, uo, even_out, odd_out, ec, os, a, b, even, odd}};
      c.first = slice_of(g, even);
      c.second = slice_of(g, odd);
      c.concat = cat;
      c.unsqueeze_even = operand(g, ue, 1, "axes", std::nullopt);
      c.unsqueeze_odd = operand(g, uo, 1, "axes", std::nullopt);
      return c;
    }
  }
  return std::nullopt;
}

}  // namespace

std::vector<RotaryMatch> match_rotaries(const GraphRef& g) {
  std::vector<Candidate> candidates;
  for (sy_node_id n = 0; n < g.node_count(); ++n) {
    if (g.op_type(n).empty() || !g.domain(n).empty()) continue;
    std::optional<Candidate> c;
    if (g.is(n, "Add") && g.input_count(n) == 2) c = match_halves(g, n);
    else if (g.is(n, "Reshape")) c = match_interleaved(g, n);
    if (c) candidates.push_back(std::move(*c));
  }
  if (candidates.empty()) return {};
  std::vector<sy_value_id> values;
  for (const Candidate& c : candidates)
    for (sy_value_id v : c.needs())
      if (std::find(values.begin(), values.end(), v) == values.end()) values.push_back(v);
  const std::vector<Facts> probes = evaluate_on_probes(g, values, "rotary shapes");
  std::vector<RotaryMatch> out;
  for (const Candidate& c : candidates)
    if (!probes.empty() && std::all_of(probes.begin(), probes.end(), [&](const Facts& f) { return holds(g, c, f); }))
      out.push_back(c.match);
  return out;
}

}  // namespace sy_fused
