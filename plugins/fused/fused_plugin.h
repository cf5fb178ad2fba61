// switchyard-fused: the pointwise chains of a Llama block as single ops,
// each with a CPU kernel (the reference) and a CUDA kernel:
//   switchyard::RMSNorm(x, weight) {epsilon}  = x / sqrt(mean(x^2, -1) + eps) * weight
//     from Pow(x,2) -> ReduceMean(-1) -> Add(eps) -> Sqrt -> Div(1, .) -> Mul(x, .) -> Mul(., weight)
//     or the same with Reciprocal for Div(1, .), ReduceMean's axes as an
//     attribute or an input; {divide: 1} for Div(x, sqrt(...)) instead
//   switchyard::SiluMul(gate, up)            = gate * sigmoid(gate) * up
//     from Sigmoid(g) -> Mul(g, .) -> Mul(., up)
//   switchyard::Rotary(x, cos, sin) {interleaved}
//     halves (Hugging Face rotate_half): x * cos + cat(-x2, x1) * sin
//     interleaved (llama2.c, GPT-J): (e, o) pairs -> (e*c - o*s, e*s + o*c)
//     cos and sin broadcast against x (never x against them)
// Every CPU kernel computes with the float operations of the chain it
// replaces, in their order, so a fused graph's outputs are bit-identical to
// the export's: the pass belongs in the fastest exact mode. On a GPU these
// are the launches between the matmuls of a decode step; on the CPU they
// save the intermediate tensors and the per-node cost of ~25 nodes a layer.
#pragma once
#include <switchyard/plugin.hpp>

#include "rotary_axes.h"

namespace sy_fused {

constexpr const char* kDomain = SY_OP_DOMAIN;

struct FusionPass {
  static bool run(sy::plugin::GraphRef& g, const sy::plugin::Options& options);
};

// Row-wise kernels over [rows, cols] float32 (CPU, fused_kernels.cpp).
void rmsnorm_rows(const float* x, const float* weight, float eps, bool divide, int64_t begin, int64_t end, int64_t cols, float* y);
void silu_mul(const float* gate, const float* up, int64_t n, float* y);
// One row of `dim` elements; c and s hold dim (halves) or dim/2 (interleaved) values.
void rotary_row(const float* x, const float* c, const float* s, int64_t dim, bool interleaved, float* y);

// Where each x row of a Rotary finds its cos/sin row (rotary_kernel.cpp).
struct RotaryBroadcast {
  int64_t dim = 0, rows = 0;
  RotaryAxes outer;  // x's dims but the last; no allocation per step
};
RotaryBroadcast rotary_broadcast(const sy::plugin::TensorView& x, const sy::plugin::TensorView& cos_sin, bool interleaved);

class RMSNormKernel {
 public:
  explicit RMSNormKernel(const sy::plugin::NodeRef& node);
  void compute(sy::plugin::KernelIO& io);
  float epsilon() const { return eps_; }
  bool divide() const { return divide_; }

 private:
  float eps_;
  bool divide_;
};

class SiluMulKernel {
 public:
  explicit SiluMulKernel(const sy::plugin::NodeRef& node);
  void compute(sy::plugin::KernelIO& io);
};

class RotaryKernel {
 public:
  explicit RotaryKernel(const sy::plugin::NodeRef& node);
  void compute(sy::plugin::KernelIO& io);
  bool interleaved() const { return interleaved_; }

 private:
  bool interleaved_;
};

#ifdef SWITCHYARD_HAS_CUDA
class RMSNormCudaKernel {
 public:
  explicit RMSNormCudaKernel(const sy::plugin::NodeRef& node);
  void compute(sy::plugin::KernelIO& io);

 private:
  RMSNormKernel cpu_;  // attributes
  sy::plugin::DeviceBuffer weight_;
  int64_t cols_ = 0;
};

class SiluMulCudaKernel {
 public:
  explicit SiluMulCudaKernel(const sy::plugin::NodeRef& node);
  void compute(sy::plugin::KernelIO& io);
};

class RotaryCudaKernel {
 public:
  explicit RotaryCudaKernel(const sy::plugin::NodeRef& node);
  void compute(sy::plugin::KernelIO& io);

 private:
  RotaryKernel cpu_;  // attributes
};
#endif

}  // namespace sy_fused
