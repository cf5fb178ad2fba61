// switchyard-fused: the pointwise chains of a Llama block as single ops,
// each with a CPU kernel (the reference) and a CUDA kernel:
//   switchyard::RMSNorm(x, weight) {epsilon}  = x / sqrt(mean(x^2, -1) + eps) * weight
//     from Pow(x,2) -> ReduceMean(-1) -> Add(eps) -> Sqrt -> Div(1, .) -> Mul(x, .) -> Mul(., weight)
//   switchyard::SiluMul(gate, up)            = gate * sigmoid(gate) * up
//     from Sigmoid(g) -> Mul(g, .) -> Mul(., up)
// On a GPU these are the launches between the matmuls of a decode step; on
// the CPU they save the intermediate tensors.
#pragma once
#include <switchyard/plugin.hpp>

namespace sy_fused {

constexpr const char* kDomain = SY_OP_DOMAIN;

struct FusionPass {
  static bool run(sy::plugin::GraphRef& g, const sy::plugin::Options& options);
};

// Row-wise kernels over [rows, cols] float32 (CPU, fused_kernels.cpp).
void rmsnorm_rows(const float* x, const float* weight, float eps, int64_t begin, int64_t end, int64_t cols, float* y);
void silu_mul(const float* gate, const float* up, int64_t n, float* y);

class RMSNormKernel {
 public:
  explicit RMSNormKernel(const sy::plugin::NodeRef& node);
  void compute(sy::plugin::KernelIO& io);
  float epsilon() const { return eps_; }

 private:
  float eps_;
};

class SiluMulKernel {
 public:
  explicit SiluMulKernel(const sy::plugin::NodeRef& node);
  void compute(sy::plugin::KernelIO& io);
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
#endif

}  // namespace sy_fused
