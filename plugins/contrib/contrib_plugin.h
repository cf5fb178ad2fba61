// switchyard-contrib: CPU kernels for the ONNX Runtime contrib ops
// (com.microsoft) that LLM exports carry, with ONNX Runtime's semantics.
#pragma once
#include <switchyard/plugin.hpp>

namespace sy_contrib {

constexpr const char* kMsDomain = SY_ORT_DOMAIN;

// GroupQueryAttention (com.microsoft, opset 1): inputs query, key, value
// (or packed QKV in query), past_key, past_value [B, KVH, P, D], seqlens_k
// (int32, valid total length - 1 per row), total_sequence_length (int32),
// cos_cache, sin_cache. Outputs [B, S, H*D], present_key/value [B, KVH, P+S, D].
// Rows are right-padded; new tokens of row b sit at positions
// seqlens_k[b] + 1 - S ... (from 0 on the first prompt).
class GroupQueryAttention {
 public:
  explicit GroupQueryAttention(const sy::plugin::NodeRef& node);
  void compute(sy::plugin::KernelIO& io);

 private:
  int64_t heads_, kv_heads_, window_;
  float scale_, softcap_;
  bool rotary_, interleaved_;
};

// MultiHeadAttention (com.microsoft): query/key/value [B, S, H*D], optional
// bias, key_padding_mask, attention_bias, past_key/past_value [B, H, P, D];
// outputs [B, S, H*D] and present_key/value. Causal when unidirectional=1.
class MultiHeadAttention {
 public:
  explicit MultiHeadAttention(const sy::plugin::NodeRef& node);
  void compute(sy::plugin::KernelIO& io);

 private:
  int64_t heads_;
  float scale_;
  bool causal_;
  float mask_filter_;
};

// RotaryEmbedding (com.microsoft): input [B, S, H*D] or [B, H, S, D],
// position_ids [B, S] (or one offset), cos_cache/sin_cache [max_pos, rd/2].
class RotaryEmbedding {
 public:
  explicit RotaryEmbedding(const sy::plugin::NodeRef& node);
  void compute(sy::plugin::KernelIO& io);

 private:
  bool interleaved_;
  int64_t rotary_dim_, heads_;
};

// SkipSimplifiedLayerNormalization / SkipLayerNormalization: the residual
// sum input + skip (+ bias), normalised (RMS or mean/variance) and scaled;
// output 3 is the sum itself (the next layer's residual).
class SkipNorm {
 public:
  SkipNorm(const sy::plugin::NodeRef& node, bool simplified);
  void compute(sy::plugin::KernelIO& io);

 private:
  float eps_;
  bool simplified_;
};
struct SkipSimplifiedLayerNorm : SkipNorm {
  explicit SkipSimplifiedLayerNorm(const sy::plugin::NodeRef& n) : SkipNorm(n, true) {}
};
struct SkipLayerNorm : SkipNorm {
  explicit SkipLayerNorm(const sy::plugin::NodeRef& n) : SkipNorm(n, false) {}
};

// GatherBlockQuantized (com.microsoft): rows of a block-quantized (4 or 8
// bit) table gathered and dequantized: (q - zero_point) * scale per block.
class GatherBlockQuantized {
 public:
  explicit GatherBlockQuantized(const sy::plugin::NodeRef& node);
  void compute(sy::plugin::KernelIO& io);

 private:
  int64_t bits_, block_, gather_axis_, quantize_axis_;
};

}  // namespace sy_contrib
