// The attention tile's generic build (any CPU: multiply, then add) and the
// run-time choice between it and the AVX2 / AVX-512 builds.
#include "attend.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <switchyard/plugin.hpp>

namespace sy_attention {

namespace attend_generic {

struct Vec {
  struct T {
    float v[4];
  };
  static constexpr int64_t W = 4;
  static T load(const float* p) { return {{p[0], p[1], p[2], p[3]}}; }
  static T load_partial(const float* p, int64_t n) {
    T a = zero();
    for (int64_t i = 0; i < n; ++i) a.v[i] = p[i];
    return a;
  }
  static void store(float* p, T a) { std::memcpy(p, a.v, sizeof a.v); }
  static T set1(float a) { return {{a, a, a, a}}; }
  static T zero() { return set1(0.f); }
  template <class F>
  static T map(T a, T b, F f) {
    return {{f(a.v[0], b.v[0]), f(a.v[1], b.v[1]), f(a.v[2], b.v[2]), f(a.v[3], b.v[3])}};
  }
  static T add(T a, T b) { return map(a, b, [](float x, float y) { return x + y; }); }
  static T sub(T a, T b) { return map(a, b, [](float x, float y) { return x - y; }); }
  static T mul(T a, T b) { return map(a, b, [](float x, float y) { return x * y; }); }
  static T max(T a, T b) { return map(a, b, [](float x, float y) { return x > y ? x : y; }); }
  static T fmadd(T a, T b, T c) { return map(mul(a, b), c, [](float x, float y) { return x + y; }); }
  static float sum(T a) { return (a.v[0] + a.v[2]) + (a.v[1] + a.v[3]); }
  static float hmax(T a) { return std::max(std::max(a.v[0], a.v[1]), std::max(a.v[2], a.v[3])); }
  // The SIMD builds' unpack-and-add tree on four lanes: (x0 + x2) + (x1 + x3).
  static T transpose_sum(const T* v) { return {{sum(v[0]), sum(v[1]), sum(v[2]), sum(v[3])}}; }
  static T pow2(T t) {
    T out;
    for (int i = 0; i < 4; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &t.v[i], sizeof bits);
      bits = (bits - (0x4B400000u - 127u)) << 23;
      std::memcpy(&out.v[i], &bits, sizeof bits);
    }
    return out;
  }
  static void halves(const uint16_t* h, int64_t n, float* out) {
    for (int64_t i = 0; i < n; ++i) out[i] = sy::plugin::f16_to_f32(h[i]);
  }
  // W float16 values as a vector (exact).
  static T load_halves(const uint16_t* h) { return {{sy::plugin::f16_to_f32(h[0]), sy::plugin::f16_to_f32(h[1]), sy::plugin::f16_to_f32(h[2]), sy::plugin::f16_to_f32(h[3])}}; }
};

#include "attend_impl.inc"

}  // namespace attend_generic

#if defined(__x86_64__) && defined(SY_ATTEND_X86)
namespace attend_avx2 {
void attend(const AttendTile&, float*);
void to_halves(const float*, int64_t, uint16_t*);
}
namespace attend_avx512 {
void attend(const AttendTile&, float*);
}
#endif

int64_t attend_scratch_floats(int32_t rows, int64_t head_dim, int64_t value_dim) {
  return attend_generic::scratch_floats(rows, head_dim, value_dim > 0 ? value_dim : head_dim);
}

void attend_merge(const float* const* parts, int64_t num_parts, int32_t rows, int64_t DV, const float* sinks, float* out) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t SF = attend_state_floats(DV);
  std::vector<float> acc(static_cast<size_t>(DV));
  for (int32_t r = 0; r < rows; ++r) {
    float top = kNegInf;
    for (int64_t p = 0; p < num_parts; ++p) top = std::max(top, parts[p][r * SF]);
    float total = 0.f;
    std::fill(acc.begin(), acc.end(), 0.f);
    for (int64_t p = 0; p < num_parts; ++p) {
      const float* s = parts[p] + r * SF;
      if (s[0] == kNegInf) continue;  // no keys of this row in the segment
      const float f = std::exp(s[0] - top);
      total += s[1] * f;
      for (int64_t d = 0; d < DV; ++d) acc[static_cast<size_t>(d)] += s[2 + d] * f;
    }
    // As attend() normalises: the sink as a key of value zero.
    float keep = 1.f;
    if (sinks) {
      const float sink = sinks[r], m = std::max(top, sink);
      keep = top == kNegInf ? 0.f : std::exp(top - m);
      total = total * keep + std::exp(sink - m);
    }
    const float inv = keep / total;
    for (int64_t d = 0; d < DV; ++d) out[r * DV + d] = acc[static_cast<size_t>(d)] * inv;
  }
}

AttendFn attend_build(const char* name) {
  if (std::strcmp(name, "generic") == 0) return attend_generic::attend;
#if defined(__x86_64__) && defined(SY_ATTEND_X86)
  __builtin_cpu_init();
  if (std::strcmp(name, "avx512") == 0 && __builtin_cpu_supports("avx512f")) return attend_avx512::attend;
  if (std::strcmp(name, "avx2") == 0 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c"))
    return attend_avx2::attend;
#endif
  return nullptr;
}

namespace {

struct Path {
  AttendFn fn;
  const char* name;
};

Path choose() {
  const char* forced = std::getenv("SWITCHYARD_ATTENTION_ISA");
  if (forced && *forced) {
    for (const char* name : {"avx512", "avx2", "generic"})
      if (std::strcmp(forced, name) == 0) {
        if (AttendFn fn = attend_build(name)) return {fn, name};
        break;
      }
    throw std::invalid_argument(std::string("SWITCHYARD_ATTENTION_ISA=") + forced +
                                ": not a path this CPU has (known paths: avx512, avx2, generic)");
  }
  for (const char* name : {"avx512", "avx2"})
    if (AttendFn fn = attend_build(name)) return {fn, name};
  return {attend_generic::attend, "generic"};
}

const Path& path() {
  static const Path p = choose();
  return p;
}

}  // namespace

AttendFn attend_fn() { return path().fn; }

namespace {
void to_halves_generic(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = sy::plugin::f32_to_f16(x[i]);
}
}  // namespace

ToHalvesFn to_halves_fn() {
  // F16C rounds as f32_to_f16 does, so the choice changes no cached bit.
  static const ToHalvesFn fn = [] {
#if defined(__x86_64__) && defined(SY_ATTEND_X86)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")) return attend_avx2::to_halves;
#endif
    return to_halves_generic;
  }();
  return fn;
}
const char* attend_path() { return path().name; }

}  // namespace sy_attention
