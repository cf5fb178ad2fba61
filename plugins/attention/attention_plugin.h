// switchyard-attention: the attention-fusion pass and the PagedAttention
// kernel it targets.
#pragma once
#include <switchyard/plugin.hpp>

namespace sy_attention {

constexpr const char* kDomain = "switchyard";
constexpr const char* kOp = "PagedAttention";

struct AttentionFusion {
  static bool run(sy::plugin::GraphRef& g, const sy::plugin::Options& options);
};

// PagedAttention(Q [1,H,T,D], K_new [1,KVH,T,D], V_new [1,KVH,T,D]) -> [1,H,T,D]
// over the ragged batch of the step context: writes the new keys and values
// into the cache blocks, then attends causally (optionally within a window)
// with an online softmax over the cache blocks. Query head h reads KV head
// h / (H / KVH): GQA/MQA without materialising repeated heads.
class PagedAttentionKernel {
 public:
  explicit PagedAttentionKernel(const sy::plugin::NodeRef& node);
  void compute(sy::plugin::KernelIO& io);
  int32_t layer() const { return layer_; }
  float scale() const { return scale_; }
  int64_t window() const { return window_; }

 private:
  int32_t layer_;
  float scale_;
  int64_t window_;
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
