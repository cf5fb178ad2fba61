// Entry point of the switchyard-fused plugin.
#include "fused_plugin.h"

SY_PLUGIN(builder) {
  using sy::plugin::option_bool;
  builder.info("switchyard-fused", "1.1.0", "fused RMSNorm, SiLU-gated MLP activations and rotary embeddings (CPU and CUDA kernels)");
  builder.pass<sy_fused::FusionPass>("fuse-pointwise", "1.1.0",
                                     "replaces RMSNorm, SiLU*up and rotary-embedding chains with single fused ops, bit-exact on the CPU",
                                     {option_bool("rmsnorm", "true", "fuse Pow/ReduceMean/Add/Sqrt/Div/Mul/Mul into RMSNorm"),
                                      option_bool("silu_mul", "true", "fuse Sigmoid/Mul/Mul into SiluMul"),
                                      option_bool("rotary", "true", "fuse the Slice/Neg/Concat/Mul/Add (or interleaved) rotary chains into Rotary")});
  builder.kernel<sy_fused::RMSNormKernel>({"rmsnorm_f32", "1.0.0", sy_fused::kDomain, "RMSNorm", SY_DEVICE_CPU, {SY_DTYPE_FLOAT32}});
  builder.kernel<sy_fused::SiluMulKernel>({"silu_mul_f32", "1.0.0", sy_fused::kDomain, "SiluMul", SY_DEVICE_CPU, {SY_DTYPE_FLOAT32}});
  builder.kernel<sy_fused::RotaryKernel>({"rotary_f32", "1.0.0", sy_fused::kDomain, "Rotary", SY_DEVICE_CPU, {SY_DTYPE_FLOAT32}});
#ifdef SWITCHYARD_HAS_CUDA
  builder.kernel<sy_fused::RMSNormCudaKernel>({"rmsnorm_cuda_f32", "1.0.0", sy_fused::kDomain, "RMSNorm", SY_DEVICE_CUDA, {SY_DTYPE_FLOAT32}});
  builder.kernel<sy_fused::SiluMulCudaKernel>({"silu_mul_cuda_f32", "1.0.0", sy_fused::kDomain, "SiluMul", SY_DEVICE_CUDA, {SY_DTYPE_FLOAT32}});
  builder.kernel<sy_fused::RotaryCudaKernel>({"rotary_cuda_f32", "1.0.0", sy_fused::kDomain, "Rotary", SY_DEVICE_CUDA, {SY_DTYPE_FLOAT32}});
#endif
}
