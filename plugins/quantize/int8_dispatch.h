// What the int8-activation kernels (qmatmul_avx2_int8.cpp, qmatmul_vnni.cpp)
// specialise on, and the one place that picks the specialisation: how the
// weight's groups fall on the 32-element activation blocks, and whether its
// group scales are floats or halves. Each kernel file instantiates its own
// templates for its instruction set through this.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "qmatmul.h"

namespace sy_quant {
namespace {

// PerRow: one scale per output row (applied once at the end). Of32: one per
// 32-block. Pow2: a power-of-two group of 64 or more (indexed by a shift).
// Of16: two per 32-block (the 16-element sub-blocks of Q6_K, Q3_K and
// Q2_K), only in the VNNI panels (PackedMatrix::fits_panels).
enum class Groups { PerRow, Of32, Pow2, Of16 };

// Group scales are read as floats or as halves (PackedMatrix::half).
inline float scale_value(float s) { return s; }
inline float scale_value(uint16_t s) { return _cvtsh_ss(s); }

template <typename S>
const S* scales_of(const PackedMatrix& w) {
  if constexpr (std::is_same_v<S, float>) return w.scales.data();
  else return w.half_scales.data();
}

// An activation row's 4 consecutive codes as one dword, for a broadcast
// against a panel whose lanes hold 4 codes of a row each.
inline int32_t four_codes(const int8_t* q) {
  int32_t v;
  std::memcpy(&v, q, sizeof v);
  return v;
}

// Calls kernel.template operator()<G, S>() for w's geometry and scale width.
// Groups of 16 only where the kernel takes them (WithOf16).
template <bool WithOf16 = false, typename Kernel>
void dispatch_groups(const PackedMatrix& w, Kernel&& kernel) {
  if (w.n_groups > 1 && w.group == 16) {
    if constexpr (WithOf16) {
      if (!w.half) kernel.template operator()<Groups::Of16, float>();
      else kernel.template operator()<Groups::Of16, uint16_t>();
    } else {
      throw std::logic_error("qmatmul: groups of 16 reached a kernel without them (PackedMatrix::supports)");
    }
  } else if (w.n_groups == 1) kernel.template operator()<Groups::PerRow, float>();
  else if (w.group == 32 && !w.half) kernel.template operator()<Groups::Of32, float>();
  else if (w.group == 32) kernel.template operator()<Groups::Of32, uint16_t>();
  else if (!w.half) kernel.template operator()<Groups::Pow2, float>();
  else kernel.template operator()<Groups::Pow2, uint16_t>();
}

}  // namespace
}  // namespace sy_quant
