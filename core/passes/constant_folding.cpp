// Evaluates, once at load, every node whose inputs are all constants, with
// the same kernels the executor would use at run time.
#include <algorithm>
#include <limits>
#include <span>
#include <vector>

#include "passes/pass.h"

namespace sy {
namespace {

// Folding must not turn a small graph into a huge file (Expand/ConstantOfShape
// can produce big tensors from tiny inputs).
constexpr int64_t kMaxFoldedElements = 1 << 22;

// Elements of a shape, saturating instead of overflowing.
int64_t saturating_elements(std::span<const int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d <= 0) return 0;
    if (n > std::numeric_limits<int64_t>::max() / d) return std::numeric_limits<int64_t>::max();
    n *= d;
  }
  return n;
}

// What a node's outputs will hold, where that is known before running it:
// the inferred static shapes, and for ConstantOfShape its shape operand.
// The cap is checked before the kernel allocates: a few bytes of model
// asking ConstantOfShape for gigabytes must not be allocated at load.
int64_t known_output_elements(const Graph& g, const Node& n) {
  int64_t most = 0;
  for (ValueId v : n.outputs) {
    if (v == kNoValue) continue;
    const Value& val = g.values[static_cast<size_t>(v)];
    if (!val.shape || !val.has_static_shape()) continue;
    std::vector<int64_t> dims;
    for (const Dim& d : *val.shape) dims.push_back(d.value);
    most = std::max(most, saturating_elements(dims));
  }
  if (n.op_type == "ConstantOfShape" && n.domain.empty() && !n.inputs.empty() && n.inputs[0] != kNoValue) {
    const Value& shape = g.values[static_cast<size_t>(n.inputs[0])];
    if (shape.constant && (shape.constant->dtype() == DType::I64 || shape.constant->dtype() == DType::I32))
      most = std::max(most, saturating_elements(shape.constant->to_int64_vector()));
  }
  return most;
}

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
      int64_t input_elements = 0;
      for (ValueId v : n.inputs)
        if (v != kNoValue) input_elements += g.values[static_cast<size_t>(v)].constant->numel();
      const int64_t cap = std::max(kMaxFoldedElements, input_elements);
      if (known_output_elements(g, n) > cap) continue;  // too big to fold: left to run time
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
      bool too_big = false;
      for (const Tensor& t : outs) too_big = too_big || t.numel() > cap;
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
