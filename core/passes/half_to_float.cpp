// fp16/bf16 exports run in float32 on the CPU: every half-precision value
// (weights, activations, graph inputs and outputs) becomes float32, Casts to
// a half type cast to float32, and tensor attributes (ConstantOfShape's
// value) follow. The weights keep their half-precision values exactly; what
// changes is that arithmetic rounds to float32 instead of half, which the
// CPU kernels are built for (and which is closer to the fp32 original).
#include <vector>

#include "base/half.h"
#include "passes/pass.h"

namespace sy {
namespace {

bool is_half(DType t) { return t == DType::F16 || t == DType::BF16; }

Tensor to_float(const Tensor& t) {
  Tensor out = Tensor::empty(DType::F32, t.shape());
  const auto* src = static_cast<const uint16_t*>(t.raw());
  float* dst = out.data<float>();
  const bool bf = t.dtype() == DType::BF16;
  for (int64_t i = 0; i < t.numel(); ++i) dst[i] = bf ? bf16_to_float(src[i]) : half_to_float(src[i]);
  return out;
}

class HalfToFloatPass : public GraphPass {
 public:
  std::string name() const override { return "half-to-float"; }
  bool run(Graph& g, PassContext&) override {
    bool changed = false;
    for (Value& v : g.values) {
      if (!is_half(v.dtype) && !(v.constant && is_half(v.constant->dtype()))) continue;
      v.dtype = DType::F32;
      if (v.constant && is_half(v.constant->dtype())) v.constant = to_float(*v.constant);
      changed = true;
    }
    for (Node& n : g.nodes) {
      if (n.dead || !n.domain.empty()) continue;
      if (n.op_type == "Cast") {
        const int64_t to = n.attr_int("to", 0);
        if (to == static_cast<int64_t>(DType::F16) || to == static_cast<int64_t>(DType::BF16)) {
          n.attrs["to"] = static_cast<int64_t>(DType::F32);
          changed = true;
        }
      }
      for (auto& [key, attr] : n.attrs)
        if (auto* t = std::get_if<Tensor>(&attr); t && is_half(t->dtype())) {
          attr = to_float(*t);
          changed = true;
        }
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<GraphPass> make_half_to_float_pass() { return std::make_unique<HalfToFloatPass>(); }

}  // namespace sy
