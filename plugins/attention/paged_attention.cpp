#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "attend.h"
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

// Query rows per attention tile (a GQA group larger than this is one tile a token).
constexpr int64_t kTileRows = 16;

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

// Rows of the KV cache in its stored type (float32, float16, bfloat16, or
// int8 / fp8 rows with their scale): written from float (attend.h reads them).
struct CacheRows {
  void* base;
  int32_t dtype;
  int64_t D;
  void write(int64_t row, const float* src) const {
    uint8_t* dst = static_cast<uint8_t*>(base) + row * kv_row_bytes(dtype, D);
    if (dtype == SY_DTYPE_FLOAT32) {
      std::memcpy(dst, src, static_cast<size_t>(D) * sizeof(float));
    } else if (SY_KV_ROW_QUANTIZED(dtype)) {
      sy::plugin::quantize_kv_row(src, D, dtype, dst);
    } else {
      for (int64_t i = 0; i < D; ++i) {
        const uint16_t h = dtype == SY_DTYPE_FLOAT16 ? sy::plugin::f32_to_f16(src[i]) : sy::plugin::f32_to_bf16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
    }
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
  // A quantized cache's rows are the head's codes and a scale (SY_KV_ROW_*).
  const bool quantized = SY_KV_ROW_QUANTIZED(kc.dtype);
  const int64_t NB = kc.dims[0], BS = kc.dims[2], D = kc.dims[3] - (quantized ? SY_KV_ROW_SCALE_BYTES : 0);
  if (kc.dtype != vc.dtype ||
      (kc.dtype != SY_DTYPE_FLOAT32 && kc.dtype != SY_DTYPE_FLOAT16 && kc.dtype != SY_DTYPE_BFLOAT16 && !quantized))
    throw Error("PagedAttention: the KV cache must hold float32, float16, bfloat16, int8 or fp8 (e4m3fn) rows, got dtype " +
                    std::to_string(kc.dtype),
                SY_UNSUPPORTED);
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
  // Attention sinks (gpt-oss): one logit per query head, input 5.
  const float* sinks = nullptr;
  if (io.has_input(5)) {
    auto sk = io.input(5);
    if (sk.numel() != H || sk.dtype() != SY_DTYPE_FLOAT32)
      throw Error("PagedAttention: sinks must be " + std::to_string(H) + " float32 values, one per query head", SY_INVALID_ARGUMENT);
    sinks = sk.data<float>();
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
    return (block * KVH + g) * BS + pos % BS;  // the row (CacheRows::write sizes it)
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
  // 2. Attention in tiles: the query heads of one KV head times up to
  // kTileRows / group tokens of one sequence, each tile reading its context's
  // keys and values once (attend.h). Tiles are taken largest first from a
  // shared counter, so a long prompt's tiles and many short decodes spread
  // evenly over the threads.
  const int64_t group = H / KVH;
  const int64_t tile_tokens = std::max<int64_t>(1, kTileRows / group);
  struct Tile {
    int32_t seq;
    int32_t kv_head;
    int64_t t0, t1;  // the sequence's query tokens [t0, t1)
    int64_t cost;
  };
  std::vector<Tile> tiles;
  int64_t total_cost = 0;
  for (int32_t i = 0; i < step->num_seqs; ++i) {
    const int64_t n = step->query_start[i + 1] - step->query_start[i], ctx = step->context_len[i];
    for (int64_t t0 = 0; t0 < n; t0 += tile_tokens) {
      const int64_t t1 = std::min(n, t0 + tile_tokens);
      const int64_t keys = window_ > 0 ? std::min<int64_t>(ctx - n + t1, window_ + (t1 - t0)) : ctx - n + t1;
      for (int64_t g = 0; g < KVH; ++g) {
        tiles.push_back({i, static_cast<int32_t>(g), t0, t1, (t1 - t0) * group * keys});
        total_cost += (t1 - t0) * group * keys;
      }
    }
  }
  std::stable_sort(tiles.begin(), tiles.end(), [](const Tile& a, const Tile& b) { return a.cost > b.cost; });
  const AttendFn attend = attend_fn();
  const int32_t max_rows = static_cast<int32_t>(tile_tokens * group);
  std::atomic<size_t> next{0};
  auto work = [&](int64_t, int64_t) {
    std::vector<float> qrows(static_cast<size_t>(max_rows * D)), orows(static_cast<size_t>(max_rows * D)),
        scratch(static_cast<size_t>(attend_scratch_floats(max_rows, D)));
    std::vector<int64_t> last(static_cast<size_t>(max_rows));
    std::vector<float> row_sinks(static_cast<size_t>(max_rows));
    for (size_t k = next++; k < tiles.size(); k = next++) {
      const Tile& tile = tiles[k];
      const int64_t q0 = step->query_start[tile.seq], n = step->query_start[tile.seq + 1] - q0, ctx = step->context_len[tile.seq];
      int32_t rows = 0;
      for (int64_t j = tile.t0; j < tile.t1; ++j)
        for (int64_t hh = 0; hh < group; ++hh, ++rows) {
          float* qv = qrows.data() + rows * D;
          std::memcpy(qv, Q + QL.offset(tile.kv_head * group + hh, q0 + j), static_cast<size_t>(D) * sizeof(float));
          if (rotary) rotate(qv, step->positions[q0 + j], cos_c, sin_c, half, rotary_interleaved_);
          last[static_cast<size_t>(rows)] = ctx - n + j;  // causal: keys 0..last
          if (sinks) row_sinks[static_cast<size_t>(rows)] = sinks[tile.kv_head * group + hh];
        }
      AttendTile at{D, BS, KVH, tile.kv_head, tables + tile.seq * maxb, kc.data, vc.data, kc.dtype, scale_, softcap_,
                    window_, rows, qrows.data(), last.data(), orows.data(), sinks ? row_sinks.data() : nullptr};
      attend(at, scratch.data());
      rows = 0;
      for (int64_t j = tile.t0; j < tile.t1; ++j)
        for (int64_t hh = 0; hh < group; ++hh, ++rows)
          std::memcpy(O + QL.offset(tile.kv_head * group + hh, q0 + j), orows.data() + rows * D, static_cast<size_t>(D) * sizeof(float));
    }
  };
  if (total_cost * D >= (1 << 16) && tiles.size() > 1) io.parallel_for(static_cast<int64_t>(tiles.size()), 1, work);
  else work(0, 1);
}

}  // namespace sy_attention
