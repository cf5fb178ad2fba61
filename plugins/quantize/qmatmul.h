// Quantized matmul kernels: Y[M, N] = X[M, K] * dequant(W) (+ bias).
//
// At load the stored weight (quant_format.h) is repacked once into the layout
// the chosen path streams: panels of 16 rows for avx512vnni (PackedMatrix::
// panels), otherwise one row per output channel, K padded to a multiple of
// 128; int8 codes as bytes; int4 codes two per byte in 128-element chunks
// (byte j holds element j in its low nibble and element 64 + j in its high
// one, so one 64-byte load unpacks to 128 ordered codes with an AND, a shift
// and an AND). Scales stay per group; the zero point enters as
// -scale * zero_point: y = sum_g scale_g * dot(code, x)_g + negzp_g * sum(x)_g,
// stored per group only for asymmetric weights (symmetric ones read no more
// than their codes and scales).
//
// Paths, chosen at run time by what the CPU has (SWITCHYARD_QUANT_ISA forces
// one; tests run every path the machine has):
//   scalar      portable C++, the reference of the others
//   avx2        8-wide FMA over dequantized codes, fp32 activations (any
//               group that is a multiple of 8)
//   avx2int8    activations quantized per 32-element block to int8, as for
//               avx512vnni, multiplied with vpmaddubsw/vpmaddwd: the AVX2
//               machines' integer path (llama.cpp's Q8 dot on AVX2)
//   avx512      16-wide FMA over dequantized codes, fp32 activations
//   avx512vnni  activations quantized per 32-element block to int8 and
//               multiplied with vpdpbusd (u8 x s8 -> s32): the decode path of
//               llama.cpp's Q8 dot products; error bounded by the activation
//               rounding (one part in 254 of each block's largest value)
//   amx         avx512vnni with its products of 16 or more tokens (prompts,
//               large batches) on AMX tiles (tdpbsud, 16 tokens x 16 rows x
//               32 codes a tile product), the same integer block sums and
//               float steps, so the same bits; where the OS grants the
//               tile state (arch_prctl)
// Groups must not split an activation block (32) for the int8-activation
// paths; other geometries fall back to the fp32-activation path below.
// avx512vnni runs every token count through one panel tile (16 rows x 1-8
// tokens), threaded over panels (amx: 16-token AMX tiles from 16 tokens). The other paths: one token (decode) is a
// GEMV per output row, threaded over output rows; 16 or more tokens
// (prefill) dequantize 64-row tiles to fp32 and multiply with OpenBLAS
// sgemm, so the dequantization is paid once per tile, not per token.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "quant_format.h"
#include "switchyard/plugin.hpp"

namespace sy_quant {

// In order of preference (bench_qmatmul: the int8-activation paths read the
// weights fastest); a geometry a path cannot run, or a path the CPU lacks,
// goes to the one before it.
// Avx512Amx is avx512vnni whose products of 16 tokens or more run on AMX
// tiles (the same bits): it falls back to avx512vnni, the path before it.
enum class Isa { Scalar, Avx2, Avx512, Avx2Int8, Avx512Vnni, Avx512Amx };
inline constexpr Isa kAllIsas[] = {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx2Int8, Isa::Avx512Vnni, Isa::Avx512Amx};
// The paths that stream a matrix in panels (PackedMatrix::panels).
inline bool uses_panels(Isa isa) { return isa == Isa::Avx512Vnni || isa == Isa::Avx512Amx; }
// The paths that quantize the activation row to int8 (QuantizedActivation).
inline bool int8_activations(Isa isa) { return isa == Isa::Avx2Int8 || uses_panels(isa); }
// Whether a product of M rows on this path (after its geometry fallback)
// runs on int8 activations: every M on VNNI (its GEMM too), the GEMV's few
// rows on AVX2; fp32 activations otherwise.
struct PackedMatrix;
bool rounds_activations(const PackedMatrix& w, Isa isa, int64_t M);
// Whether each token's outputs of an M-token call are the bits a one-token
// call gives: always on VNNI (GEMV and tiles do the same operations in the
// same order), below the fp32 GEMM threshold (16 tokens) elsewhere.
bool matches_single_token(const PackedMatrix& w, Isa isa, int64_t M);

const char* isa_name(Isa isa);
std::optional<Isa> parse_isa(const std::string& name);
bool isa_available(Isa isa);
// The best path the CPU has, or SWITCHYARD_QUANT_ISA when set (an error if
// the CPU lacks it).
Isa select_isa();

// The kernel's own copy of a weight, repacked for streaming.
struct PackedMatrix {
  int bits = 8;
  int64_t K = 0, N = 0, Kp = 0;  // Kp: K rounded up to 128
  int64_t group = 0, n_groups = 0;
  // Scales per row, padded with zeros to cover Kp: the SIMD loops read the
  // scale of every chunk, padding included.
  int64_t group_stride = 0;
  // The codes are the bytes decode streams: in host memory (huge pages).
  sy::plugin::HostVector<uint8_t> codes;  // N rows of row_bytes()
  std::vector<float> scales;   // [N, group_stride]
  // The same scales at half precision, [N, group_stride], when there are
  // groups and every scale is an fp16 value (the quantize pass makes them
  // so): what the int8-activation kernels read, 2 bytes per group. Rows
  // only: panels keep theirs behind the codes (panel_scales_at).
  std::vector<uint16_t> half_scales;
  bool half = false;  // the group scales the int8-activation kernels read are fp16
  std::vector<float> negzp;    // [N, group_stride] (panels: [Np / 16, group_stride, 16]): -scale * zero_point; empty when symmetric
  float symmetric_zero_point = 0;
  // Panels (the VNNI layout, pack(q, Isa::Avx512Vnni or Avx512Amx)): rows in groups of
  // 16, N padded to Np. A panel stores, per 32-element block, the block's
  // codes of its 16 rows interleaved so that every 32-bit lane of a 64-byte
  // line is one row's consecutive codes: int8, 8 lines of 4 codes each;
  // int4, 4 lines of 8 codes each (byte i of a lane: code i in the low
  // nibble, code 4 + i in the high one). One vpdpbusd chain then sums a
  // whole block for 16 rows in the 16 lanes, and the float work (convert,
  // scale, accumulate) is done once per block for 16 rows instead of once
  // per row. The scales the kernels read (fp16 where `half`, else fp32;
  // per-row scales too) are then in panel order, [Np / 16, group_stride, 16],
  // and live in the codes' allocation, from byte panel_scales_at on: on huge
  // pages like the codes. As a vector of their own (small, 4 KB pages) their
  // TLB misses cost a one-thread int4 decode 3-9%.
  bool panels = false;
  int64_t Np = 0;
  int64_t panel_scales_at = 0;
  int64_t row_bytes() const { return bits == 8 ? Kp : Kp / 2; }
  int64_t panel_bytes() const { return 16 * row_bytes(); }
  int64_t block_bytes() const { return bits == 8 ? 512 : 256; }  // one 32-block of a panel
  // -scale * zero_point of row n, group g.
  float negzp_at(int64_t n, int64_t g) const {
    const size_t i = static_cast<size_t>(n * group_stride + g);
    if (negzp.empty()) return -symmetric_zero_point * scales[i];
    return panels ? negzp[static_cast<size_t>(((n / 16) * group_stride + g) * 16 + n % 16)] : negzp[i];
  }
  // The code of row n, element k, from the packed layout.
  int code(int64_t n, int64_t k) const {
    if (panels) {
      const uint8_t* block = codes.data() + (n / 16) * panel_bytes() + (k / 32) * block_bytes();
      const int64_t r = n % 16, j = k % 32;
      if (bits == 8) return block[(j / 4) * 64 + r * 4 + j % 4];
      const uint8_t b = block[(j / 8) * 64 + r * 4 + j % 4];
      return j % 8 < 4 ? (b & 0x0F) : (b >> 4);
    }
    const uint8_t* row = codes.data() + n * row_bytes();
    if (bits == 8) return row[k];
    const uint8_t b = row[(k / 128) * 64 + (k % 128) % 64];
    return (k % 128) < 64 ? (b & 0x0F) : (b >> 4);
  }
  int64_t weight_bytes() const;  // what one pass of the default (int8-activation) GEMV reads
  // Which paths can run this geometry (groups must not split a SIMD vector).
  bool supports(Isa isa) const;
  // Groups whole in the int8-activation paths' 32-element blocks (or one
  // group per row): what avx2int8 needs.
  bool fits_int8_activations() const;
  // What the VNNI panels take: those, and groups of 16 (two scales per
  // 32-block: the K-quants' 16-element sub-blocks).
  bool fits_panels() const { return fits_int8_activations() || (n_groups > 1 && group == 16); }
};

// Packs for the path that will run it: panels for avx512vnni (when the
// geometry suits the int8-activation kernels), rows otherwise. A matrix in
// panels runs on avx512vnni or the scalar path only (supports()).
PackedMatrix pack(const QuantizedWeight& q, Isa for_isa = Isa::Scalar);

// Rows per tile of the non-VNNI prefill path. Tiles start at multiples of
// it, and OpenBLAS's result for a column can depend on the tile's width: a
// matmul joined from siblings (quantize_pass.cpp) keeps every member but
// the last a multiple of it, so each tile is the one the member had alone.
constexpr int64_t kPrefillTileRows = 64;

using ParallelFor = std::function<void(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn)>;

// Y[M, N] = X[M, K] * W + bias (bias may be null). Falls back to the best
// path the geometry supports below `isa`.
void qmatmul(const PackedMatrix& w, const float* x, int64_t M, const float* bias, float* y, Isa isa, const ParallelFor& pf);

// Rows [n0, n1) of W as fp32 [n1 - n0, K] (the prefill path's tiles).
void dequantize_rows(const PackedMatrix& w, int64_t n0, int64_t n1, float* out);
void dequantize_rows_avx512(const PackedMatrix& w, int64_t n0, int64_t n1, float* out);
void dequantize_rows_avx2(const PackedMatrix& w, int64_t n0, int64_t n1, float* out);

// Per-row GEMV entry points (rows [n0, n1) of one activation row), per path.
void gemv_scalar(const PackedMatrix& w, const float* x, const float* xsum, float* y, int64_t n0, int64_t n1);
void gemv_avx2(const PackedMatrix& w, const float* x, const float* xsum, float* y, int64_t n0, int64_t n1);
void gemv_avx512(const PackedMatrix& w, const float* x, const float* xsum, float* y, int64_t n0, int64_t n1);

// The activation row quantized for the int8-activation paths (the same
// codes and scales from both builds).
struct QuantizedActivation {
  std::vector<int8_t> q;          // [Kp]
  std::vector<float> scale16;     // [Kp / 64, 16]: per 64-element chunk c, block 2c's scale x8 then block 2c+1's x8
  std::vector<float> group_sum;   // [n_groups]: sum over the group of scale_b * sum(q_b)
  // Symmetric weights (one zero point z for every code): -z times the sum of
  // each 4 consecutive q [Kp / 4], the start value of the integer dot
  // product of those 4 codes, so it comes out as dot(code - z, q) and the
  // zero point costs nothing per row. Empty for asymmetric weights.
  std::vector<int32_t> zero_start;
  // The same start values summed per 32-block [Kp / 32] (the panel kernels)
  // and per 16-element half block [Kp / 16] (groups of 16).
  std::vector<int32_t> block_zero, half_zero;
};
// Whether the kernels fold the zero point into the dot products (above).
inline bool folds_zero_point(const PackedMatrix& w) { return w.negzp.empty(); }
// Sizes a's arrays for w (group sums zeroed); returns the 32-blocks per group.
inline int64_t size_activation(const PackedMatrix& w, QuantizedActivation& a) {
  const int64_t blocks = w.Kp / 32;
  a.q.resize(static_cast<size_t>(w.Kp));
  a.scale16.resize(static_cast<size_t>(blocks / 2 * 16));
  a.group_sum.assign(static_cast<size_t>(w.n_groups), 0.f);
  a.zero_start.clear();
  return w.n_groups == 1 ? blocks : std::max<int64_t>(1, w.group / 32);
}
// block_zero from zero_start (symmetric weights): the panel kernels' start
// values, one per 32-block. The VNNI quantizer fills it for every row; on
// AVX2 only a prompt's rows need it (gemm_avx2_int4), so qmatmul fills it there.
inline void fill_block_zero(QuantizedActivation& a) {
  const size_t blocks = a.zero_start.size() / 8;
  a.block_zero.resize(blocks);
  a.half_zero.resize(2 * blocks);
  for (size_t h = 0; h < 2 * blocks; ++h) {
    int32_t z = 0;
    for (size_t j = 0; j < 4; ++j) z += a.zero_start[h * 4 + j];
    a.half_zero[h] = z;
  }
  for (size_t b = 0; b < blocks; ++b) a.block_zero[b] = a.half_zero[2 * b] + a.half_zero[2 * b + 1];
}
void quantize_activation(const PackedMatrix& w, const float* x, QuantizedActivation& a);
// Panels [p0, p1) (rows 16 p0 .. 16 p1) of Y [M, w.N] for M quantized
// activation rows, M >= 1: the decode GEMV and the multi-token tiles alike.
void gemm_avx512vnni(const PackedMatrix& w, const QuantizedActivation* a, int64_t M, float* y, int64_t p0, int64_t p1);
// The same product on AMX tiles for each 16 tokens (the rest through
// gemm_avx512vnni): bit for bit gemm_avx512vnni's result. Only where
// amx_granted().
void gemm_amx(const PackedMatrix& w, const QuantizedActivation* a, int64_t M, float* y, int64_t p0, int64_t p1);
// Whether the CPU has AMX-INT8 and the OS lets this process use the tile
// data (XCR0 and arch_prctl(ARCH_REQ_XCOMP_PERM)); asked once.
bool amx_granted();
void quantize_activation_avx2(const PackedMatrix& w, const float* x, QuantizedActivation& a);
// Rows [n0, n1) of Y (leading dimension ldy) for M quantized activation
// rows: the AVX2 decode GEMV, each weight row's codes unpacked once for up
// to four tokens; a token's outputs are the same bits at any M.
void gemv_avx2_int8(const PackedMatrix& w, const QuantizedActivation* a, int64_t M, float* y, int64_t ldy, int64_t n0, int64_t n1);
// Row groups [g0, g1) (rows 8 g0 .. 8 g1) of Y [M, w.N] for an int4 weight
// that fits_int8_activations, M quantized activation rows: the AVX2 prefill
// tiles (each group's codes rearranged into 8-row panels once per call).
void gemm_avx2_int4(const PackedMatrix& w, const QuantizedActivation* a, int64_t M, float* y, int64_t g0, int64_t g1);

}  // namespace sy_quant
