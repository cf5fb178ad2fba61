// Example third-party plugin: fuses x * Sigmoid(x) (SiLU, as torch exports
// it) into one com.example::SiLU node, and provides that node's CPU kernel.
// It includes only the SDK: <switchyard/plugin.hpp>.
#include <switchyard/plugin.hpp>

#include <cmath>

namespace {

using sy::plugin::GraphRef;
using sy::plugin::KernelIO;
using sy::plugin::NodeRef;
using sy::plugin::Options;

constexpr const char* kDomain = "com.example";

struct SiluFusion {
  static bool run(GraphRef& g, const Options& options) {
    const bool keep_names = options.get_bool("keep_names");
    int fused = 0;
    const int32_t n = g.node_count();
    for (sy_node_id mul = 0; mul < n; ++mul) {
      if (!g.is(mul, "Mul") || g.input_count(mul) != 2) continue;
      for (int side = 0; side < 2; ++side) {
        sy_value_id gate = g.input(mul, side), x = g.input(mul, 1 - side);
        sy_node_id sig = g.producer(gate);
        if (sig < 0 || !g.is(sig, "Sigmoid") || g.input(sig, 0) != x) continue;
        std::vector<sy_value_id> out;
        std::string name = keep_names ? g.name(mul) + "/silu" : "";
        g.add_node(kDomain, "SiLU", name, {x}, out);
        sy_value_id y = g.output(mul, 0);
        g.set_type(out[0], g.value_dtype(y), g.value_shape(y));
        g.replace_all_uses(y, out[0]);
        g.remove_node(mul);
        if (g.use_count(gate) == 0) g.remove_node(sig);
        ++fused;
        break;
      }
    }
    sy::plugin::log(SY_LOG_INFO, "silu-fusion: fused " + std::to_string(fused) + " SiLU patterns");
    return fused > 0;
  }
};

struct SiluKernel {
  explicit SiluKernel(const NodeRef&) {}
  void compute(KernelIO& io) {
    auto x = io.input(0);
    if (x.dtype() != SY_DTYPE_FLOAT32) throw sy::plugin::Error("SiLU: expected float32", SY_INVALID_ARGUMENT);
    auto y = io.allocate_output(0, SY_DTYPE_FLOAT32, x.dims());
    const float* in = x.data<float>();
    float* out = y.data<float>();
    auto run = [&](int64_t b, int64_t e) {
      // Same arithmetic as Sigmoid then Mul, so fused and unfused agree.
      for (int64_t i = b; i < e; ++i) out[i] = in[i] * (1.0f / (1.0f + std::exp(-in[i])));
    };
    if (x.numel() >= (1 << 16)) io.parallel_for(x.numel(), 1 << 14, run);
    else run(0, x.numel());
  }
};

}  // namespace

SY_PLUGIN(builder) {
  builder.info("silu-example", "1.0.0", "fuses x*sigmoid(x) into one SiLU node, with its CPU kernel");
  builder.pass<SiluFusion>("silu-fusion", "1.0.0", "Mul(x, Sigmoid(x)) -> com.example::SiLU(x)",
                           {sy::plugin::option_bool("keep_names", "true", "name fused nodes after the Mul they replace")});
  builder.kernel<SiluKernel>({"silu_f32", "1.0.0", kDomain, "SiLU", SY_DEVICE_CPU, {SY_DTYPE_FLOAT32}});
}
