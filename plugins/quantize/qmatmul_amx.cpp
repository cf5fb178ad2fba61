// AMX: the VNNI panels' product for 16 tokens at a time on tile registers.
// Built with the VNNI file's flags plus -mamx-tile -mamx-int8.
//
// A panel's 32-block is already the tile layout tdpbsud multiplies: 8 lines
// of 64 bytes, each 32-bit lane one row's 4 consecutive codes (int8 as
// stored; int4 unpacked once per panel per call). One tile product sums a
// block for 16 tokens x 16 rows (activation codes signed, weight codes
// unsigned, exact int32), the tile is stored and each token's 16 sums take
// the float steps of qmatmul_vnni.cpp's panel tile in the same order: start
// value, convert, scale, FMA per block, then the per-row scale and the zero
// point term. Integer sums do not depend on how they were formed, so every
// output is the bit pattern gemm_avx512vnni gives (test_qmatmul compares
// them); a token's result still does not depend on the batch it is in.
// What AMX removes is the 8 vpdpbusd per token per block that bound the
// VNNI tile at 16 tokens and more (prompts, batches of 16+ decodes).
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cpuid.h>
#include <cstring>
#include <vector>

#include "panel_common.h"

namespace sy_quant {

bool amx_granted() {
  static const bool granted = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    const bool amx_tile = edx & (1u << 24), amx_int8 = edx & (1u << 25);
    if (!amx_tile || !amx_int8) return false;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 27))) return false;  // OSXSAVE
    // XCR0 bits 17 (tile config) and 18 (tile data): the OS saves the state.
    const unsigned long long xcr0 = _xgetbv(0);
    if ((xcr0 & (3ull << 17)) != (3ull << 17)) return false;
    // Linux hands the 8 KB tile data state out per process, on request; a
    // kernel or VM that refuses leaves AMX off (the VNNI path runs).
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return granted;
}

namespace {

// The LDTILECFG operand: palette 1, 16 tiles' rows and bytes per row.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

// Tiles: sums of blocks b and b+1 in 0 and 1, their activations in 2 and 3
// (16 tokens x 32 codes), their weights in 4 and 5 (8 lines of 16 rows x 4 codes).
// In static storage: GCC 12 does not see ldtilecfg read its operand and
// dropped the stores to a stack copy's rows (the tile loads then fault).
constexpr TileConfig tile_config() {
  TileConfig c;
  for (int t : {0, 1}) c.rows[t] = 16, c.bytes_per_row[t] = 64;
  for (int t : {2, 3}) c.rows[t] = 16, c.bytes_per_row[t] = 32;
  for (int t : {4, 5}) c.rows[t] = 8, c.bytes_per_row[t] = 64;
  return c;
}
constexpr TileConfig kTileConfig = tile_config();

void configure_tiles() { _tile_loadconfig(&kTileConfig); }

// 16 tokens' activations laid out for the tiles and the float steps: codes
// [blocks, 16 tokens, 32] (a tile load reads 512 contiguous bytes), and per
// block the 16 tokens' scales and zero-point start values side by side.
struct TokenGroup {
  const int8_t* codes;
  const float* scales;   // [blocks, 16]
  const int32_t* zeros;  // [blocks, 16]; symmetric weights only
};

// One block's stored tile sums (16 tokens x 16 rows) into the 16 tokens'
// accumulators: panel_tile's per-block float steps, in its order.
template <Groups G, bool Fold>
inline void accumulate_block(const int32_t* sums, const TokenGroup& x, int64_t b, __m512 ws, __m512 (&acc)[16]) {
  const float* scale = x.scales + b * 16;
  const int32_t* zero = Fold ? x.zeros + b * 16 : nullptr;
#pragma GCC unroll 16
  for (int t = 0; t < 16; ++t) {
    __m512i d = _mm512_load_si512(sums + 16 * t);
    if constexpr (Fold) d = _mm512_add_epi32(_mm512_set1_epi32(zero[t]), d);
    __m512 s = _mm512_set1_ps(scale[t]);
    if constexpr (G != Groups::PerRow) s = _mm512_mul_ps(s, ws);
    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), s, acc[t]);
  }
}

// Panel p for the 16 tokens a[0..16) (x: the same, laid out for the tiles);
// wb holds the panel's blocks in tile order (512 bytes each).
template <Groups G, bool Fold, typename S>
void panel_16_tokens(const PackedMatrix& w, const QuantizedActivation* a, const TokenGroup& x, const uint8_t* wb, bool prefetch, float* y,
                     int64_t p) {
  const int8_t* xq = x.codes;
  const int64_t blocks = w.Kp / 32;
  const int shift = G == Groups::Pow2 ? group_shift(w) : 0;
  const S* scales = panel_scales_of<S>(w) + p * w.group_stride * 16;
  // Sums of two block pairs: a pair's float steps run one pair behind its
  // tile products, so the vector loads read tile stores made an iteration
  // earlier. What bounds this kernel is the tile sequence itself: a block of
  // 32 codes is half a tile product's depth, and each product needs its own
  // loads and a store (2048 x 2048 int8, 128 tokens, one core: the tiles
  // alone 429 GMAC/s, with the float steps 216 -> 266 after this change, VNNI 195).
  alignas(64) int32_t sums[2][2][256];
  __m512 acc[16];
#pragma GCC unroll 16
  for (int t = 0; t < 16; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; b += 2) {  // Kp is a multiple of 128: blocks come in pairs
    int32_t (&pair)[2][256] = sums[(b / 2) % 2];
    if (prefetch)
      for (int64_t line = 0; line < 1024; line += 64) _mm_prefetch(reinterpret_cast<const char*>(wb + b * 512) + 4096 + line, _MM_HINT_T0);
    _tile_loadd(2, xq + b * 512, 32);
    _tile_loadd(4, wb + b * 512, 64);
    _tile_loadd(3, xq + (b + 1) * 512, 32);
    _tile_loadd(5, wb + (b + 1) * 512, 64);
    _tile_zero(0);
    _tile_zero(1);
    _tile_dpbsud(0, 2, 4);
    _tile_dpbsud(1, 3, 5);
    _tile_stored(0, pair[0], 64);
    _tile_stored(1, pair[1], 64);
    if (b >= 2) {
      int32_t (&before)[2][256] = sums[(b / 2 + 1) % 2];
      accumulate_block<G, Fold>(before[0], x, b - 2, block_scales<G>(scales, b - 2, shift), acc);
      accumulate_block<G, Fold>(before[1], x, b - 1, block_scales<G>(scales, b - 1, shift), acc);
    }
  }
  {
    int32_t (&last)[2][256] = sums[(blocks / 2 + 1) % 2];
    accumulate_block<G, Fold>(last[0], x, blocks - 2, block_scales<G>(scales, blocks - 2, shift), acc);
    accumulate_block<G, Fold>(last[1], x, blocks - 1, block_scales<G>(scales, blocks - 1, shift), acc);
  }
  for (int t = 0; t < 16; ++t) store_panel_outputs<G == Groups::PerRow, Fold>(w, p, acc[t], scales, a[t].group_sum.data(), y + t * w.N);
}

// An int4 panel's blocks unpacked to the int8 tile order (4 lines of 8
// codes -> 8 lines of 4), once per panel for all of a call's tokens.
void unpack_int4_panel(const PackedMatrix& w, int64_t p, uint8_t* out) {
  const __m512i low = _mm512_set1_epi8(0x0F);
  const uint8_t* codes = w.codes.data() + p * w.panel_bytes();
  for (int64_t b = 0; b < w.Kp / 32; ++b) {
    const uint8_t* blk = codes + b * 256;
    _mm_prefetch(reinterpret_cast<const char*>(blk) + 4096, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(blk) + 4096 + 128, _MM_HINT_T0);
    for (int j = 0; j < 4; ++j) {
      const __m512i v = _mm512_loadu_si512(blk + 64 * j);
      _mm512_storeu_si512(out + b * 512 + 128 * j, _mm512_and_si512(v, low));
      _mm512_storeu_si512(out + b * 512 + 128 * j + 64, _mm512_and_si512(_mm512_srli_epi16(v, 4), low));
    }
  }
}

template <Groups G, bool Fold, typename S>
void amx_panels(const PackedMatrix& w, const QuantizedActivation* a, int64_t groups, float* y, int64_t p0, int64_t p1) {
  // The tokens in TokenGroup layout, per thread, reused across calls.
  thread_local std::vector<int8_t> codes_storage;
  thread_local std::vector<float> scales_storage;
  thread_local std::vector<int32_t> zeros_storage;
  thread_local std::vector<uint8_t> int4_storage;
  std::vector<int8_t>& codes = codes_storage;
  std::vector<float>& scales = scales_storage;
  std::vector<int32_t>& zeros = zeros_storage;
  const int64_t blocks = w.Kp / 32;
  codes.resize(static_cast<size_t>(groups * blocks * 512));
  scales.resize(static_cast<size_t>(groups * blocks * 16));
  if (Fold) zeros.resize(static_cast<size_t>(groups * blocks * 16));
  for (int64_t m = 0; m < groups * 16; ++m) {
    const int64_t g = m / 16, t = m % 16;
    for (int64_t b = 0; b < blocks; ++b) {
      const size_t at = static_cast<size_t>((g * blocks + b) * 16 + t);
      std::memcpy(codes.data() + at * 32, a[m].q.data() + b * 32, 32);
      scales[at] = a[m].scale16[static_cast<size_t>((b / 2) * 16 + (b % 2) * 8)];
      if (Fold) zeros[at] = a[m].block_zero[static_cast<size_t>(b)];
    }
  }
  std::vector<uint8_t>& unpacked = int4_storage;
  if (w.bits == 4) unpacked.resize(static_cast<size_t>(w.Kp / 32 * 512));
  configure_tiles();
  for (int64_t p = p0; p < p1; ++p) {
    const uint8_t* wb = w.codes.data() + p * w.panel_bytes();
    if (w.bits == 4) {
      unpack_int4_panel(w, p, unpacked.data());
      wb = unpacked.data();
    }
    for (int64_t g = 0; g < groups; ++g)
      panel_16_tokens<G, Fold, S>(w, a + g * 16,
                                  {codes.data() + g * blocks * 512, scales.data() + g * blocks * 16, Fold ? zeros.data() + g * blocks * 16 : nullptr},
                                  wb, w.bits == 8 && g == 0, y + g * 16 * w.N, p);
  }
  _tile_release();
}

}  // namespace

void gemm_amx(const PackedMatrix& w, const QuantizedActivation* a, int64_t M, float* y, int64_t p0, int64_t p1) {
  // int4 panels are unpacked once per panel per call: with one group of 16
  // tokens that costs more than the tiles save (2048 x 2048, 1 thread: 16
  // tokens 180 GMAC/s on AMX against 202 on VNNI, 48 tokens 236 against 201).
  // Groups of 16 (two scales a block) have no tile form: VNNI, the same bits.
  const int64_t groups = (w.bits == 4 && M < 32) || (w.n_groups > 1 && w.group == 16) ? 0 : M / 16;
  const bool fold = folds_zero_point(w);
  if (groups > 0) {
    dispatch_groups(w, [&]<Groups G, typename S>() {
      if (fold) amx_panels<G, true, S>(w, a, groups, y, p0, p1);
      else amx_panels<G, false, S>(w, a, groups, y, p0, p1);
    });
  }
  if (M > groups * 16) gemm_avx512vnni(w, a + groups * 16, M - groups * 16, y + groups * 16 * w.N, p0, p1);
}

}  // namespace sy_quant
