#include <cmath>
#include <cstring>
#include <vector>

#include "attention_core.h"
#include "contrib_plugin.h"
#include "rotary.h"

namespace sy_contrib {

using sy::plugin::Error;

GroupQueryAttention::GroupQueryAttention(const sy::plugin::NodeRef& n) {
  const auto& g = n.graph;
  heads_ = g.attr_int(n.node, "num_heads").value_or(0);
  kv_heads_ = g.attr_int(n.node, "kv_num_heads").value_or(0);
  if (heads_ <= 0 || kv_heads_ <= 0 || heads_ % kv_heads_ != 0)
    throw Error("GroupQueryAttention: num_heads and kv_num_heads must be positive, num_heads a multiple of kv_num_heads",
                SY_INVALID_ARGUMENT);
  scale_ = g.attr_float(n.node, "scale").value_or(0.f);
  softcap_ = g.attr_float(n.node, "softcap").value_or(0.f);
  window_ = g.attr_int(n.node, "local_window_size").value_or(-1);
  rotary_ = g.attr_int(n.node, "do_rotary").value_or(0) != 0;
  interleaved_ = g.attr_int(n.node, "rotary_interleaved").value_or(0) != 0;
  if (g.attr_int(n.node, "smooth_softmax").value_or(0) != 0)
    throw Error("GroupQueryAttention: smooth_softmax=1 is not supported", SY_UNSUPPORTED);
  if (g.attr_int(n.node, "sliding_window_cache").value_or(0) != 0)
    throw Error("GroupQueryAttention: sliding_window_cache=1 (window-sized ring-buffer caches) is not supported; "
                "export with windowed_kv_cache=false",
                SY_UNSUPPORTED);
  if (g.attr_int(n.node, "k_quant_type").has_value())
    throw Error("GroupQueryAttention: quantized KV caches (k_quant_type) are not supported", SY_UNSUPPORTED);
}

void GroupQueryAttention::compute(sy::plugin::KernelIO& io) {
  auto q = io.input(0);
  const bool packed = !io.has_input(1);
  if (q.rank() != 3) throw Error("GroupQueryAttention: query must be [batch, sequence, hidden]", SY_INVALID_ARGUMENT);
  const int64_t B = q.dim(0), S = q.dim(1), H = heads_, KVH = kv_heads_;
  const int64_t D = packed ? q.dim(2) / (H + 2 * KVH) : q.dim(2) / H;
  if (D <= 0 || (packed ? D * (H + 2 * KVH) : D * H) != q.dim(2))
    throw Error("GroupQueryAttention: query width does not split into heads", SY_INVALID_ARGUMENT);
  for (int i : {5, 6})
    if (!io.has_input(i) || io.input(i).dtype() != SY_DTYPE_INT32)
      throw Error("GroupQueryAttention: seqlens_k and total_sequence_length (int32) are required", SY_INVALID_ARGUMENT);
  const int32_t* seqlens = io.input(5).data<int32_t>();
  if (io.input(5).numel() != B) throw Error("GroupQueryAttention: seqlens_k must have one entry per row", SY_INVALID_ARGUMENT);
  const int64_t total = io.input(6).data<int32_t>()[0];

  const float* Qp = q.data<float>();
  const float* Kp = packed ? Qp + H * D : io.input(1).data<float>();
  const float* Vp = packed ? Qp + (H + KVH) * D : io.input(2).data<float>();
  const int64_t q_stride = q.dim(2);                          // floats per token in query
  const int64_t kv_stride = packed ? q.dim(2) : KVH * D;     // floats per token in key/value
  if (!packed && (io.input(1).numel() != B * S * KVH * D || io.input(2).numel() != B * S * KVH * D))
    throw Error("GroupQueryAttention: key/value must be [batch, sequence, kv_num_heads * head_size]", SY_INVALID_ARGUMENT);

  int64_t P = 0;
  const float *pk = nullptr, *pv = nullptr;
  if (io.has_input(3) && io.has_input(4)) {
    auto a = io.input(3), b = io.input(4);
    if (a.rank() != 4 || a.dim(0) != B || a.dim(1) != KVH || a.dim(3) != D || b.dims() != a.dims())
      throw Error("GroupQueryAttention: past_key/past_value must be [batch, kv_num_heads, past, head_size]", SY_INVALID_ARGUMENT);
    P = a.dim(2);
    pk = a.data<float>();
    pv = b.data<float>();
  }
  const int64_t Tp = std::max(P + S, total);
  const bool first_prompt = P == 0;

  const float* cos_c = nullptr;
  const float* sin_c = nullptr;
  int64_t rotary_dim = 0, max_pos = 0;
  if (rotary_) {
    if (!io.has_input(7) || !io.has_input(8)) throw Error("GroupQueryAttention: do_rotary=1 needs cos_cache and sin_cache", SY_INVALID_ARGUMENT);
    auto c = io.input(7);
    cos_c = c.data<float>();
    sin_c = io.input(8).data<float>();
    rotary_dim = 2 * c.dim(1);
    max_pos = c.dim(0);
    if (rotary_dim > D) throw Error("GroupQueryAttention: the rotary caches are wider than a head", SY_INVALID_ARGUMENT);
  }

  auto out = io.allocate_output(0, SY_DTYPE_FLOAT32, {B, S, H * D});
  auto present_k = io.allocate_output(1, SY_DTYPE_FLOAT32, {B, KVH, Tp, D});
  auto present_v = io.allocate_output(2, SY_DTYPE_FLOAT32, {B, KVH, Tp, D});
  float* PK = present_k.data<float>();
  float* PV = present_v.data<float>();
  std::memset(PK, 0, sizeof(float) * static_cast<size_t>(B * KVH * Tp * D));
  std::memset(PV, 0, sizeof(float) * static_cast<size_t>(B * KVH * Tp * D));

  // Where row b's new tokens start, and its valid total length.
  std::vector<int64_t> start(static_cast<size_t>(B)), valid(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    valid[static_cast<size_t>(b)] = static_cast<int64_t>(seqlens[b]) + 1;
    start[static_cast<size_t>(b)] = first_prompt ? 0 : valid[static_cast<size_t>(b)] - S;
    if (start[static_cast<size_t>(b)] < 0 || start[static_cast<size_t>(b)] > P || valid[static_cast<size_t>(b)] > Tp)
      throw Error("GroupQueryAttention: seqlens_k[" + std::to_string(b) + "] = " + std::to_string(seqlens[b]) +
                      " does not fit " + std::to_string(P) + " past and " + std::to_string(S) + " new tokens",
                  SY_INVALID_ARGUMENT);
  }
  auto position = [&](int64_t b, int64_t i) {
    const int64_t p = start[static_cast<size_t>(b)] + i;
    if (rotary_ && p >= max_pos) throw Error("GroupQueryAttention: position " + std::to_string(p) + " is past the rotary cache", SY_INVALID_ARGUMENT);
    return p;
  };
  // 1. present = the valid past, then the new keys (rotated) and values.
  for (int64_t b = 0; b < B; ++b)
    for (int64_t g = 0; g < KVH; ++g) {
      float* dk = PK + (b * KVH + g) * Tp * D;
      float* dv = PV + (b * KVH + g) * Tp * D;
      const int64_t keep = start[static_cast<size_t>(b)];
      if (keep > 0) {
        std::memcpy(dk, pk + (b * KVH + g) * P * D, sizeof(float) * static_cast<size_t>(keep * D));
        std::memcpy(dv, pv + (b * KVH + g) * P * D, sizeof(float) * static_cast<size_t>(keep * D));
      }
      for (int64_t i = 0; i < S; ++i) {
        const int64_t p = position(b, i);
        float* k = dk + p * D;
        std::memcpy(k, Kp + (b * S + i) * kv_stride + g * D, sizeof(float) * static_cast<size_t>(D));
        std::memcpy(dv + p * D, Vp + (b * S + i) * kv_stride + g * D, sizeof(float) * static_cast<size_t>(D));
        if (rotary_) rotate(k, p, cos_c, sin_c, rotary_dim, interleaved_);
      }
    }
  // 2. Attention per (row, head): query i at position p sees keys
  //    p - window + 1 .. p (local_window_size counts the query's own key).
  const float scale = scale_ != 0.f ? scale_ : 1.f / std::sqrt(static_cast<float>(D));
  const int64_t group = H / KVH;
  float* O = out.data<float>();
  io.parallel_for(B * H, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> qv(static_cast<size_t>(D)), scores;
    for (int64_t it = begin; it < end; ++it) {
      const int64_t b = it / H, h = it % H, g = h / group;
      const float* K = PK + (b * KVH + g) * Tp * D;
      const float* V = PV + (b * KVH + g) * Tp * D;
      for (int64_t i = 0; i < S; ++i) {
        const int64_t p = start[static_cast<size_t>(b)] + i;
        std::memcpy(qv.data(), Qp + (b * S + i) * q_stride + h * D, sizeof(float) * static_cast<size_t>(D));
        if (rotary_ && p < max_pos) rotate(qv.data(), p, cos_c, sin_c, rotary_dim, interleaved_);
        const int64_t first = window_ > 0 ? std::max<int64_t>(0, p - window_ + 1) : 0;
        attend(qv.data(), K, V, D, first, std::min(p, Tp - 1), scale, softcap_, nullptr, scores, O + (b * S + i) * H * D + h * D);
      }
    }
  });
}

}  // namespace sy_contrib
