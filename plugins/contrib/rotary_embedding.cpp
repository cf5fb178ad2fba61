#include <cstring>

#include "contrib_plugin.h"
#include "rotary.h"

namespace sy_contrib {

using sy::plugin::Error;

RotaryEmbedding::RotaryEmbedding(const sy::plugin::NodeRef& n) {
  interleaved_ = n.graph.attr_int(n.node, "interleaved").value_or(0) != 0;
  rotary_dim_ = n.graph.attr_int(n.node, "rotary_embedding_dim").value_or(0);
  heads_ = n.graph.attr_int(n.node, "num_heads").value_or(0);
  if (n.graph.attr_int(n.node, "is_packed_batching").value_or(0) != 0)
    throw Error("RotaryEmbedding: is_packed_batching=1 is not supported", SY_UNSUPPORTED);
}

void RotaryEmbedding::compute(sy::plugin::KernelIO& io) {
  auto x = io.input(0), pos = io.input(1), cos_c = io.input(2), sin_c = io.input(3);
  if (pos.dtype() != SY_DTYPE_INT64) throw Error("RotaryEmbedding: position_ids must be int64", SY_INVALID_ARGUMENT);
  const int64_t rd = rotary_dim_ > 0 ? rotary_dim_ : 2 * cos_c.dim(1);
  const int64_t B = x.dim(0);
  int64_t S, H, D;
  bool bnsd = x.rank() == 4;
  if (bnsd) {
    H = x.dim(1), S = x.dim(2), D = x.dim(3);
  } else if (x.rank() == 3) {
    S = x.dim(1);
    H = heads_ > 0 ? heads_ : x.dim(2) / rd;
    D = x.dim(2) / H;
    if (H * D != x.dim(2)) throw Error("RotaryEmbedding: hidden size does not split into num_heads", SY_INVALID_ARGUMENT);
  } else {
    throw Error("RotaryEmbedding: input must be [batch, seq, hidden] or [batch, heads, seq, head_size]", SY_INVALID_ARGUMENT);
  }
  if (rd > D || cos_c.dim(1) * 2 < rd) throw Error("RotaryEmbedding: rotary dimension does not fit the head", SY_INVALID_ARGUMENT);
  const int64_t* p = pos.data<int64_t>();
  const bool offset_only = pos.numel() == 1;
  if (!offset_only && pos.numel() != B * S) throw Error("RotaryEmbedding: position_ids must be [batch, seq] or one offset", SY_INVALID_ARGUMENT);
  auto y = io.allocate_output(0, SY_DTYPE_FLOAT32, x.dims());
  std::memcpy(y.data<float>(), x.data<float>(), sizeof(float) * static_cast<size_t>(x.numel()));
  float* out = y.data<float>();
  const int64_t max_pos = cos_c.dim(0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      const int64_t at = offset_only ? p[0] + s : p[b * S + s];
      if (at < 0 || at >= max_pos) throw Error("RotaryEmbedding: position " + std::to_string(at) + " is outside the cache", SY_INVALID_ARGUMENT);
      for (int64_t h = 0; h < H; ++h) {
        float* v = out + (bnsd ? ((b * H + h) * S + s) * D : (b * S + s) * H * D + h * D);
        rotate(v, at, cos_c.data<float>(), sin_c.data<float>(), rd, interleaved_);
      }
    }
}

}  // namespace sy_contrib
