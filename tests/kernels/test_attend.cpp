// The CPU attention tile of PagedAttention (plugins/attention/attend.h),
// every build this CPU has: against a double-precision softmax attention
// over the same paged cache (GQA groups, block sizes that do and do not
// divide the 32-key chunks, windows, soft-capping, half-precision caches,
// attention sinks),
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

// One sequence's paged cache: `ctx` positions in shuffled blocks.
struct Cache {
  int64_t D, BS, KVH, ctx;
  int32_t dtype;
  std::vector<int32_t> table;
  std::vector<float> k, v;       // the values as float (what the kernel should read)
  std::vector<uint16_t> kh, vh;  // stored as halves when dtype is not float32
  const void* kp() const { return dtype == SY_DTYPE_FLOAT32 ? static_cast<const void*>(k.data()) : kh.data(); }
  const void* vp() const { return dtype == SY_DTYPE_FLOAT32 ? static_cast<const void*>(v.data()) : vh.data(); }
  float key(int64_t pos, int64_t g, int64_t d) const { return k[at(pos, g) + d]; }
  float value(int64_t pos, int64_t g, int64_t d) const { return v[at(pos, g) + d]; }
  size_t at(int64_t pos, int64_t g) const {
    return static_cast<size_t>(((table[static_cast<size_t>(pos / BS)] * KVH + g) * BS + pos % BS) * D);
  }
};

Cache make_cache(int64_t D, int64_t BS, int64_t KVH, int64_t ctx, int32_t dtype, std::mt19937& rng) {
  Cache c{D, BS, KVH, ctx, dtype, {}, {}, {}, {}, {}};
  const int64_t blocks = (ctx + BS - 1) / BS + 3;  // spare blocks the table skips
  std::vector<int32_t> order(static_cast<size_t>(blocks));
  for (int64_t i = 0; i < blocks; ++i) order[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  std::shuffle(order.begin(), order.end(), rng);
  c.table.assign(order.begin(), order.begin() + (ctx + BS - 1) / BS);
  std::normal_distribution<float> n(0.f, 1.f);
  const size_t size = static_cast<size_t>(blocks * KVH * BS * D);
  c.k.resize(size);
  c.v.resize(size);
  for (size_t i = 0; i < size; ++i) {
    c.k[i] = n(rng);
    c.v[i] = n(rng);
  }
  if (dtype != SY_DTYPE_FLOAT32) {
    c.kh.resize(size);
    c.vh.resize(size);
    for (size_t i = 0; i < size; ++i) {
      c.kh[i] = dtype == SY_DTYPE_FLOAT16 ? sy::plugin::f32_to_f16(c.k[i]) : sy::plugin::f32_to_bf16(c.k[i]);
      c.vh[i] = dtype == SY_DTYPE_FLOAT16 ? sy::plugin::f32_to_f16(c.v[i]) : sy::plugin::f32_to_bf16(c.v[i]);
      c.k[i] = dtype == SY_DTYPE_FLOAT16 ? sy::plugin::f16_to_f32(c.kh[i]) : sy::plugin::bf16_to_f32(c.kh[i]);
      c.v[i] = dtype == SY_DTYPE_FLOAT16 ? sy::plugin::f16_to_f32(c.vh[i]) : sy::plugin::bf16_to_f32(c.vh[i]);
    }
  }
  return c;
}

struct Case {
  int64_t D, BS, KVH, ctx;
  int32_t rows;
  float softcap = 0.f;
  int64_t window = 0;
  int32_t dtype = SY_DTYPE_FLOAT32;
  bool sinks = false;  // gpt-oss's attention sinks: a row's sink is twice its query's first value
};

float sink_of(const float* q) { return 2.f * q[0]; }

std::vector<float> run(AttendFn fn, const Cache& c, int64_t g, const Case& cs, const std::vector<float>& q,
                       const std::vector<int64_t>& last, float scale) {
  const auto rows = static_cast<int32_t>(last.size());
  std::vector<float> out(static_cast<size_t>(rows * c.D), std::nanf("")), scratch(static_cast<size_t>(attend_scratch_floats(rows, c.D)));
  std::vector<float> sinks;
  for (int32_t r = 0; r < rows && cs.sinks; ++r) sinks.push_back(sink_of(q.data() + r * c.D));
  AttendTile t{c.D, c.BS, c.KVH, g, c.table.data(), c.kp(), c.vp(), c.dtype, scale, cs.softcap, cs.window, rows, q.data(), last.data(),
               out.data(), cs.sinks ? sinks.data() : nullptr};
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
  std::vector<double> o(static_cast<size_t>(c.D), 0.0);
  for (int64_t p = first; p <= last; ++p)
    for (int64_t d = 0; d < c.D; ++d) o[static_cast<size_t>(d)] += s[static_cast<size_t>(p - first)] / sum * c.value(p, g, d);
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
      {64, 16, 2, 300, 6, 0.f, 0, SY_DTYPE_FLOAT32, true},       // attention sinks (gpt-oss)
      {64, 16, 2, 120, 4, 0.f, 16, SY_DTYPE_FLOAT32, true},      // sinks in a sliding window (gpt-oss's local layers)
  };
}

TEST(Attend, MatchesADoublePrecisionReference) {
  std::printf("[attention path: %s]\n", attend_path());
  for (auto [name, fn] : builds()) {
    std::printf("[build %s]\n", name);
    for (const Case& cs : cases()) {
      std::mt19937 rng(static_cast<uint32_t>(cs.D * 131 + cs.ctx));
      Cache c = make_cache(cs.D, cs.BS, cs.KVH, cs.ctx, cs.dtype, rng);
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
          for (int64_t d = 0; d < cs.D; ++d)
            worst = std::max(worst, std::abs(out[static_cast<size_t>(r * cs.D + d)] - ref[static_cast<size_t>(d)]));
        }
        EXPECT_LT(worst, 2e-5) << name << " D " << cs.D << " BS " << cs.BS << " ctx " << cs.ctx << " rows " << cs.rows << " kv head " << g;
      }
    }
  }
}

TEST(Attend, ARowIsTheSameBitsAloneOrInAnyTile) {
  for (auto [name, fn] : builds())
    for (const Case& cs : cases()) {
      std::mt19937 rng(static_cast<uint32_t>(cs.D * 7 + cs.ctx));
      Cache c = make_cache(cs.D, cs.BS, cs.KVH, cs.ctx, cs.dtype, rng);
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
        EXPECT_EQ(0, std::memcmp(alone.data(), tile.data() + r * cs.D, static_cast<size_t>(cs.D) * sizeof(float)))
            << name << " D " << cs.D << " BS " << cs.BS << " row " << r << " at position " << last[static_cast<size_t>(r)];
      }
    }
}

TEST(Attend, ForcedPathIsRefusedWhenUnknown) {
  EXPECT_EQ(attend_build("sse9"), nullptr);
  EXPECT_NE(attend_build("generic"), nullptr);
}

}  // namespace
}  // namespace sy_attention
