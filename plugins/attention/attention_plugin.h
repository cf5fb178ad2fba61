// switchyard-attention: the attention-fusion pass and the PagedAttention
// kernel it targets.
#pragma once
#include <switchyard/plugin.hpp>

namespace sy_attention {

constexpr const char* kDomain = SY_OP_DOMAIN;
constexpr const char* kOp = SY_OP_PAGED_ATTENTION;

struct AttentionFusion {
  static bool run(sy::plugin::GraphRef& g, const sy::plugin::Options& options);
};

// PagedAttention(Q, K_new, V_new [, cos_cache, sin_cache]) over the ragged
// batch of the step context. Layouts: heads-major Q [1,H,T,D], K/V [1,KVH,T,D]
// (output [1,H,T,D]), or token-major Q [1,T,H*D], K/V [1,T,KVH*D] (output
// [1,T,H*D], attribute num_heads) as GroupQueryAttention models carry them.
// With cos/sin caches ([max_pos, rotary_dim/2]) Q and K_new are rotated at
// the step's positions first (rotary_interleaved: pairs (2i, 2i+1), else
// halves). Writes the new keys and values into the cache blocks, then
// attends causally, optionally within a window (the query sees keys
// pos-window+1..pos), scores = dot * scale, soft-capped as
// softcap * tanh(s / softcap) when softcap > 0, with an online softmax over
// the cache blocks. Query head h reads KV head h / (H / KVH). Keys and values
// may differ in size (the caches' rows say which).
// Latent attention (MLA, attribute latent_dim = R > 0, heads-major only):
// K_new is the latent [1,1,T,R] and V_new the rotary key [1,1,T,P], cached
// as they are; a key is their concatenation (Q is [1,H,T,R+P], the
// up-projection absorbed into it) and a value its first value_dim values
// (default R), the output [1,H,T,value_dim] (the value up-projection comes
// after the op).
class PagedAttentionKernel {
 public:
  explicit PagedAttentionKernel(const sy::plugin::NodeRef& node);
  void compute(sy::plugin::KernelIO& io);
  int32_t layer() const { return layer_; }
  float scale() const { return scale_; }
  float softcap() const { return softcap_; }
  int64_t window() const { return window_; }
  int64_t packed_heads() const { return packed_heads_; }  // > 0: token-major layout
  bool rotary_interleaved() const { return rotary_interleaved_; }
  int64_t latent_dim() const { return latent_dim_; }  // > 0: latent attention (MLA)

 private:
  int32_t layer_;
  float scale_, softcap_;
  int64_t window_, packed_heads_, kv_heads_, latent_dim_ = 0, latent_value_dim_ = 0;
  bool rotary_interleaved_;
};

#ifdef SWITCHYARD_HAS_CUDA
// The same node on CUDA (paged_attention_cuda.h), over a KV cache in device memory.
class PagedAttentionCudaKernel {
 public:
  explicit PagedAttentionCudaKernel(const sy::plugin::NodeRef& node);
  void compute(sy::plugin::KernelIO& io);

 private:
  PagedAttentionKernel cpu_;  // the node's attributes, parsed once
};
#endif

}  // namespace sy_attention
