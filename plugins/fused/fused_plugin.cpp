// Entry point of the switchyard-fused plugin.
#include "fused_plugin.h"

SY_PLUGIN(builder) {
  using sy::plugin::option_bool;
  builder.info("switchyard-fused", "1.0.0", "fused RMSNorm and SiLU-gated MLP activations (CPU and CUDA kernels)");
  builder.pass<sy_fused::FusionPass>("fuse-pointwise", "1.0.0",
                                     "replaces RMSNorm and SiLU*up chains with single fused ops",
                                     {option_bool("rmsnorm", "true", "fuse Pow/ReduceMean/Add/Sqrt/Div/Mul/Mul into RMSNorm"),
                                      option_bool("silu_mul", "true", "fuse Sigmoid/Mul/Mul into SiluMul")});
  builder.kernel<sy_fused::RMSNormKernel>({"rmsnorm_f32", "1.0.0", sy_fused::kDomain, "RMSNorm", SY_DEVICE_CPU, {SY_DTYPE_FLOAT32}});
  builder.kernel<sy_fused::SiluMulKernel>({"silu_mul_f32", "1.0.0", sy_fused::kDomain, "SiluMul", SY_DEVICE_CPU, {SY_DTYPE_FLOAT32}});
#ifdef SWITCHYARD_HAS_CUDA
  builder.kernel<sy_fused::RMSNormCudaKernel>({"rmsnorm_cuda_f32", "1.0.0", sy_fused::kDomain, "RMSNorm", SY_DEVICE_CUDA, {SY_DTYPE_FLOAT32}});
  builder.kernel<sy_fused::SiluMulCudaKernel>({"silu_mul_cuda_f32", "1.0.0", sy_fused::kDomain, "SiluMul", SY_DEVICE_CUDA, {SY_DTYPE_FLOAT32}});
#endif
}
