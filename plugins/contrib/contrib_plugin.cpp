// Entry point of the switchyard-contrib plugin.
#include "contrib_plugin.h"

SY_PLUGIN(builder) {
  using namespace sy_contrib;
  builder.info("switchyard-contrib", "1.0.0",
               "ONNX Runtime contrib ops of LLM exports (GroupQueryAttention, MultiHeadAttention, RotaryEmbedding, "
               "Skip(Simplified)LayerNormalization, GatherBlockQuantized) on the CPU");
  builder.kernel<GroupQueryAttention>({"group_query_attention_f32", "1.0.0", kMsDomain, "GroupQueryAttention", SY_DEVICE_CPU, {SY_DTYPE_FLOAT32}});
  builder.kernel<MultiHeadAttention>({"multi_head_attention_f32", "1.0.0", kMsDomain, "MultiHeadAttention", SY_DEVICE_CPU, {SY_DTYPE_FLOAT32}});
  builder.kernel<RotaryEmbedding>({"rotary_embedding_f32", "1.0.0", kMsDomain, "RotaryEmbedding", SY_DEVICE_CPU, {SY_DTYPE_FLOAT32}});
  builder.kernel<SkipSimplifiedLayerNorm>(
      {"skip_simplified_layer_norm_f32", "1.0.0", kMsDomain, "SkipSimplifiedLayerNormalization", SY_DEVICE_CPU, {SY_DTYPE_FLOAT32}});
  builder.kernel<SkipLayerNorm>({"skip_layer_norm_f32", "1.0.0", kMsDomain, "SkipLayerNormalization", SY_DEVICE_CPU, {SY_DTYPE_FLOAT32}});
  builder.kernel<GatherBlockQuantized>({"gather_block_quantized", "1.0.0", kMsDomain, "GatherBlockQuantized", SY_DEVICE_CPU, {}});
}
