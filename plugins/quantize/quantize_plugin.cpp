// Entry point of the switchyard-quantize plugin.
#include "quantize_plugin.h"

SY_PLUGIN(builder) {
  using sy::plugin::option_bool;
  using sy::plugin::option_int;
  using sy::plugin::option_string;
  builder.info("switchyard-quantize", "1.1.0", "weight-only int8/int4 quantization: a rewrite pass and SIMD kernels");
  builder.pass<sy_quant::QuantizePass>(
      "quantize", "1.1.0", "rewrites MatMul/Gemm with constant weights (and weight-only QDQ) into quantized matmuls, ExpertMatMul into quantized experts",
      {option_string("scheme", "int8", "default scheme: int8 (per output channel), int4 (groups), -asym suffix, :GROUP, or none"),
       option_int("group_size", "32", "group size of int4 schemes without ':GROUP'"),
       option_string("skip", "", "comma-separated globs of node or weight names kept in fp32 (e.g. /lm_head/*)"),
       option_string("rules", "", "comma-separated GLOB=SCHEME, first match wins, before the default scheme"),
       option_bool("fuse_siblings", "true", "one matmul over the rows of matmuls that share their input and format (q/k/v, gate/up), then a Split")});
  builder.kernel<sy_quant::ExpertQMatMulKernel>(
      {"expert_qmatmul_f32", "1.0.0", sy_quant::kDomain, sy_quant::kExpertOp, SY_DEVICE_CPU, {SY_DTYPE_FLOAT32}});
  for (auto [domain, op] : {std::pair{sy_quant::kDomain, sy_quant::kOp}, std::pair{sy_quant::kOrtDomain, sy_quant::kOrtOp}})
  {
    builder.kernel<sy_quant::QMatMulKernel>(
        {std::string("qmatmul_f32_") + op, "1.0.0", domain, op, SY_DEVICE_CPU, {SY_DTYPE_FLOAT32}});
#ifdef SWITCHYARD_HAS_CUDA
    builder.kernel<sy_quant::QMatMulCudaKernel>(
        {std::string("qmatmul_cuda_f32_") + op, "1.0.0", domain, op, SY_DEVICE_CUDA, {SY_DTYPE_FLOAT32}});
#endif
  }
}
