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
  window_ = n.graph.attr_int(n.node, "window").value_or(0);
}

namespace {

struct Layout {
  int64_t H, KVH, T, D, NB, BS;
};

// Explicit SIMD reduction (-fopenmp-simd): vectorised without -ffast-math.
inline float dot(const float* a, const float* b, int64_t n) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

void PagedAttentionKernel::compute(sy::plugin::KernelIO& io) {
  const sy_step_context* step = io.step();
  if (!step || step->num_seqs <= 0)
    throw Error("PagedAttention runs only in the step engine: select a cache manager ('cache:') in the manifest",
                SY_INVALID_ARGUMENT);
  if (layer_ < 0 || layer_ >= step->num_layers) throw Error("PagedAttention: layer out of range of the KV cache", SY_INVALID_ARGUMENT);
  auto q = io.input(0), kn = io.input(1), vn = io.input(2);
  if (q.rank() != 4 || kn.rank() != 4 || vn.rank() != 4 || q.dim(0) != 1 || kn.dim(0) != 1)
    throw Error("PagedAttention: expected Q/K/V of shape [1, heads, tokens, head_dim]", SY_INVALID_ARGUMENT);
  const sy_tensor& kc = step->key_cache[layer_];
  const sy_tensor& vc = step->value_cache[layer_];
  Layout L{q.dim(1), kn.dim(1), q.dim(2), q.dim(3), kc.dims[0], kc.dims[2]};
  if (L.H % L.KVH != 0 || kn.dim(3) != L.D || kc.dims[1] != L.KVH || kc.dims[3] != L.D || kn.dim(2) != L.T || L.T != step->num_tokens)
    throw Error("PagedAttention: Q/K/V shapes do not match the KV cache layout or the step's token count", SY_INVALID_ARGUMENT);
  auto out = io.allocate_output(0, SY_DTYPE_FLOAT32, q.dims());
  const float* Q = q.data<float>();
  const float* Kn = kn.data<float>();
  const float* Vn = vn.data<float>();
  float* K = static_cast<float*>(kc.data);
  float* V = static_cast<float*>(vc.data);
  float* O = out.data<float>();
  const int32_t* tables = step->block_tables;
  const int64_t maxb = step->max_blocks_per_seq;
  auto slot = [&](int64_t seq, int64_t pos, int64_t g) {
    int64_t block = tables[seq * maxb + pos / L.BS];
    return ((block * L.KVH + g) * L.BS + pos % L.BS) * L.D;
  };
  // 1. The new tokens' keys and values go into their cache slots.
  for (int32_t i = 0; i < step->num_seqs; ++i) {
    int64_t q0 = step->query_start[i], n = step->query_start[i + 1] - q0, ctx = step->context_len[i];
    for (int64_t j = 0; j < n; ++j) {
      int64_t pos = ctx - n + j;
      for (int64_t g = 0; g < L.KVH; ++g) {
        int64_t src = (g * L.T + q0 + j) * L.D;
        std::memcpy(K + slot(i, pos, g), Kn + src, static_cast<size_t>(L.D) * sizeof(float));
        std::memcpy(V + slot(i, pos, g), Vn + src, static_cast<size_t>(L.D) * sizeof(float));
      }
    }
  }
  // 2. Attention, one (sequence, query head) pair per work item.
  const int64_t group = L.H / L.KVH;
  const int64_t items = static_cast<int64_t>(step->num_seqs) * L.H;
  auto work = [&](int64_t b, int64_t e) {
    std::vector<float> scores(static_cast<size_t>(L.BS)), acc(static_cast<size_t>(L.D));
    for (int64_t it = b; it < e; ++it) {
      int64_t i = it / L.H, h = it % L.H, g = h / group;
      int64_t q0 = step->query_start[i], n = step->query_start[i + 1] - q0, ctx = step->context_len[i];
      for (int64_t j = 0; j < n; ++j) {
        const float* qv = Q + (h * L.T + q0 + j) * L.D;
        int64_t last = ctx - n + j;  // causal: keys 0..last
        int64_t first = window_ > 0 ? std::max<int64_t>(0, last - window_ + 1) : 0;
        float m = -std::numeric_limits<float>::infinity(), l = 0.f;
        std::fill(acc.begin(), acc.end(), 0.f);
        // Online softmax, one cache block at a time.
        for (int64_t start = first; start <= last;) {
          int64_t end = std::min(last + 1, (start / L.BS + 1) * L.BS);
          int64_t block = tables[i * maxb + start / L.BS];
          const float* kb = K + ((block * L.KVH + g) * L.BS) * L.D;
          const float* vb = V + ((block * L.KVH + g) * L.BS) * L.D;
          float bm = m;
          for (int64_t p = start; p < end; ++p) {
            float s = dot(qv, kb + (p % L.BS) * L.D, L.D) * scale_;
            scores[static_cast<size_t>(p - start)] = s;
            bm = std::max(bm, s);
          }
          float correction = std::exp(m - bm);
          l *= correction;
          float* a = acc.data();
#pragma omp simd
          for (int64_t d = 0; d < L.D; ++d) a[d] *= correction;
          for (int64_t p = start; p < end; ++p) {
            float w = std::exp(scores[static_cast<size_t>(p - start)] - bm);
            l += w;
            const float* vv = vb + (p % L.BS) * L.D;
#pragma omp simd
            for (int64_t d = 0; d < L.D; ++d) a[d] += w * vv[d];
          }
          m = bm;
          start = end;
        }
        float* o = O + (h * L.T + q0 + j) * L.D;
        float inv = 1.f / l;
        for (int64_t d = 0; d < L.D; ++d) o[d] = acc[static_cast<size_t>(d)] * inv;
      }
    }
  };
  int64_t total_keys = 0;
  for (int32_t i = 0; i < step->num_seqs; ++i) total_keys += step->context_len[i] * (step->query_start[i + 1] - step->query_start[i]);
  if (total_keys * L.H * L.D >= (1 << 16)) io.parallel_for(items, 1, work);
  else work(0, items);
}

}  // namespace sy_attention
