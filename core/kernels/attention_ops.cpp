// The ONNX opset 23 forms of attention and rotary embedding, as today's
// exporters emit them (torch.onnx.export with dynamo at opset 23):
//   Attention(Q, K, V [, attn_mask, past_key, past_value]) -> Y, present_key,
//     present_value: scores = Q K^T * scale (default 1/sqrt(head size)),
//     soft-capped before the mask, a boolean (true = attend) or additive mask
//     padded with -inf to the total length, is_causal aligned to the end of
//     the past, GQA by repeating each KV head over consecutive query heads;
//     3-D inputs with q_num_heads/kv_num_heads.
//   RotaryEmbedding(X, cos_cache, sin_cache [, position_ids]): X [B, H, S, D]
//     or [B, S, H*D] (num_heads); halves or interleaved pairs of the first
//     rotary_embedding_dim values; cos/sin indexed by position_ids, else
//     given per position ([B, S, rd/2]).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/kernel_util.h"
#include "kernels/registry.h"

namespace sy {
namespace {

// [B, heads, S, D] views of 3-D ([B, S, heads*D]) or 4-D inputs.
struct Heads {
  const float* data;
  int64_t B, H, S, D;
  bool token_major;
  const float* at(int64_t b, int64_t h, int64_t s) const {
    return data + (token_major ? ((b * S + s) * H + h) * D : ((b * H + h) * S + s) * D);
  }
};

Heads heads_of(const Tensor& t, int64_t heads, const char* what) {
  SY_CHECK(t.dtype() == DType::F32, "Attention: " << what << " must be float32");
  if (t.rank() == 4) return {t.data<float>(), t.dim(0), t.dim(1), t.dim(2), t.dim(3), false};
  SY_CHECK(t.rank() == 3 && heads > 0 && t.dim(2) % heads == 0,
           "Attention: " << what << " must be 4-D, or 3-D with q_num_heads/kv_num_heads dividing its width");
  return {t.data<float>(), t.dim(0), heads, t.dim(1), t.dim(2) / heads, true};
}

class AttentionKernel : public Kernel {
 public:
  explicit AttentionKernel(const Node& n)
      : scale_(n.attr_float("scale", 0.f)), softcap_(n.attr_float("softcap", 0.f)), causal_(n.attr_int("is_causal", 0) != 0),
        q_heads_(n.attr_int("q_num_heads", 0)), kv_heads_(n.attr_int("kv_num_heads", 0)) {
    SY_CHECK(n.attr_int("qk_matmul_output_mode", 0) == 0 || n.outputs.size() < 4 || n.outputs[3] == kNoValue,
             "Attention: the qk_matmul_output output is not supported");
  }
  void compute(KernelContext& ctx) override {
    const Heads q = heads_of(ctx.input(0), q_heads_, "Q");
    const Heads k = heads_of(ctx.input(1), kv_heads_, "K");
    const Heads v = heads_of(ctx.input(2), kv_heads_, "V");
    SY_CHECK(k.B == q.B && v.B == q.B && k.H == v.H && k.S == v.S && k.D == q.D && q.H % k.H == 0,
             "Attention: Q/K/V shapes do not agree (batch, heads, key length, head size)");
    const int64_t B = q.B, H = q.H, KVH = k.H, S = q.S, D = q.D, Dv = v.D;
    // present = past ++ new, [B, KVH, P + L, D].
    int64_t P = 0;
    const float *pk = nullptr, *pv = nullptr;
    if (ctx.has_input(4) && ctx.has_input(5)) {
      const Tensor& a = ctx.input(4);
      SY_CHECK(a.rank() == 4 && a.dim(0) == B && a.dim(1) == KVH && a.dim(3) == D && ctx.input(5).dim(2) == a.dim(2),
               "Attention: past_key/past_value must be [batch, kv_heads, past, head_size]");
      P = a.dim(2);
      pk = a.data<float>();
      pv = ctx.input(5).data<float>();
    }
    const int64_t T = P + k.S;
    Tensor K = Tensor::empty(DType::F32, Shape{B, KVH, T, D}), V = Tensor::empty(DType::F32, Shape{B, KVH, T, Dv});
    for (int64_t b = 0; b < B; ++b)
      for (int64_t g = 0; g < KVH; ++g) {
        float* dk = K.data<float>() + (b * KVH + g) * T * D;
        float* dv = V.data<float>() + (b * KVH + g) * T * Dv;
        if (P) {
          std::memcpy(dk, pk + (b * KVH + g) * P * D, static_cast<size_t>(P * D) * sizeof(float));
          std::memcpy(dv, pv + (b * KVH + g) * P * Dv, static_cast<size_t>(P * Dv) * sizeof(float));
        }
        for (int64_t j = 0; j < k.S; ++j) {
          std::memcpy(dk + (P + j) * D, k.at(b, g, j), static_cast<size_t>(D) * sizeof(float));
          std::memcpy(dv + (P + j) * Dv, v.at(b, g, j), static_cast<size_t>(Dv) * sizeof(float));
        }
      }
    // The mask as an additive bias broadcast to [B, H, S, T] (shorter masks
    // are padded with -inf / false).
    const Tensor* mask = ctx.has_input(3) ? &ctx.input(3) : nullptr;
    std::array<int64_t, 4> mdims{1, 1, 1, 1};
    if (mask) {
      SY_CHECK(mask->rank() >= 2 && mask->rank() <= 4, "Attention: attn_mask must have rank 2 to 4");
      for (int i = 0; i < mask->rank(); ++i) mdims[static_cast<size_t>(4 - mask->rank() + i)] = mask->dim(i);
      SY_CHECK((mdims[0] == 1 || mdims[0] == B) && (mdims[1] == 1 || mdims[1] == H) && (mdims[2] == 1 || mdims[2] == S) && mdims[3] <= T,
               "Attention: attn_mask of shape " << mask->shape().str() << " does not broadcast to [" << B << ", " << H << ", " << S << ", " << T << "]");
      SY_CHECK(mask->dtype() == DType::Bool || mask->dtype() == DType::F32, "Attention: attn_mask must be bool or float32");
    }
    auto bias = [&](int64_t b, int64_t h, int64_t i, int64_t j) -> float {
      float add = 0.f;
      if (causal_ && j > P + i) return -std::numeric_limits<float>::infinity();
      if (!mask) return add;
      if (j >= mdims[3]) return -std::numeric_limits<float>::infinity();
      const int64_t at = (((mdims[0] == 1 ? 0 : b) * mdims[1] + (mdims[1] == 1 ? 0 : h)) * mdims[2] + (mdims[2] == 1 ? 0 : i)) * mdims[3] + j;
      if (mask->dtype() == DType::Bool) return mask->data<bool>()[at] ? 0.f : -std::numeric_limits<float>::infinity();
      return mask->data<float>()[at];
    };
    const float scale = scale_ != 0.f ? scale_ : 1.f / std::sqrt(static_cast<float>(D));
    const int64_t group = H / KVH;
    Shape out_shape = q.token_major ? Shape{B, S, H * Dv} : Shape{B, H, S, Dv};
    Tensor& y = ctx.allocate_output(0, DType::F32, out_shape);
    float* Y = y.data<float>();
    auto work = [&](int64_t begin, int64_t end) {
      std::vector<float> scores(static_cast<size_t>(T));
      for (int64_t it = begin; it < end; ++it) {
        const int64_t b = it / H, h = it % H, g = h / group;
        const float* kb = K.data<float>() + (b * KVH + g) * T * D;
        const float* vb = V.data<float>() + (b * KVH + g) * T * Dv;
        for (int64_t i = 0; i < S; ++i) {
          const float* qv = q.at(b, h, i);
          float m = -std::numeric_limits<float>::infinity();
          for (int64_t j = 0; j < T; ++j) {
            float s = 0.f;
            for (int64_t d = 0; d < D; ++d) s += qv[d] * kb[j * D + d];
            s *= scale;
            if (softcap_ > 0.f) s = softcap_ * std::tanh(s / softcap_);
            s += bias(b, h, i, j);
            scores[static_cast<size_t>(j)] = s;
            m = std::max(m, s);
          }
          float* o = Y + (q.token_major ? (b * S + i) * H * Dv + h * Dv : ((b * H + h) * S + i) * Dv);
          std::fill(o, o + Dv, 0.f);
          // Every key masked (a padded query): zeros, as ONNX Runtime gives,
          // not the NaN a literal softmax of -inf would spread to later layers.
          if (m == -std::numeric_limits<float>::infinity()) continue;
          float l = 0.f;
          for (int64_t j = 0; j < T; ++j) {
            const float w = std::exp(scores[static_cast<size_t>(j)] - m);
            if (w == 0.f) continue;  // masked keys contribute nothing, whatever their values hold
            l += w;
            for (int64_t d = 0; d < Dv; ++d) o[d] += w * vb[j * Dv + d];
          }
          for (int64_t d = 0; d < Dv; ++d) o[d] /= l;
        }
      }
    };
    if (ctx.threads && B * H * S * T * D >= kParallelElementThreshold) ctx.threads->parallel_for(B * H, 1, work);
    else work(0, B * H);
    if (ctx.num_outputs > 1 && ctx.outputs) ctx.set_output(1, K);
    if (ctx.num_outputs > 2 && ctx.outputs) ctx.set_output(2, V);
  }

 private:
  float scale_, softcap_;
  bool causal_;
  int64_t q_heads_, kv_heads_;
};

class RotaryEmbeddingKernel : public Kernel {
 public:
  explicit RotaryEmbeddingKernel(const Node& n)
      : interleaved_(n.attr_int("interleaved", 0) != 0), rotary_dim_(n.attr_int("rotary_embedding_dim", 0)), heads_(n.attr_int("num_heads", 0)) {}
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& cos_c = ctx.input(1);
    const Tensor& sin_c = ctx.input(2);
    SY_CHECK(x.dtype() == DType::F32 && cos_c.dtype() == DType::F32 && sin_c.dtype() == DType::F32, "RotaryEmbedding supports float32");
    SY_CHECK(x.rank() == 4 || (x.rank() == 3 && heads_ > 0), "RotaryEmbedding: X must be [batch, heads, seq, head] or 3-D with num_heads");
    const bool bhsd = x.rank() == 4;
    const int64_t B = x.dim(0), H = bhsd ? x.dim(1) : heads_, S = bhsd ? x.dim(2) : x.dim(1);
    const int64_t D = bhsd ? x.dim(3) : x.dim(2) / heads_;
    const int64_t rd = rotary_dim_ > 0 ? rotary_dim_ : D, half = rd / 2;
    SY_CHECK(rd <= D && rd % 2 == 0, "RotaryEmbedding: rotary_embedding_dim " << rd << " does not fit the head size " << D);
    const bool by_position = ctx.has_input(3);
    const int64_t* pos = nullptr;
    if (by_position) {
      const Tensor& p = ctx.input(3);
      SY_CHECK(p.dtype() == DType::I64 && p.numel() == B * S, "RotaryEmbedding: position_ids must be int64 [batch, seq]");
      pos = p.data<int64_t>();
      SY_CHECK(cos_c.rank() == 2 && cos_c.dim(1) == half, "RotaryEmbedding: with position_ids the caches are [max_position, rotary_dim/2]");
    } else {
      SY_CHECK(cos_c.numel() == B * S * half || cos_c.numel() == S * half,
               "RotaryEmbedding: without position_ids the caches are [batch, seq, rotary_dim/2]");
    }
    Tensor& y = ctx.allocate_output(0, DType::F32, x.shape());
    std::memcpy(y.raw(), x.raw(), x.bytes());
    float* out = y.data<float>();
    const float* c = cos_c.data<float>();
    const float* sn = sin_c.data<float>();
    const bool per_batch = cos_c.numel() == B * S * half;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s) {
        int64_t row;
        if (by_position) {
          row = pos[b * S + s];
          SY_CHECK(row >= 0 && row < cos_c.dim(0), "RotaryEmbedding: position " << row << " is outside the cache");
        } else {
          row = per_batch ? b * S + s : s;
        }
        const float* cr = c + row * half;
        const float* sr = sn + row * half;
        for (int64_t h = 0; h < H; ++h) {
          float* v = out + (bhsd ? ((b * H + h) * S + s) * D : (b * S + s) * H * D + h * D);
          for (int64_t i = 0; i < half; ++i) {
            const int64_t a = interleaved_ ? 2 * i : i, e = interleaved_ ? 2 * i + 1 : i + half;
            const float x1 = v[a], x2 = v[e];
            v[a] = cr[i] * x1 - sr[i] * x2;
            v[e] = sr[i] * x1 + cr[i] * x2;
          }
        }
      }
  }

 private:
  bool interleaved_;
  int64_t rotary_dim_, heads_;
};

}  // namespace

void register_attention_kernels(KernelRegistry& r) {
  KernelDef a;
  a.op_type = "Attention";
  a.dtypes = {DType::F32};
  a.create = [](const KernelCreateInfo& ci) -> std::unique_ptr<Kernel> { return std::make_unique<AttentionKernel>(ci.node); };
  r.add(std::move(a));
  KernelDef rot;
  rot.op_type = "RotaryEmbedding";
  rot.dtypes = {DType::F32};
  rot.create = [](const KernelCreateInfo& ci) -> std::unique_ptr<Kernel> { return std::make_unique<RotaryEmbeddingKernel>(ci.node); };
  r.add(std::move(rot));
}

}  // namespace sy
