// The CPU attention tile of PagedAttention (plugins/attention/attend.h),
// every build this CPU has: against a double-precision softmax attention
// over the same paged cache (GQA groups, block sizes that do and do not
// divide the 32-key chunks, windows, soft-capping, half-precision caches,
// int8 and fp8 rows with their scales,
// attention sinks, values of another size than keys, latent attention's
// keys joined from two cached rows),
// and row-independent: a row attends to the same bits alone or in any tile
// (what keeps batching, chunked prefill and speculative verification equal
// to plain decoding).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <switchyard/plugin.hpp>

#include "attend.h"

namespace sy_attention {
namespace {

std::vector<std::pair<const char*, AttendFn>> builds() {
  std::vector<std::pair<const char*, AttendFn>> out;
  for (const char* name : {"generic", "avx2", "avx512"})
    if (AttendFn fn = attend_build(name)) out.emplace_back(name, fn);
  return out;
}

// One sequence's paged cache: `ctx` positions in shuffled blocks. Its key
// rows hold KD values and its value rows VD. A key is D values: the key row,
// or with latent attention the key row and the value row joined; a value is
// DV values: the value row, or the first DV values of the latent key.
struct Cache {
  int64_t D, DV, KD, VD, BS, KVH, ctx;
  bool latent;
  int32_t dtype;
  std::vector<int32_t> table;
  std::vector<float> k, v;       // the rows as float (what the kernel should read)
  std::vector<uint16_t> kh, vh;  // stored as halves when dtype is 16-bit
  std::vector<uint8_t> kq, vq;   // stored as quantized rows (codes + scale) when int8 or fp8
  const void* kp() const {
    return dtype == SY_DTYPE_FLOAT32 ? static_cast<const void*>(k.data()) : SY_KV_ROW_QUANTIZED(dtype) ? static_cast<const void*>(kq.data()) : kh.data();
  }
  const void* vp() const {
    return dtype == SY_DTYPE_FLOAT32 ? static_cast<const void*>(v.data()) : SY_KV_ROW_QUANTIZED(dtype) ? static_cast<const void*>(vq.data()) : vh.data();
  }
  float key(int64_t pos, int64_t g, int64_t d) const {
    return d < KD ? k[at(pos, g) * static_cast<size_t>(KD) + static_cast<size_t>(d)] : v[at(pos, g) * static_cast<size_t>(VD) + static_cast<size_t>(d - KD)];
  }
  float value(int64_t pos, int64_t g, int64_t d) const {
    return latent ? key(pos, g, d) : v[at(pos, g) * static_cast<size_t>(VD) + static_cast<size_t>(d)];
  }
  size_t at(int64_t pos, int64_t g) const {  // the row index
    return static_cast<size_t>((table[static_cast<size_t>(pos / BS)] * KVH + g) * BS + pos % BS);
  }
};

// Rows of `width` values, stored in `dtype`; `vals` becomes what the kernel reads back.
void store_rows(std::vector<float>& vals, int64_t width, int32_t dtype, std::vector<uint16_t>& halves, std::vector<uint8_t>& quantized) {
  const size_t size = vals.size();
  if (SY_KV_ROW_QUANTIZED(dtype)) {
    // Rows quantized as the kernel's writer does; the reference reads them
    // back through the SDK's decoding, so the kernel must match it exactly.
    const size_t rows = size / static_cast<size_t>(width), rb = static_cast<size_t>(kv_row_bytes(dtype, width));
    quantized.resize(rows * rb);
    for (size_t r = 0; r < rows; ++r) {
      uint8_t* row = quantized.data() + r * rb;
      sy::plugin::quantize_kv_row(vals.data() + r * static_cast<size_t>(width), width, dtype, row);
      const float scale = sy::plugin::kv_row_scale(row, width);
      for (int64_t d = 0; d < width; ++d) {
        const float code = dtype == SY_DTYPE_INT8 ? static_cast<float>(static_cast<int8_t>(row[d])) : sy::plugin::e4m3_table()[row[d]];
        vals[r * static_cast<size_t>(width) + static_cast<size_t>(d)] = code * scale;
      }
    }
  } else if (dtype != SY_DTYPE_FLOAT32) {
    halves.resize(size);
    for (size_t i = 0; i < size; ++i) {
      halves[i] = dtype == SY_DTYPE_FLOAT16 ? sy::plugin::f32_to_f16(vals[i]) : sy::plugin::f32_to_bf16(vals[i]);
      vals[i] = dtype == SY_DTYPE_FLOAT16 ? sy::plugin::f16_to_f32(halves[i]) : sy::plugin::bf16_to_f32(halves[i]);
    }
  }
}

// D: the key's size; DV: the value's (0: D); latent > 0: the key row's size
// in a latent cache (the value row holds the rest of the key).
Cache make_cache(int64_t D, int64_t DV, int64_t latent, int64_t BS, int64_t KVH, int64_t ctx, int32_t dtype, std::mt19937& rng) {
  DV = DV > 0 ? DV : D;
  const int64_t KD = latent > 0 ? latent : D, VD = latent > 0 ? D - latent : DV;
  Cache c{D, DV, KD, VD, BS, KVH, ctx, latent > 0, dtype, {}, {}, {}, {}, {}, {}, {}};
  const int64_t blocks = (ctx + BS - 1) / BS + 3;  // spare blocks the table skips
  std::vector<int32_t> order(static_cast<size_t>(blocks));
  for (int64_t i = 0; i < blocks; ++i) order[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  std::shuffle(order.begin(), order.end(), rng);
  c.table.assign(order.begin(), order.begin() + (ctx + BS - 1) / BS);
  std::normal_distribution<float> n(0.f, 1.f);
  const size_t rows = static_cast<size_t>(blocks * KVH * BS);
  c.k.resize(rows * static_cast<size_t>(KD));
  c.v.resize(rows * static_cast<size_t>(VD));
  for (auto& x : c.k) x = n(rng);
  for (auto& x : c.v) x = n(rng);
  store_rows(c.k, KD, dtype, c.kh, c.kq);
  store_rows(c.v, VD, dtype, c.vh, c.vq);
  return c;
}

struct Case {
  int64_t D, BS, KVH, ctx;
  int32_t rows;
  float softcap = 0.f;
  int64_t window = 0;
  int32_t dtype = SY_DTYPE_FLOAT32;
  bool sinks = false;  // gpt-oss's attention sinks: a row's sink is twice its query's first value
  int64_t value_dim = 0;   // 0: D
  int64_t latent_dim = 0;  // > 0: latent attention, key rows of this size
  int64_t DV() const { return value_dim > 0 ? value_dim : D; }
};

Cache make_cache(const Case& cs, std::mt19937& rng) {
  return make_cache(cs.D, cs.value_dim, cs.latent_dim, cs.BS, cs.KVH, cs.ctx, cs.dtype, rng);
}

float sink_of(const float* q) { return 2.f * q[0]; }

std::vector<float> run(AttendFn fn, const Cache& c, int64_t g, const Case& cs, const std::vector<float>& q,
                       const std::vector<int64_t>& last, float scale) {
  const auto rows = static_cast<int32_t>(last.size());
  std::vector<float> out(static_cast<size_t>(rows * c.DV), std::nanf("")),
      scratch(static_cast<size_t>(attend_scratch_floats(rows, c.D, c.DV)));
  std::vector<float> sinks;
  for (int32_t r = 0; r < rows && cs.sinks; ++r) sinks.push_back(sink_of(q.data() + r * c.D));
  AttendTile t{c.D,      c.DV,      c.BS, c.KVH,    g,           c.table.data(), c.kp(), c.vp(), c.latent ? c.KD : 0, c.dtype, scale,
               cs.softcap, cs.window, rows, q.data(), last.data(), out.data(),     cs.sinks ? sinks.data() : nullptr};
  fn(t, scratch.data());
  return out;
}

std::vector<double> reference(const Cache& c, int64_t g, const Case& cs, const float* q, int64_t last, float scale) {
  const int64_t first = cs.window > 0 ? std::max<int64_t>(0, last - cs.window + 1) : 0;
  std::vector<double> s;
  for (int64_t p = first; p <= last; ++p) {
    double dot = 0;
    for (int64_t d = 0; d < c.D; ++d) dot += static_cast<double>(q[d]) * c.key(p, g, d);
    dot *= scale;
    if (cs.softcap > 0) dot = cs.softcap * std::tanh(dot / cs.softcap);
    s.push_back(dot);
  }
  double mx = *std::max_element(s.begin(), s.end());
  if (cs.sinks) mx = std::max(mx, static_cast<double>(sink_of(q)));
  double sum = cs.sinks ? std::exp(sink_of(q) - mx) : 0.0;  // the sink: a key whose value is zero
  for (double& x : s) sum += (x = std::exp(x - mx));
  std::vector<double> o(static_cast<size_t>(c.DV), 0.0);
  for (int64_t p = first; p <= last; ++p)
    for (int64_t d = 0; d < c.DV; ++d) o[static_cast<size_t>(d)] += s[static_cast<size_t>(p - first)] / sum * c.value(p, g, d);
  return o;
}

std::vector<Case> cases() {
  return {
      {48, 16, 6, 300, 1},                                       // MHA decode (15m synth)
      {64, 16, 2, 517, 8},                                       // GQA group of 4, two tokens (verification)
      {128, 16, 8, 90, 16},                                      // a prompt chunk
      {32, 4, 1, 77, 12},                                        // MQA, small blocks (tests' caches)
      {80, 48, 2, 200, 5},                                       // head size not a multiple of 16, blocks of 48
      {64, 2048, 1, 1500, 3},                                    // one block per sequence (contiguous cache)
      {48, 16, 3, 260, 6, 50.f},                                 // soft-capping (Gemma 2)
      {64, 16, 2, 400, 7, 0.f, 100},                             // sliding window
      {96, 16, 2, 150, 4, 0.f, 0, SY_DTYPE_FLOAT16},             // half-precision cache
      {64, 32, 2, 180, 4, 0.f, 0, SY_DTYPE_BFLOAT16},            // bfloat16 cache
      {24, 16, 1, 1, 1},                                         // the first token: one key
      {8, 16, 4, 100, 6},                                        // head size below one vector (stories260K)
      {24, 8, 2, 70, 5, 0.f, 0, SY_DTYPE_FLOAT16},               // a partial vector from a half-precision cache
      {64, 16, 3, 333, 3, 0.f, 0, SY_DTYPE_INT8},                // int8 rows with their scale (SmolLM2's geometry)
      {80, 16, 2, 150, 4, 0.f, 0, SY_DTYPE_FLOAT8E4M3FN},        // fp8 e4m3 rows, head size not a multiple of 16
      {24, 8, 2, 70, 5, 0.f, 32, SY_DTYPE_INT8},                 // int8, a partial vector, a window
      {64, 16, 2, 300, 6, 0.f, 0, SY_DTYPE_FLOAT32, true},       // attention sinks (gpt-oss)
      {64, 16, 2, 120, 4, 0.f, 16, SY_DTYPE_FLOAT32, true},      // sinks in a sliding window (gpt-oss's local layers)
      {48, 16, 2, 140, 6, 0.f, 0, SY_DTYPE_FLOAT32, false, 32},  // values smaller than keys (DeepSeek's 192 / 128, uncompressed)
      {24, 8, 2, 90, 4, 0.f, 0, SY_DTYPE_FLOAT16, false, 40},    // values larger than keys, half precision
      // Latent attention (MLA): keys joined from the latent row and the rotary row.
      {24, 16, 1, 130, 16, 0.f, 0, SY_DTYPE_FLOAT32, false, 0, 16},   // the DeepSeek-V3 export's 16 + 8, 4 heads x 4 tokens
      {80, 16, 1, 200, 8, 0.f, 0, SY_DTYPE_FLOAT16, false, 0, 64},    // 64 + 16, half precision
      {40, 8, 1, 75, 5, 0.f, 0, SY_DTYPE_INT8, false, 40, 24},        // int8 rows; values that read the rotary part too
      {72, 16, 1, 300, 4, 0.f, 32, SY_DTYPE_BFLOAT16, false, 0, 64},  // bfloat16, a sliding window
  };
}

TEST(Attend, MatchesADoublePrecisionReference) {
  std::printf("[attention path: %s]\n", attend_path());
  for (auto [name, fn] : builds()) {
    std::printf("[build %s]\n", name);
    for (const Case& cs : cases()) {
      std::mt19937 rng(static_cast<uint32_t>(cs.D * 131 + cs.ctx));
      Cache c = make_cache(cs, rng);
      std::normal_distribution<float> n(0.f, 1.f);
      std::vector<float> q(static_cast<size_t>(cs.rows * cs.D));
      for (auto& x : q) x = n(rng);
      // Rows end at the last positions of the context, like a prompt chunk
      // (a few rows share a position, like a GQA group).
      std::vector<int64_t> last(static_cast<size_t>(cs.rows));
      for (int32_t r = 0; r < cs.rows; ++r) last[static_cast<size_t>(r)] = std::max<int64_t>(0, cs.ctx - 1 - (cs.rows - 1 - r) / 2);
      const float scale = 1.f / std::sqrt(static_cast<float>(cs.D));
      for (int64_t g = 0; g < cs.KVH; ++g) {
        auto out = run(fn, c, g, cs, q, last, scale);
        double worst = 0;
        for (int32_t r = 0; r < cs.rows; ++r) {
          auto ref = reference(c, g, cs, q.data() + r * cs.D, last[static_cast<size_t>(r)], scale);
          for (int64_t d = 0; d < cs.DV(); ++d)
            worst = std::max(worst, std::abs(out[static_cast<size_t>(r * cs.DV() + d)] - ref[static_cast<size_t>(d)]));
        }
        EXPECT_LT(worst, 2e-5) << name << " D " << cs.D << " DV " << cs.DV() << " latent " << cs.latent_dim << " BS " << cs.BS << " ctx " << cs.ctx << " rows " << cs.rows << " kv head " << g;
      }
    }
  }
}

TEST(Attend, ARowIsTheSameBitsAloneOrInAnyTile) {
  for (auto [name, fn] : builds())
    for (const Case& cs : cases()) {
      std::mt19937 rng(static_cast<uint32_t>(cs.D * 7 + cs.ctx));
      Cache c = make_cache(cs, rng);
      std::normal_distribution<float> n(0.f, 1.f);
      std::uniform_int_distribution<int64_t> pos(0, cs.ctx - 1);
      std::vector<float> q(static_cast<size_t>(cs.rows * cs.D));
      for (auto& x : q) x = n(rng);
      std::vector<int64_t> last(static_cast<size_t>(cs.rows));
      for (auto& p : last) p = pos(rng);  // rows at unrelated positions: the tile's key range is theirs together
      const float scale = 0.125f;
      auto tile = run(fn, c, 0, cs, q, last, scale);
      for (int32_t r = 0; r < cs.rows; ++r) {
        std::vector<float> one(q.begin() + r * cs.D, q.begin() + (r + 1) * cs.D);
        auto alone = run(fn, c, 0, cs, one, {last[static_cast<size_t>(r)]}, scale);
        EXPECT_EQ(0, std::memcmp(alone.data(), tile.data() + r * cs.DV(), static_cast<size_t>(cs.DV()) * sizeof(float)))
            << name << " D " << cs.D << " BS " << cs.BS << " row " << r << " at position " << last[static_cast<size_t>(r)];
      }
    }
}

// Split-K: a context past one segment (kSegmentKeys) is attended segment by
// segment, each writing its rows' softmax state, then merged. The merged
// result matches the double-precision reference, and a context inside one
// segment, attended through a state and a merge, is the direct tile's bits.
TEST(Attend, SegmentsOfALongContextMergeToTheReference) {
  struct Long {
    Case cs;
    int64_t ctx;
  };
  const std::vector<Long> longs = {
      {{64, 16, 2, 0, 3}, 2 * kSegmentKeys + 300},                                      // three segments, a GQA group
      {{64, 16, 1, 0, 4, 0.f, 0, SY_DTYPE_FLOAT16, true}, kSegmentKeys + 40},            // sinks, fp16 read in place
      {{48, 16, 2, 0, 5, 0.f, 700, SY_DTYPE_INT8}, 3 * kSegmentKeys - 5},               // a window across a boundary
      {{24, 16, 1, 0, 4, 0.f, 0, SY_DTYPE_FLOAT32, false, 0, 16}, kSegmentKeys + 1},     // latent rows
  };
  for (auto [name, fn] : builds())
    for (Long lc : longs) {
      Case cs = lc.cs;
      cs.ctx = lc.ctx;
      std::mt19937 rng(static_cast<uint32_t>(cs.ctx));
      Cache c = make_cache(cs, rng);
      std::normal_distribution<float> n(0.f, 1.f);
      std::vector<float> q(static_cast<size_t>(cs.rows * cs.D));
      for (auto& x : q) x = n(rng);
      std::vector<int64_t> last(static_cast<size_t>(cs.rows));
      for (int32_t r = 0; r < cs.rows; ++r) last[static_cast<size_t>(r)] = cs.ctx - 1 - (cs.rows - 1 - r);
      const float scale = 1.f / std::sqrt(static_cast<float>(cs.D));
      const int64_t DV = cs.DV(), SF = attend_state_floats(DV);
      std::vector<std::vector<float>> states;
      for (int64_t sg = 0; sg * kSegmentKeys < cs.ctx; ++sg) {
        std::vector<float> st(static_cast<size_t>(cs.rows * SF)), out(static_cast<size_t>(cs.rows * DV)),
            scratch(static_cast<size_t>(attend_scratch_floats(cs.rows, cs.D, DV)));
        std::vector<float> sinks;
        for (int32_t r = 0; r < cs.rows && cs.sinks; ++r) sinks.push_back(sink_of(q.data() + r * cs.D));
        AttendTile t{c.D,      c.DV,      c.BS, c.KVH,    0,           c.table.data(), c.kp(), c.vp(), c.latent ? c.KD : 0, c.dtype, scale,
                     cs.softcap, cs.window, cs.rows, q.data(), last.data(), out.data(),     cs.sinks ? sinks.data() : nullptr};
        t.key_begin = sg * kSegmentKeys;
        t.key_end = (sg + 1) * kSegmentKeys;
        t.state = st.data();
        fn(t, scratch.data());
        states.push_back(std::move(st));
      }
      ASSERT_GT(states.size(), 1u);
      std::vector<const float*> parts;
      for (const auto& st : states) parts.push_back(st.data());
      std::vector<float> sinks, merged(static_cast<size_t>(cs.rows * DV));
      for (int32_t r = 0; r < cs.rows && cs.sinks; ++r) sinks.push_back(sink_of(q.data() + r * cs.D));
      attend_merge(parts.data(), static_cast<int64_t>(parts.size()), cs.rows, DV, cs.sinks ? sinks.data() : nullptr, merged.data());
      double worst = 0;
      for (int32_t r = 0; r < cs.rows; ++r) {
        auto ref = reference(c, 0, cs, q.data() + r * cs.D, last[static_cast<size_t>(r)], scale);
        for (int64_t d = 0; d < DV; ++d) worst = std::max(worst, std::abs(merged[static_cast<size_t>(r * DV + d)] - ref[static_cast<size_t>(d)]));
      }
      EXPECT_LT(worst, 2e-5) << name << " ctx " << cs.ctx << " D " << cs.D << " window " << cs.window;
    }
  // One segment through a state and a merge: the direct tile's bits.
  for (auto [name, fn] : builds()) {
    Case cs{64, 16, 2, 900, 6, 0.f, 0, SY_DTYPE_FLOAT16, true};
    std::mt19937 rng(5);
    Cache c = make_cache(cs, rng);
    std::normal_distribution<float> n(0.f, 1.f);
    std::vector<float> q(static_cast<size_t>(cs.rows * cs.D));
    for (auto& x : q) x = n(rng);
    std::vector<int64_t> last(static_cast<size_t>(cs.rows));
    for (int32_t r = 0; r < cs.rows; ++r) last[static_cast<size_t>(r)] = cs.ctx - 1 - r;
    auto direct = run(fn, c, 1, cs, q, last, 0.125f);
    std::vector<float> st(static_cast<size_t>(cs.rows * attend_state_floats(cs.D))), out(direct.size()),
        scratch(static_cast<size_t>(attend_scratch_floats(cs.rows, cs.D, cs.D))), sinks;
    for (int32_t r = 0; r < cs.rows; ++r) sinks.push_back(sink_of(q.data() + r * cs.D));
    AttendTile t{c.D,      c.DV,      c.BS,    c.KVH,    1,           c.table.data(), c.kp(), c.vp(), 0, c.dtype, 0.125f,
                 cs.softcap, cs.window, cs.rows, q.data(), last.data(), out.data(),     sinks.data()};
    t.state = st.data();
    fn(t, scratch.data());
    const float* part = st.data();
    attend_merge(&part, 1, cs.rows, cs.D, sinks.data(), out.data());
    EXPECT_EQ(0, std::memcmp(out.data(), direct.data(), out.size() * sizeof(float))) << name;
  }
}

// Token trees (ABI 1.9): a tree node's keys past the tree's root sit at
// scattered slots (where the tree put its nodes). Read through the tile's
// remap, the node computes the same bits as with those keys in place, so a
// verified tree keeps a plain decode's results exactly.
TEST(Attend, ATreeNodeAttendsItsPathAsIfItStoodInPlace) {
  for (auto [name, fn] : builds())
    for (int32_t dtype : {SY_DTYPE_FLOAT32, SY_DTYPE_FLOAT16}) {
      Case cs{64, 16, 2, 0, 2, 0.f, 0, dtype};
      const int64_t P = 40, nodes = 9;  // the root at position 40, nine tree nodes after it
      cs.ctx = P + 1 + nodes;
      std::mt19937 rng(11);
      Cache c = make_cache(cs, rng);
      // The node's path: the root, then nodes 1, 4 and 7 (depth 3).
      const std::vector<int64_t> path = {P, P + 1 + 1, P + 1 + 4, P + 1 + 7};
      // The same keys in place: position P + k holds the path's k-th row.
      Cache in_place = c;
      auto copy_row = [&](auto& rows, int64_t width, int64_t to, int64_t from, int64_t g) {
        std::copy_n(rows.begin() + static_cast<ptrdiff_t>(c.at(from, g) * static_cast<size_t>(width)), width,
                    rows.begin() + static_cast<ptrdiff_t>(c.at(to, g) * static_cast<size_t>(width)));
      };
      for (size_t k = 1; k < path.size(); ++k)
        for (int64_t g = 0; g < cs.KVH; ++g) {
          copy_row(in_place.k, c.KD, P + static_cast<int64_t>(k), path[k], g);
          copy_row(in_place.v, c.VD, P + static_cast<int64_t>(k), path[k], g);
          if (dtype == SY_DTYPE_FLOAT16) {
            copy_row(in_place.kh, c.KD, P + static_cast<int64_t>(k), path[k], g);
            copy_row(in_place.vh, c.VD, P + static_cast<int64_t>(k), path[k], g);
          }
        }
      std::normal_distribution<float> n(0.f, 1.f);
      std::vector<float> q(static_cast<size_t>(cs.rows * cs.D));
      for (auto& x : q) x = n(rng);
      const std::vector<int64_t> last(static_cast<size_t>(cs.rows), P + 3);  // the node's depth past the root
      const auto expect = run(fn, in_place, 1, cs, q, last, 0.125f);
      std::vector<float> out(expect.size()), scratch(static_cast<size_t>(attend_scratch_floats(cs.rows, cs.D, cs.D)));
      AttendTile t{c.D,      c.DV,      c.BS,    c.KVH,    1,           c.table.data(), c.kp(), c.vp(), 0, c.dtype, 0.125f,
                   0.f,      0,         cs.rows, q.data(), last.data(), out.data(),     nullptr};
      t.remap_begin = P;
      t.remap = path.data();
      fn(t, scratch.data());
      EXPECT_EQ(0, std::memcmp(out.data(), expect.data(), out.size() * sizeof(float))) << name << " dtype " << dtype;
    }
}

// The quantized KV row format (SY_KV_ROW_* in plugin.h): every finite e4m3
// code survives a round trip, a value between two codes goes to the nearer
// (ties to the even code), and a row's error stays within half a step of
// its scale.
TEST(KvRows, E4m3CodesRoundTripAndRoundToNearest) {
  const float* table = sy::plugin::e4m3_table();
  EXPECT_EQ(table[0x7e], 448.f);
  EXPECT_EQ(table[0x01], 1.f / 512.f);
  EXPECT_TRUE(std::isnan(table[0x7f]));
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;  // NaN
    EXPECT_EQ(sy::plugin::f32_to_e4m3(table[c]), c) << "code " << c;
    if ((c & 0x7f) < 0x7e) {  // the midpoint to the next code up in magnitude
      const float mid = 0.5f * (table[c] + table[c + 1]);
      const int even = (c & 1) ? c + 1 : c;
      EXPECT_EQ(sy::plugin::f32_to_e4m3(mid), even) << "between codes " << c << " and " << c + 1;
    }
  }
  EXPECT_EQ(sy::plugin::f32_to_e4m3(1000.f), 0x7e);  // saturates
  EXPECT_EQ(sy::plugin::f32_to_e4m3(-1000.f), 0xfe);
}

TEST(KvRows, QuantizedRowsStayWithinHalfAStep) {
  std::mt19937 rng(7);
  std::normal_distribution<float> n(0.f, 3.f);
  for (int32_t dtype : {SY_DTYPE_INT8, SY_DTYPE_FLOAT8E4M3FN}) {
    std::vector<float> x(64);
    for (auto& v : x) v = n(rng);
    x[5] = 0.f;
    std::vector<uint8_t> row(static_cast<size_t>(kv_row_bytes(dtype, 64)));
    ASSERT_EQ(row.size(), 66u);
    sy::plugin::quantize_kv_row(x.data(), 64, dtype, row.data());
    const float scale = sy::plugin::kv_row_scale(row.data(), 64);
    float amax = 0;
    for (float v : x) amax = std::max(amax, std::abs(v));
    EXPECT_NEAR(scale, amax / (dtype == SY_DTYPE_INT8 ? 127.f : 448.f), amax * 1e-3f);
    for (size_t d = 0; d < 64; ++d) {
      const float back = (dtype == SY_DTYPE_INT8 ? static_cast<float>(static_cast<int8_t>(row[d])) : sy::plugin::e4m3_table()[row[d]]) * scale;
      // int8: half a step of the scale; e4m3: half a step of its 3-bit mantissa (1/16 relative) or of its subnormals.
      const float bound = dtype == SY_DTYPE_INT8 ? 0.5f * scale * 1.01f : std::max(std::abs(x[d]) / 16.f, scale / 1024.f) * 1.01f;
      EXPECT_LE(std::abs(back - x[d]), bound) << "dtype " << dtype << " element " << d << " value " << x[d];
    }
    EXPECT_EQ(row[5] & 0x7f, 0);  // zero stays zero
  }
  // An all-zero row has scale zero and zero codes (nothing divides by zero).
  std::vector<float> zeros(16, 0.f);
  std::vector<uint8_t> row(18, 0xff);
  sy::plugin::quantize_kv_row(zeros.data(), 16, SY_DTYPE_INT8, row.data());
  EXPECT_EQ(sy::plugin::kv_row_scale(row.data(), 16), 0.f);
  for (int d = 0; d < 16; ++d) EXPECT_EQ(row[static_cast<size_t>(d)], 0);
}

// The cache's float16 rows: the F16C writer (where this CPU has it) gives
// the SDK's round-to-nearest-even bits for every class of float (ties,
// subnormal halves, values that round past the largest half, infinities),
// at lengths with and without a vector tail.
TEST(KvRows, HalfRowsRoundAsTheSdkDoes) {
  std::vector<float> x;
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 20000; ++i) {
    uint32_t b = bits(rng);
    if ((b & 0x7f800000u) == 0x7f800000u) b &= ~0x00400000u, b &= 0xff800000u;  // infinities, not NaN payloads
    float f;
    std::memcpy(&f, &b, sizeof f);
    x.push_back(f);
  }
  for (float f : {0.f, -0.f, 1.f, 65504.f, 65519.f, 65520.f, 1e-8f, 6.1e-5f, 5.96e-8f, 2.98e-8f, 1.f + 1.f / 2048.f, 1.f + 3.f / 2048.f})
    for (float s : {1.f, -1.f}) x.push_back(f * s);
  for (int i = 0; i < 4096; ++i) x.push_back(std::ldexp(static_cast<float>(i) + 0.5f, -24));  // subnormal halves' ties
  for (size_t n : {x.size(), size_t{5}, size_t{13}}) {
    std::vector<uint16_t> got(n);
    to_halves_fn()(x.data(), static_cast<int64_t>(n), got.data());
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], sy::plugin::f32_to_f16(x[i])) << "value " << x[i] << " at " << i;
  }
}

TEST(Attend, ForcedPathIsRefusedWhenUnknown) {
  EXPECT_EQ(attend_build("sse9"), nullptr);
  EXPECT_NE(attend_build("generic"), nullptr);
}

}  // namespace
}  // namespace sy_attention
