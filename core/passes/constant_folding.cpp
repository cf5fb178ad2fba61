// Evaluates, once at load, every node whose inputs are all constants, with
// the same kernels the executor would use at run time.
#include <algorithm>

#include "passes/pass.h"

namespace sy {
namespace {

// Folding must not turn a small graph into a huge file (Expand/ConstantOfShape
// can produce big tensors from tiny inputs).
constexpr int64_t kMaxFoldedElements = 1 << 22;

class ConstantFoldingPass : public GraphPass {
 public:
  std::string name() const override { return "constant-folding"; }
  bool run(Graph& g, PassContext& ctx) override {
    auto pool = BufferPool::create();
    bool changed = false;
    for (NodeId nid : g.topological_order()) {
      Node& n = g.nodes[static_cast<size_t>(nid)];
      if (!all_inputs_constant(g, n)) continue;
      const KernelDef* def = ctx.registry.find_for_node(g, n, Device::CPU);
      if (!def) continue;
      std::vector<Tensor> outs(n.outputs.size());
      try {
        KernelCreateInfo ci{g, n, g.opset(n.domain)};
        auto kernel = def->create(ci);
        std::vector<const Tensor*> ins;
        for (ValueId v : n.inputs) ins.push_back(v == kNoValue ? nullptr : &*g.values[static_cast<size_t>(v)].constant);
        KernelContext kc;
        kc.inputs = ins.data();
        kc.num_inputs = static_cast<int>(ins.size());
        kc.outputs = outs.data();
        kc.num_outputs = static_cast<int>(outs.size());
        kc.pool = pool.get();
        kc.threads = ctx.threads;
        kernel->compute(kc);
      } catch (const std::exception& e) {
        // Leave it for run time, where the same error will name the node (a
        // bad attribute type surfaces as std::bad_variant_access: not only sy::Error).
        if (ctx.log) ctx.log("constant folding skipped " + n.display_name() + ": " + e.what());
        continue;
      }
      // Ops that only rearrange constants (a transposed tied classifier) may
      // fold at any size; growth past the inputs is capped.
      int64_t input_elements = 0;
      for (ValueId v : n.inputs)
        if (v != kNoValue) input_elements += g.values[static_cast<size_t>(v)].constant->numel();
      bool too_big = false;
      for (const Tensor& t : outs) too_big = too_big || t.numel() > std::max(kMaxFoldedElements, input_elements);
      if (too_big) continue;
      for (size_t i = 0; i < n.outputs.size(); ++i) {
        if (n.outputs[i] == kNoValue) continue;
        Value& v = g.values[static_cast<size_t>(n.outputs[i])];
        v.constant = own(outs[i]);
        v.dtype = outs[i].dtype();
        std::vector<Dim> dims;
        for (int64_t d : outs[i].shape()) dims.push_back(Dim{d, {}});
        v.shape = dims;
      }
      n.dead = true;
      changed = true;
    }
    return changed;
  }

 private:
  static bool all_inputs_constant(const Graph& g, const Node& n) {
    for (ValueId v : n.inputs)
      if (v != kNoValue && !g.values[static_cast<size_t>(v)].constant) return false;
    return true;
  }
  // Results computed into pool buffers are copied to exact-size storage so
  // folded constants do not pin the folding pool.
  static Tensor own(const Tensor& t) {
    Tensor c = Tensor::empty(t.dtype(), t.shape());
    if (t.bytes()) std::memcpy(c.raw(), t.raw(), t.bytes());
    return c;
  }
};

}  // namespace

std::unique_ptr<GraphPass> make_constant_folding_pass() { return std::make_unique<ConstantFoldingPass>(); }

}  // namespace sy
