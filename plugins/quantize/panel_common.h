// What the two panel kernels (qmatmul_vnni.cpp, qmatmul_amx.cpp) share
// beyond avx512_common.h: where a 32-block finds its group scales. Built
// with their flags (AVX-512 F/BW, F16C).
#pragma once
#include "avx512_common.h"
#include "int8_dispatch.h"

namespace sy_quant {
namespace {

// log2(group / 32) for Groups::Pow2: block b reads group b >> shift.
inline int group_shift(const PackedMatrix& w) {
  int shift = 0;
  while ((int64_t{32} << shift) < w.group) ++shift;
  return shift;
}

// Block b's 16 group scales of a panel (1 where the scale is per row,
// applied at the end instead).
template <Groups G, typename S>
inline __m512 block_scales(const S* scales, int64_t b, int shift) {
  if constexpr (G == Groups::Of32) return panel_scales(scales + b * 16);
  else if constexpr (G == Groups::Pow2) return panel_scales(scales + (b >> shift) * 16);
  else return _mm512_set1_ps(1.f);
}

}  // namespace
}  // namespace sy_quant
