// Entry point of the switchyard-moe plugin.
#include "moe_plugin.h"

SY_PLUGIN(builder) {
  builder.info("switchyard-moe", "1.1.0", "mixture-of-experts: gathered expert matmuls fused into one grouped op per step");
  builder.pass<sy_moe::ExpertFusionPass>("fuse-experts", "1.0.0",
                                         "replaces Gather(stacked expert weights) -> MatMul with ExpertMatMul, which reads each "
                                         "selected expert once for all the step's tokens that chose it",
                                         {});
  builder.kernel<sy_moe::ExpertMatMulKernel>({"expert_matmul_f32", "1.1.0", sy_moe::kDomain, sy_moe::kOp, SY_DEVICE_CPU, {SY_DTYPE_FLOAT32}});
#ifdef SWITCHYARD_HAS_CUDA
  builder.kernel<sy_moe::ExpertMatMulCudaKernel>(
      {"expert_matmul_cuda_f32", "1.0.0", sy_moe::kDomain, sy_moe::kOp, SY_DEVICE_CUDA, {SY_DTYPE_FLOAT32}});
#endif
}
