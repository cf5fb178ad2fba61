// Entry point of the switchyard-attention plugin.
#include "attention_plugin.h"

SY_PLUGIN(builder) {
  using sy::plugin::option_int;
  builder.info("switchyard-attention", "1.0.0", "attention fusion (MHA/GQA/MQA) and paged attention over the KV cache");
  builder.pass<sy_attention::AttentionFusion>(
      "attention-fusion", "1.0.0", "replaces each layer's attention subgraph with one PagedAttention node",
      {option_int("kv_heads", "0", "convert to this many KV heads by mean-pooling groups (0: keep the model's)"),
       option_int("window", "0", "sliding-window attention over this many positions (0: full causal)")});
  builder.kernel<sy_attention::PagedAttentionKernel>({"paged_attention_f32", "1.1.0", sy_attention::kDomain, sy_attention::kOp, SY_DEVICE_CPU,
                                                      {SY_DTYPE_FLOAT32}, 0, 0, SY_KERNEL_CAP_TOKEN_TREES});
#ifdef SWITCHYARD_HAS_CUDA
  builder.kernel<sy_attention::PagedAttentionCudaKernel>(
      {"paged_attention_cuda_f32", "1.0.0", sy_attention::kDomain, sy_attention::kOp, SY_DEVICE_CUDA, {SY_DTYPE_FLOAT32}});
#endif
}
