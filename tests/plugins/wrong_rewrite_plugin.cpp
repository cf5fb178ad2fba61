// A plugin whose pass rewrites the graph wrongly on purpose, for the
// equivalence-probe tests: "skew-softmax" multiplies every softmax input by
// a factor (1 leaves the graph's meaning intact). Declared exact unless the
// option `approximate` says otherwise.
#include <switchyard/plugin.hpp>

namespace {

struct SkewSoftmax {
  static bool run(sy::plugin::GraphRef& g, const sy::plugin::Options& o) {
    const float factor = static_cast<float>(o.get_float("factor"));
    if (o.get_bool("approximate")) g.mark_approximate("skew-softmax declared approximate");
    int changed = 0;
    const int32_t count = g.node_count();
    for (sy_node_id n = 0; n < count; ++n) {
      if (!g.is(n, "Softmax")) continue;
      const sy_value_id x = g.input(n, 0);
      float f = factor;
      sy_value_id c = g.add_constant(g.name(n) + "_skew", SY_DTYPE_FLOAT32, {}, &f);
      std::vector<sy_value_id> out;
      g.add_node("", "Mul", g.name(n) + "_skew", {x, c}, out);
      g.set_type(out[0], SY_DTYPE_FLOAT32, g.value_shape(x));
      // Only the softmax reads the skewed scores; the rest of the graph is untouched.
      std::vector<sy_value_id> sm;
      sy_node_id s = g.add_node("", "Softmax", g.name(n) + "_skewed", {out[0]}, sm);
      g.set_attr(s, "axis", g.attr_int(n, "axis").value_or(-1));
      g.set_type(sm[0], SY_DTYPE_FLOAT32, g.value_shape(g.output(n, 0)));
      g.replace_all_uses(g.output(n, 0), sm[0]);
      g.remove_node(n);
      ++changed;
    }
    return changed > 0;
  }
};

}  // namespace

SY_PLUGIN(builder) {
  builder.info("wrong-rewrite", "1.0.0", "a pass that rewrites softmax inputs wrongly, for the equivalence probe tests");
  builder.pass<SkewSoftmax>("skew-softmax", "1.0.0", "multiplies every softmax input by a factor",
                            {sy::plugin::option_float("factor", "1.05", "the skew (1: exact)"),
                             sy::plugin::option_bool("approximate", "false", "declare the rewrite approximate")});
}
