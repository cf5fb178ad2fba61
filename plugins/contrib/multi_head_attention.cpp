#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "attention_core.h"
#include "contrib_plugin.h"

namespace sy_contrib {

using sy::plugin::Error;

MultiHeadAttention::MultiHeadAttention(const sy::plugin::NodeRef& n) {
  heads_ = n.graph.attr_int(n.node, "num_heads").value_or(0);
  if (heads_ <= 0) throw Error("MultiHeadAttention: num_heads must be positive", SY_INVALID_ARGUMENT);
  scale_ = n.graph.attr_float(n.node, "scale").value_or(0.f);
  causal_ = n.graph.attr_int(n.node, "unidirectional").value_or(0) != 0;
  mask_filter_ = n.graph.attr_float(n.node, "mask_filter_value").value_or(-10000.f);
}

void MultiHeadAttention::compute(sy::plugin::KernelIO& io) {
  auto q = io.input(0);
  if (q.rank() != 3 || !io.has_input(1) || !io.has_input(2) || io.input(1).rank() != 3 || io.input(2).rank() != 3)
    throw Error("MultiHeadAttention: only separate query/key/value of shape [batch, sequence, hidden] are supported",
                SY_UNSUPPORTED);
  auto k = io.input(1), v = io.input(2);
  const int64_t B = q.dim(0), S = q.dim(1), H = heads_, D = q.dim(2) / H, L = k.dim(1);
  if (D * H != q.dim(2) || k.dim(2) != q.dim(2) || v.dim(2) != q.dim(2) || k.dim(0) != B || v.dim(1) != L)
    throw Error("MultiHeadAttention: query/key/value shapes do not agree", SY_INVALID_ARGUMENT);
  const float* bias = io.has_input(3) ? io.input(3).data<float>() : nullptr;
  int64_t P = 0;
  const float *pk = nullptr, *pv = nullptr;
  if (io.has_input(6) && io.has_input(7)) {
    auto a = io.input(6);
    if (a.rank() != 4 || a.dim(0) != B || a.dim(1) != H || a.dim(3) != D)
      throw Error("MultiHeadAttention: past_key/past_value must be [batch, num_heads, past, head_size]", SY_INVALID_ARGUMENT);
    P = a.dim(2);
    pk = a.data<float>();
    pv = io.input(7).data<float>();
  }
  const int64_t T = P + L;
  // present = past then the new keys/values (bias added), [B, H, T, D].
  std::vector<float> Kall(static_cast<size_t>(B * H * T * D)), Vall(Kall.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      float* dk = Kall.data() + (b * H + h) * T * D;
      float* dv = Vall.data() + (b * H + h) * T * D;
      if (P) {
        std::memcpy(dk, pk + (b * H + h) * P * D, sizeof(float) * static_cast<size_t>(P * D));
        std::memcpy(dv, pv + (b * H + h) * P * D, sizeof(float) * static_cast<size_t>(P * D));
      }
      for (int64_t j = 0; j < L; ++j)
        for (int64_t d = 0; d < D; ++d) {
          dk[(P + j) * D + d] = k.data<float>()[(b * L + j) * H * D + h * D + d] + (bias ? bias[H * D + h * D + d] : 0.f);
          dv[(P + j) * D + d] = v.data<float>()[(b * L + j) * H * D + h * D + d] + (bias ? bias[2 * H * D + h * D + d] : 0.f);
        }
    }
  // Additive bias per (b, h, i, j): key padding mask and attention_bias.
  const bool has_pad = io.has_input(4);
  sy::plugin::TensorView pad, ab;
  if (has_pad) {
    pad = io.input(4);
    if (pad.rank() != 2 || pad.dim(0) != B || pad.dim(1) != T || pad.dtype() != SY_DTYPE_INT32)
      throw Error("MultiHeadAttention: only a [batch, total_sequence] int32 key_padding_mask is supported", SY_UNSUPPORTED);
  }
  const bool has_ab = io.has_input(5);
  if (has_ab) {
    ab = io.input(5);
    if (ab.rank() != 4 || (ab.dim(0) != 1 && ab.dim(0) != B) || (ab.dim(1) != 1 && ab.dim(1) != H) || ab.dim(2) != S || ab.dim(3) != T)
      throw Error("MultiHeadAttention: attention_bias must be [batch or 1, heads or 1, sequence, total_sequence]", SY_INVALID_ARGUMENT);
  }
  auto out = io.allocate_output(0, SY_DTYPE_FLOAT32, {B, S, H * D});
  if (io.output_count() > 1) {
    std::memcpy(io.allocate_output(1, SY_DTYPE_FLOAT32, {B, H, T, D}).data<float>(), Kall.data(), sizeof(float) * Kall.size());
    std::memcpy(io.allocate_output(2, SY_DTYPE_FLOAT32, {B, H, T, D}).data<float>(), Vall.data(), sizeof(float) * Vall.size());
  }
  const float scale = scale_ != 0.f ? scale_ : 1.f / std::sqrt(static_cast<float>(D));
  float* O = out.data<float>();
  io.parallel_for(B * H, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> qv(static_cast<size_t>(D)), add(static_cast<size_t>(T)), scores;
    for (int64_t it = begin; it < end; ++it) {
      const int64_t b = it / H, h = it % H;
      for (int64_t i = 0; i < S; ++i) {
        for (int64_t d = 0; d < D; ++d) qv[static_cast<size_t>(d)] = q.data<float>()[(b * S + i) * H * D + h * D + d] + (bias ? bias[h * D + d] : 0.f);
        for (int64_t j = 0; j < T; ++j) {
          float a = 0.f;
          if (has_pad && pad.data<int32_t>()[b * T + j] == 0) a += mask_filter_;
          if (has_ab) a += ab.data<float>()[((std::min(b, ab.dim(0) - 1) * ab.dim(1) + std::min(h, ab.dim(1) - 1)) * S + i) * T + j];
          add[static_cast<size_t>(j)] = a;
        }
        const int64_t last = causal_ ? std::min(T - 1, P + i) : T - 1;
        attend(qv.data(), Kall.data() + (b * H + h) * T * D, Vall.data() + (b * H + h) * T * D, D, 0, last, scale, 0.f, add.data(),
               scores, O + (b * S + i) * H * D + h * D);
      }
    }
  });
}

}  // namespace sy_contrib
