#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "attention_plugin.h"

namespace sy_attention {

using sy::plugin::Error;

PagedAttentionKernel::PagedAttentionKernel(const sy::plugin::NodeRef& n) {
  auto layer = n.graph.attr_int(n.node, "layer");
  auto scale = n.graph.attr_float(n.node, "scale");
  if (!layer || !scale) throw Error("PagedAttention needs 'layer' and 'scale' attributes", SY_INVALID_ARGUMENT);
  layer_ = static_cast<int32_t>(*layer);
  scale_ = *scale;
  softcap_ = n.graph.attr_float(n.node, "softcap").value_or(0.f);
  window_ = n.graph.attr_int(n.node, "window").value_or(0);
  packed_heads_ = n.graph.attr_int(n.node, "num_heads").value_or(0);
  kv_heads_ = n.graph.attr_int(n.node, "kv_heads").value_or(0);
  rotary_interleaved_ = n.graph.attr_int(n.node, "rotary_interleaved").value_or(0) != 0;
  if (softcap_ < 0.f) throw Error("PagedAttention: softcap must be >= 0", SY_INVALID_ARGUMENT);
  if (packed_heads_ > 0 && kv_heads_ <= 0) throw Error("PagedAttention: the token-major layout needs kv_heads", SY_INVALID_ARGUMENT);
}

namespace {

// Explicit SIMD reduction (-fopenmp-simd): vectorised without -ffast-math.
inline float dot(const float* a, const float* b, int64_t n) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Rotates the first 2*half values of one head at position pos.
inline void rotate(float* x, int64_t pos, const float* cos_c, const float* sin_c, int64_t half, bool interleaved) {
  const float* c = cos_c + pos * half;
  const float* s = sin_c + pos * half;
  for (int64_t i = 0; i < half; ++i) {
    const int64_t a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
    const float x1 = x[a], x2 = x[b];
    x[a] = x1 * c[i] - x2 * s[i];
    x[b] = x2 * c[i] + x1 * s[i];
  }
}

// Rows of the KV cache in its stored type (float32, float16, bfloat16):
// written from float, read as float (directly, or through a scratch row).
struct CacheRows {
  void* base;
  int32_t dtype;
  int64_t D;
  void write(int64_t at, const float* src) const {
    if (dtype == SY_DTYPE_FLOAT32) {
      std::memcpy(static_cast<float*>(base) + at, src, static_cast<size_t>(D) * sizeof(float));
      return;
    }
    uint16_t* dst = static_cast<uint16_t*>(base) + at;
    for (int64_t i = 0; i < D; ++i) dst[i] = dtype == SY_DTYPE_FLOAT16 ? sy::plugin::f32_to_f16(src[i]) : sy::plugin::f32_to_bf16(src[i]);
  }
  const float* read(int64_t at, float* scratch) const {
    if (dtype == SY_DTYPE_FLOAT32) return static_cast<const float*>(base) + at;
    const uint16_t* src = static_cast<const uint16_t*>(base) + at;
    for (int64_t i = 0; i < D; ++i) scratch[i] = dtype == SY_DTYPE_FLOAT16 ? sy::plugin::f16_to_f32(src[i]) : sy::plugin::bf16_to_f32(src[i]);
    return scratch;
  }
};

// Where head h of token t sits in a Q/K/V tensor of either layout.
struct HeadLayout {
  int64_t heads, tokens, dim;
  bool token_major;
  int64_t offset(int64_t h, int64_t t) const { return token_major ? (t * heads + h) * dim : (h * tokens + t) * dim; }
};

}  // namespace

void PagedAttentionKernel::compute(sy::plugin::KernelIO& io) {
  const sy_step_context* step = io.step();
  if (!step || step->num_seqs <= 0)
    throw Error("PagedAttention runs only in the step engine: select a cache manager ('cache:') in the manifest",
                SY_INVALID_ARGUMENT);
  if (layer_ < 0 || layer_ >= step->num_layers) throw Error("PagedAttention: layer out of range of the KV cache", SY_INVALID_ARGUMENT);
  auto q = io.input(0), kn = io.input(1), vn = io.input(2);
  const sy_tensor& kc = step->key_cache[layer_];
  const sy_tensor& vc = step->value_cache[layer_];
  const bool token_major = packed_heads_ > 0;
  const int64_t NB = kc.dims[0], BS = kc.dims[2], D = kc.dims[3];
  HeadLayout QL, KL;
  if (token_major) {
    if (q.rank() != 3 || kn.rank() != 3 || vn.rank() != 3 || q.dim(0) != 1 || kn.dim(0) != 1)
      throw Error("PagedAttention: expected Q/K/V of shape [1, tokens, heads * head_dim]", SY_INVALID_ARGUMENT);
    QL = {packed_heads_, q.dim(1), D, true};
    KL = {kv_heads_, kn.dim(1), D, true};
    if (q.dim(2) != packed_heads_ * D || kn.dim(2) != kv_heads_ * D || vn.dim(2) != kv_heads_ * D)
      throw Error("PagedAttention: Q/K/V widths do not match num_heads/kv_heads and the cache's head size", SY_INVALID_ARGUMENT);
  } else {
    if (q.rank() != 4 || kn.rank() != 4 || vn.rank() != 4 || q.dim(0) != 1 || kn.dim(0) != 1)
      throw Error("PagedAttention: expected Q/K/V of shape [1, heads, tokens, head_dim]", SY_INVALID_ARGUMENT);
    QL = {q.dim(1), q.dim(2), q.dim(3), false};
    KL = {kn.dim(1), kn.dim(2), kn.dim(3), false};
    if (kn.dim(3) != QL.dim || QL.dim != D) throw Error("PagedAttention: head sizes of Q, K and the cache differ", SY_INVALID_ARGUMENT);
  }
  const int64_t H = QL.heads, KVH = KL.heads, T = QL.tokens;
  if (H % KVH != 0 || kc.dims[1] != KVH || KL.tokens != T || T != step->num_tokens)
    throw Error("PagedAttention: Q/K/V shapes do not match the KV cache layout or the step's token count", SY_INVALID_ARGUMENT);
  if (kc.dtype != vc.dtype || (kc.dtype != SY_DTYPE_FLOAT32 && kc.dtype != SY_DTYPE_FLOAT16 && kc.dtype != SY_DTYPE_BFLOAT16))
    throw Error("PagedAttention: the KV cache must hold float32, float16 or bfloat16", SY_UNSUPPORTED);
  const bool rotary = io.has_input(3) && io.has_input(4);
  const float *cos_c = nullptr, *sin_c = nullptr;
  int64_t half = 0, max_pos = 0;
  if (rotary) {
    auto c = io.input(3), sn = io.input(4);
    if (c.rank() != 2 || sn.dims() != c.dims() || 2 * c.dim(1) > D)
      throw Error("PagedAttention: cos/sin caches must be [max_positions, rotary_dim / 2] within the head size", SY_INVALID_ARGUMENT);
    cos_c = c.data<float>();
    sin_c = sn.data<float>();
    half = c.dim(1);
    max_pos = c.dim(0);
    for (int64_t t = 0; t < T; ++t)
      if (step->positions[t] < 0 || step->positions[t] >= max_pos)
        throw Error("PagedAttention: position " + std::to_string(step->positions[t]) + " is past the rotary cache (" +
                        std::to_string(max_pos) + " positions)",
                    SY_INVALID_ARGUMENT);
  }
  auto out = io.allocate_output(0, SY_DTYPE_FLOAT32, q.dims());
  const float* Q = q.data<float>();
  const float* Kn = kn.data<float>();
  const float* Vn = vn.data<float>();
  const CacheRows K{kc.data, kc.dtype, D}, V{vc.data, vc.dtype, D};
  float* O = out.data<float>();
  (void)NB;
  const int32_t* tables = step->block_tables;
  const int64_t maxb = step->max_blocks_per_seq;
  auto slot = [&](int64_t seq, int64_t pos, int64_t g) {
    int64_t block = tables[seq * maxb + pos / BS];
    return ((block * KVH + g) * BS + pos % BS) * D;
  };
  // 1. The new tokens' keys (rotated) and values go into their cache slots.
  std::vector<float> krow(static_cast<size_t>(D));
  for (int32_t i = 0; i < step->num_seqs; ++i) {
    int64_t q0 = step->query_start[i], n = step->query_start[i + 1] - q0, ctx = step->context_len[i];
    for (int64_t j = 0; j < n; ++j) {
      int64_t pos = ctx - n + j;
      for (int64_t g = 0; g < KVH; ++g) {
        std::memcpy(krow.data(), Kn + KL.offset(g, q0 + j), static_cast<size_t>(D) * sizeof(float));
        if (rotary) rotate(krow.data(), step->positions[q0 + j], cos_c, sin_c, half, rotary_interleaved_);
        K.write(slot(i, pos, g), krow.data());
        V.write(slot(i, pos, g), Vn + KL.offset(g, q0 + j));
      }
    }
  }
  // 2. Attention, one (sequence, query head) pair per work item.
  const int64_t group = H / KVH;
  const int64_t items = static_cast<int64_t>(step->num_seqs) * H;
  const float cap = softcap_;
  auto work = [&](int64_t b, int64_t e) {
    std::vector<float> scores(static_cast<size_t>(BS)), acc(static_cast<size_t>(D)), qbuf(static_cast<size_t>(D)),
        row(static_cast<size_t>(D));
    for (int64_t it = b; it < e; ++it) {
      int64_t i = it / H, h = it % H, g = h / group;
      int64_t q0 = step->query_start[i], n = step->query_start[i + 1] - q0, ctx = step->context_len[i];
      for (int64_t j = 0; j < n; ++j) {
        const float* qv = Q + QL.offset(h, q0 + j);
        if (rotary) {
          std::memcpy(qbuf.data(), qv, static_cast<size_t>(D) * sizeof(float));
          rotate(qbuf.data(), step->positions[q0 + j], cos_c, sin_c, half, rotary_interleaved_);
          qv = qbuf.data();
        }
        int64_t last = ctx - n + j;  // causal: keys 0..last
        int64_t first = window_ > 0 ? std::max<int64_t>(0, last - window_ + 1) : 0;
        float m = -std::numeric_limits<float>::infinity(), l = 0.f;
        std::fill(acc.begin(), acc.end(), 0.f);
        // Online softmax, one cache block at a time.
        for (int64_t start = first; start <= last;) {
          int64_t end = std::min(last + 1, (start / BS + 1) * BS);
          int64_t block = tables[i * maxb + start / BS];
          const int64_t kb = ((block * KVH + g) * BS) * D;
          float bm = m;
          for (int64_t p = start; p < end; ++p) {
            float s = dot(qv, K.read(kb + (p % BS) * D, row.data()), D) * scale_;
            if (cap > 0.f) s = cap * std::tanh(s / cap);
            scores[static_cast<size_t>(p - start)] = s;
            bm = std::max(bm, s);
          }
          float correction = std::exp(m - bm);
          l *= correction;
          float* a = acc.data();
#pragma omp simd
          for (int64_t d = 0; d < D; ++d) a[d] *= correction;
          for (int64_t p = start; p < end; ++p) {
            float w = std::exp(scores[static_cast<size_t>(p - start)] - bm);
            l += w;
            const float* vv = V.read(kb + (p % BS) * D, row.data());
#pragma omp simd
            for (int64_t d = 0; d < D; ++d) a[d] += w * vv[d];
          }
          m = bm;
          start = end;
        }
        float* o = O + QL.offset(h, q0 + j);
        float inv = 1.f / l;
        for (int64_t d = 0; d < D; ++d) o[d] = acc[static_cast<size_t>(d)] * inv;
      }
    }
  };
  int64_t total_keys = 0;
  for (int32_t i = 0; i < step->num_seqs; ++i) total_keys += step->context_len[i] * (step->query_start[i + 1] - step->query_start[i]);
  if (total_keys * H * D >= (1 << 16)) io.parallel_for(items, 1, work);
  else work(0, items);
}

}  // namespace sy_attention
