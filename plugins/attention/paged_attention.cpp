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
  latent_dim_ = n.graph.attr_int(n.node, "latent_dim").value_or(0);
  latent_value_dim_ = n.graph.attr_int(n.node, "value_dim").value_or(latent_dim_);
  if (latent_dim_ < 0 || (latent_dim_ > 0 && latent_value_dim_ < latent_dim_))
    throw Error("PagedAttention: latent_dim must be >= 0 and value_dim at least latent_dim", SY_INVALID_ARGUMENT);
  if (latent_dim_ > 0 && packed_heads_ > 0) throw Error("PagedAttention: latent attention takes the heads-major layout", SY_INVALID_ARGUMENT);
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
    } else if (dtype == SY_DTYPE_FLOAT16) {
      to_halves_fn()(src, D, reinterpret_cast<uint16_t*>(dst));
    } else {
      for (int64_t i = 0; i < D; ++i) {
        const uint16_t h = sy::plugin::f32_to_bf16(src[i]);
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
  const int64_t NB = kc.dims[0], BS = kc.dims[2];
  if (kc.dtype != vc.dtype ||
      (kc.dtype != SY_DTYPE_FLOAT32 && kc.dtype != SY_DTYPE_FLOAT16 && kc.dtype != SY_DTYPE_BFLOAT16 && !quantized))
    throw Error("PagedAttention: the KV cache must hold float32, float16, bfloat16, int8 or fp8 (e4m3fn) rows, got dtype " +
                    std::to_string(kc.dtype),
                SY_UNSUPPORTED);
  // Sizes: a query and a key (DK), the cache's key and value rows (KD, VD),
  // a value and the output (DV). Latent attention (latent_dim > 0) caches
  // the latent and the rotary key, whose concatenation is the key; a value
  // is the key's first DV values.
  const int64_t KD = kc.dims[3] - (quantized ? SY_KV_ROW_SCALE_BYTES : 0), VD = vc.dims[3] - (quantized ? SY_KV_ROW_SCALE_BYTES : 0);
  const bool latent = latent_dim_ > 0;
  const int64_t DK = latent ? KD + VD : KD, DV = latent ? latent_value_dim_ : VD;
  if (latent && (KD != latent_dim_ || DV > DK))
    throw Error("PagedAttention: the key cache's rows (" + std::to_string(KD) + ") are not the latent's " + std::to_string(latent_dim_) +
                    " values, or value_dim exceeds the key",
                SY_INVALID_ARGUMENT);
  HeadLayout QL, KL, VL, OL;
  if (token_major) {
    if (q.rank() != 3 || kn.rank() != 3 || vn.rank() != 3 || q.dim(0) != 1 || kn.dim(0) != 1)
      throw Error("PagedAttention: expected Q/K/V of shape [1, tokens, heads * head_dim]", SY_INVALID_ARGUMENT);
    QL = {packed_heads_, q.dim(1), DK, true};
    KL = {kv_heads_, kn.dim(1), KD, true};
    VL = {kv_heads_, vn.dim(1), VD, true};
    OL = {packed_heads_, q.dim(1), DV, true};
    if (q.dim(2) != packed_heads_ * DK || kn.dim(2) != kv_heads_ * KD || vn.dim(2) != kv_heads_ * VD)
      throw Error("PagedAttention: Q/K/V widths do not match num_heads/kv_heads and the cache's head sizes", SY_INVALID_ARGUMENT);
  } else {
    if (q.rank() != 4 || kn.rank() != 4 || vn.rank() != 4 || q.dim(0) != 1 || kn.dim(0) != 1)
      throw Error("PagedAttention: expected Q/K/V of shape [1, heads, tokens, head_dim]", SY_INVALID_ARGUMENT);
    QL = {q.dim(1), q.dim(2), q.dim(3), false};
    KL = {kn.dim(1), kn.dim(2), kn.dim(3), false};
    VL = {vn.dim(1), vn.dim(2), vn.dim(3), false};
    OL = {q.dim(1), q.dim(2), DV, false};
    if (QL.dim != DK || KL.dim != KD || VL.dim != VD || VL.heads != KL.heads || VL.tokens != KL.tokens)
      throw Error("PagedAttention: head sizes of Q (" + std::to_string(QL.dim) + "), K (" + std::to_string(KL.dim) + "), V (" +
                      std::to_string(VL.dim) + ") do not match the cache's rows (" + std::to_string(KD) + ", " + std::to_string(VD) +
                      (latent ? ", latent" : "") + ")",
                  SY_INVALID_ARGUMENT);
  }
  const int64_t H = QL.heads, KVH = KL.heads, T = QL.tokens;
  if (H % KVH != 0 || kc.dims[1] != KVH || KL.tokens != T || T != step->num_tokens)
    throw Error("PagedAttention: Q/K/V shapes do not match the KV cache layout or the step's token count", SY_INVALID_ARGUMENT);
  const bool rotary = io.has_input(3) && io.has_input(4);
  const float *cos_c = nullptr, *sin_c = nullptr;
  int64_t half = 0, max_pos = 0;
  if (rotary) {
    auto c = io.input(3), sn = io.input(4);
    if (latent) throw Error("PagedAttention: latent attention rotates in the graph, not in the op", SY_INVALID_ARGUMENT);
    if (c.rank() != 2 || sn.dims() != c.dims() || 2 * c.dim(1) > KD)
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
  std::vector<int64_t> out_dims = q.dims();
  out_dims.back() = token_major ? packed_heads_ * DV : DV;
  auto out = io.allocate_output(0, SY_DTYPE_FLOAT32, out_dims);
  const float* Q = q.data<float>();
  const float* Kn = kn.data<float>();
  const float* Vn = vn.data<float>();
  const CacheRows K{kc.data, kc.dtype, KD}, V{vc.data, vc.dtype, VD};
  float* O = out.data<float>();
  (void)NB;
  const int32_t* tables = step->block_tables;
  const int64_t maxb = step->max_blocks_per_seq;
  auto slot = [&](int64_t seq, int64_t pos, int64_t g) {
    int64_t block = tables[seq * maxb + pos / BS];
    return (block * KVH + g) * BS + pos % BS;  // the row (CacheRows::write sizes it)
  };
  // 1. The new tokens' keys (rotated) and values go into their cache slots.
  std::vector<float> krow(static_cast<size_t>(KD));
  for (int32_t i = 0; i < step->num_seqs; ++i) {
    int64_t q0 = step->query_start[i], n = step->query_start[i + 1] - q0, ctx = step->context_len[i];
    for (int64_t j = 0; j < n; ++j) {
      int64_t pos = ctx - n + j;
      for (int64_t g = 0; g < KVH; ++g) {
        std::memcpy(krow.data(), Kn + KL.offset(g, q0 + j), static_cast<size_t>(KD) * sizeof(float));
        if (rotary) rotate(krow.data(), step->positions[q0 + j], cos_c, sin_c, half, rotary_interleaved_);
        K.write(slot(i, pos, g), krow.data());
        V.write(slot(i, pos, g), Vn + VL.offset(g, q0 + j));
      }
    }
  }
  // 2. Attention in tiles: the query heads of one KV head times up to
  // kTileRows / group tokens of one sequence, each tile reading its context's
  // keys and values once (attend.h). A tile whose keys span several
  // kSegmentKeys segments of the context is split there (split-K): each
  // segment is a work item writing its rows' softmax state, merged after,
  // so a long decode spreads over the threads even with one KV head. Items
  // are taken largest first from a shared counter, so a long prompt's tiles
  // and many short decodes spread evenly too.
  const int64_t group = H / KVH;
  const int64_t tile_tokens = std::max<int64_t>(1, kTileRows / group);
  const int32_t max_rows = static_cast<int32_t>(tile_tokens * group);
  const int64_t SF = attend_state_floats(DV);
  struct Tile {
    int32_t seq;
    int32_t kv_head;
    int64_t t0, t1;      // the sequence's query tokens [t0, t1)
    int64_t segments;    // split-K parts (1: the tile writes its output itself)
    size_t first_state;  // its parts' states in `states`, parts x max_rows x SF floats
    // A token-tree node (a tile of one query token): its depth and where
    // its path's slots start in `paths` (-1: an ordinary tile).
    int64_t depth = 0;
    int64_t path = -1;
  };
  struct Item {
    size_t tile;
    int64_t key_begin, key_end;
    int64_t part;  // which of the tile's segments (-1: unsplit)
    int64_t cost;
  };
  std::vector<Tile> tiles;
  std::vector<Item> items;
  size_t state_floats = 0;
  int64_t total_cost = 0;
  // Token trees (1.9): a query token that follows an earlier one than the
  // token before it. Each token of a tree is a tile of its own, its keys
  // past the sequence's first query token remapped to its path's slots.
  const int32_t* parents = SY_HAS_FIELD(step, sy_step_context, token_parents) ? step->token_parents : nullptr;
  std::vector<int64_t> paths;  // per tree token: the slots of its path from the first query token
  for (int32_t i = 0; i < step->num_seqs; ++i) {
    const int64_t q0 = step->query_start[i], n = step->query_start[i + 1] - q0, ctx = step->context_len[i];
    bool tree = false;
    for (int64_t j = 0; parents && j < n; ++j) {
      if (parents[q0 + j] >= j || (j == 0 && parents[q0] >= 0))
        throw Error("PagedAttention: token " + std::to_string(j) + " of sequence " + std::to_string(i) + " follows token " +
                        std::to_string(parents[q0 + j]) + ", not an earlier one",
                    SY_INVALID_ARGUMENT);
      tree = tree || parents[q0 + j] >= 0;
    }
    for (int64_t t0 = 0; t0 < n; t0 += tree ? 1 : tile_tokens) {
      const int64_t t1 = tree ? t0 + 1 : std::min(n, t0 + tile_tokens);
      int64_t depth = 0, path = -1;
      if (tree) {
        std::vector<int64_t> up;  // t0 and its ancestors, back to the first query token
        for (int64_t x = t0;; x = parents[q0 + x] >= 0 ? parents[q0 + x] : x - 1) {
          up.push_back(ctx - n + x);
          if (x == 0) break;
        }
        depth = static_cast<int64_t>(up.size()) - 1;
        path = static_cast<int64_t>(paths.size());
        paths.insert(paths.end(), up.rbegin(), up.rend());
      }
      // The tile's last key position: its last token's slot, or a tree node's depth past the first query token.
      const int64_t last = tree ? ctx - n + depth : ctx - n + t1 - 1;
      const int64_t first = window_ > 0 ? std::max<int64_t>(0, (tree ? last : ctx - n + t0) - window_ + 1) : 0;
      const int64_t s0 = first / kSegmentKeys, s1 = last / kSegmentKeys, rows = (t1 - t0) * group;
      for (int64_t g = 0; g < KVH; ++g) {
        const size_t index = tiles.size();
        tiles.push_back({i, static_cast<int32_t>(g), t0, t1, s1 - s0 + 1, state_floats, depth, path});
        if (s0 == s1) {
          items.push_back({index, 0, INT64_MAX, -1, rows * (last - first + 1)});
        } else {
          state_floats += static_cast<size_t>((s1 - s0 + 1) * max_rows * SF);
          for (int64_t sg = s0; sg <= s1; ++sg) {
            const int64_t b = std::max(first, sg * kSegmentKeys), e = std::min(last + 1, (sg + 1) * kSegmentKeys);
            items.push_back({index, sg * kSegmentKeys, (sg + 1) * kSegmentKeys, sg - s0, rows * (e - b)});
          }
        }
        total_cost += rows * (last - first + 1);
      }
    }
  }
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.cost > b.cost; });
  std::vector<float> states(state_floats);
  const AttendFn attend = attend_fn();
  // The rows of a tile, in order: token j's query heads of the tile's KV head.
  auto for_rows = [&](const Tile& tile, auto&& fn) {
    const int64_t q0 = step->query_start[tile.seq];
    int32_t row = 0;
    for (int64_t j = tile.t0; j < tile.t1; ++j)
      for (int64_t hh = 0; hh < group; ++hh, ++row) fn(row, q0 + j, tile.kv_head * group + hh);
  };
  std::atomic<size_t> next{0};
  auto work = [&](int64_t, int64_t) {
    std::vector<float> qrows(static_cast<size_t>(max_rows * DK)), orows(static_cast<size_t>(max_rows * DV)),
        scratch(static_cast<size_t>(attend_scratch_floats(max_rows, DK, DV)));
    std::vector<int64_t> last(static_cast<size_t>(max_rows));
    std::vector<float> row_sinks(static_cast<size_t>(max_rows));
    for (size_t k = next++; k < items.size(); k = next++) {
      const Item& item = items[k];
      const Tile& tile = tiles[item.tile];
      const int64_t q0 = step->query_start[tile.seq], n = step->query_start[tile.seq + 1] - q0, ctx = step->context_len[tile.seq];
      int32_t rows = 0;
      for_rows(tile, [&](int32_t row, int64_t token, int64_t head) {
        float* qv = qrows.data() + row * DK;
        std::memcpy(qv, Q + QL.offset(head, token), static_cast<size_t>(DK) * sizeof(float));
        if (rotary) rotate(qv, step->positions[token], cos_c, sin_c, half, rotary_interleaved_);
        // Causal: keys 0..last (a tree node's: its path's, as if in place).
        last[static_cast<size_t>(row)] = tile.path >= 0 ? ctx - n + tile.depth : ctx - n + (token - q0);
        if (sinks) row_sinks[static_cast<size_t>(row)] = sinks[head];
        rows = row + 1;
      });
      AttendTile at{DK,       DV,       BS,     KVH,          tile.kv_head,  tables + tile.seq * maxb,
                    kc.data,  vc.data,  latent ? latent_dim_ : 0,    kc.dtype,      scale_,
                    softcap_, window_,  rows,   qrows.data(), last.data(),   orows.data(),
                    sinks ? row_sinks.data() : nullptr};
      if (tile.path >= 0) {
        at.remap_begin = ctx - n;
        at.remap = paths.data() + tile.path;
      }
      if (item.part >= 0) {
        at.key_begin = item.key_begin;
        at.key_end = item.key_end;
        at.state = states.data() + tile.first_state + static_cast<size_t>(item.part * max_rows * SF);
      }
      attend(at, scratch.data());
      if (item.part < 0)
        for_rows(tile, [&](int32_t row, int64_t token, int64_t head) {
          std::memcpy(O + OL.offset(head, token), orows.data() + row * DV, static_cast<size_t>(DV) * sizeof(float));
        });
    }
  };
  if (total_cost * (DK + DV) >= (1 << 17) && items.size() > 1) io.parallel_for(static_cast<int64_t>(items.size()), 1, work);
  else work(0, 1);
  // 3. Split tiles: their segments' states merged, in segment order.
  std::vector<size_t> split;
  for (size_t i = 0; i < tiles.size(); ++i)
    if (tiles[i].segments > 1) split.push_back(i);
  auto merge = [&](int64_t b, int64_t e) {
    std::vector<float> orows(static_cast<size_t>(max_rows * DV)), row_sinks(static_cast<size_t>(max_rows));
    std::vector<const float*> parts;
    for (int64_t k = b; k < e; ++k) {
      const Tile& tile = tiles[split[static_cast<size_t>(k)]];
      int32_t rows = 0;
      for_rows(tile, [&](int32_t row, int64_t, int64_t head) {
        if (sinks) row_sinks[static_cast<size_t>(row)] = sinks[head];
        rows = row + 1;
      });
      parts.clear();
      for (int64_t p = 0; p < tile.segments; ++p) parts.push_back(states.data() + tile.first_state + static_cast<size_t>(p * max_rows * SF));
      attend_merge(parts.data(), tile.segments, rows, DV, sinks ? row_sinks.data() : nullptr, orows.data());
      for_rows(tile, [&](int32_t row, int64_t token, int64_t head) {
        std::memcpy(O + OL.offset(head, token), orows.data() + row * DV, static_cast<size_t>(DV) * sizeof(float));
      });
    }
  };
  if (split.size() > 1 && total_cost * (DK + DV) >= (1 << 17)) io.parallel_for(static_cast<int64_t>(split.size()), 1, merge);
  else if (!split.empty()) merge(0, static_cast<int64_t>(split.size()));
}

}  // namespace sy_attention
