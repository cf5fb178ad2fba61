#include "qmatmul.h"

#include <switchyard/plugin.hpp>

#include <cblas.h>

#include <algorithm>
#include <array>
#include <bit>
#include <iterator>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace sy_quant {

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx2Int8: return "avx2int8";
    case Isa::Avx512: return "avx512";
    case Isa::Avx512Vnni: return "avx512vnni";
    case Isa::Avx512Amx: return "amx";
  }
  return "?";
}

std::optional<Isa> parse_isa(const std::string& name) {
  for (Isa i : kAllIsas)
    if (name == isa_name(i)) return i;
  return std::nullopt;
}

namespace {

bool cpu_has(Isa isa) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  switch (isa) {
    case Isa::Scalar: return true;
    case Isa::Avx2:
    case Isa::Avx2Int8: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case Isa::Avx512: return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
    case Isa::Avx512Vnni:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vnni");
    case Isa::Avx512Amx: return cpu_has(Isa::Avx512Vnni) && amx_granted();
  }
  return false;
#else
  return isa == Isa::Scalar;
#endif
}

}  // namespace

bool isa_available(Isa isa) {
  // Asked on every product (the fallback walk): the CPU is probed once.
  static const auto available = [] {
    std::array<bool, std::size(kAllIsas)> a{};
    for (Isa i : kAllIsas) a[static_cast<size_t>(i)] = cpu_has(i);
    return a;
  }();
  return available[static_cast<size_t>(isa)];
}

Isa select_isa() {
  if (const char* forced = std::getenv("SWITCHYARD_QUANT_ISA"); forced && *forced) {
    auto isa = parse_isa(forced);
    if (!isa) throw std::invalid_argument(std::string("SWITCHYARD_QUANT_ISA='") + forced + "': known paths are scalar, avx2, avx2int8, avx512, avx512vnni, amx");
    if (!isa_available(*isa)) throw std::invalid_argument(std::string("SWITCHYARD_QUANT_ISA=") + forced + ": this CPU does not have it");
    return *isa;
  }
  for (Isa i : {Isa::Avx512Amx, Isa::Avx512Vnni, Isa::Avx2Int8, Isa::Avx512, Isa::Avx2})
    if (isa_available(i)) return i;
  return Isa::Scalar;
}

int64_t PackedMatrix::weight_bytes() const {
  const size_t scale_bytes = panels ? 0  // behind the codes
                             : half ? half_scales.size() * sizeof(uint16_t)
                                    : scales.size() * sizeof(float);
  return static_cast<int64_t>(codes.size() + scale_bytes + negzp.size() * sizeof(float));
}

bool PackedMatrix::fits_int8_activations() const {
  const bool pow2 = group > 0 && (group & (group - 1)) == 0;
  return n_groups == 1 || group == 32 || (pow2 && group >= 64);
}

bool PackedMatrix::supports(Isa isa) const {
  auto fits = [&](int64_t width) { return n_groups == 1 || group % width == 0; };
  if (isa != Isa::Scalar && panels != uses_panels(isa)) return false;  // the layout is the path's
  switch (isa) {
    case Isa::Scalar: return true;
    case Isa::Avx2: return fits(8);
    case Isa::Avx512: return fits(16);
    // Activation blocks (32) must not straddle weight groups; larger groups
    // are indexed by a shift.
    case Isa::Avx2Int8: return fits_int8_activations();
    case Isa::Avx512Vnni:
    case Isa::Avx512Amx: return fits_panels();
  }
  return false;
}

namespace {

// The repacking below moves codes eight (or four) at a time as words: every
// code is under 16 where nibbles are joined, so a word shifted by 4 moves
// each byte's nibble into its high half without touching its neighbour.
// (A byte at a time, with a read-modify-write per nibble, packing was 30%
// of loading SmolLM2's Q4_1 GGUF in Release, and more under ASan's checks.)
template <typename Word>
Word load_word(const uint8_t* p) {
  Word w;
  std::memcpy(&w, p, sizeof w);
  return w;
}
template <typename Word>
void store_word(uint8_t* p, Word w) {
  std::memcpy(p, &w, sizeof w);
}
constexpr uint64_t kLowNibbles = 0x0F0F0F0F0F0F0F0FULL;
// Four bytes' nibbles as eight bytes, low nibble first: each byte of a
// 32-bit word spread to a 16-bit slot, the high nibbles into the odd bytes.
uint64_t spread_bytes(uint64_t x) {
  x = (x | (x << 16)) & 0x0000FFFF0000FFFFULL;
  return (x | (x << 8)) & 0x00FF00FF00FF00FFULL;
}
uint64_t nibbles_to_bytes(uint32_t w) { return spread_bytes(w & 0x0F0F0F0FU) | (spread_bytes((w >> 4) & 0x0F0F0F0FU) << 8); }
static_assert(std::endian::native == std::endian::little, "nibbles_to_bytes: the codes are in memory order on little-endian words");

// Row n's codes, a byte each, padded with zeros to Kp, from the row layout.
void row_codes(const PackedMatrix& p, int64_t n, uint8_t* c) {
  const uint8_t* row = p.codes.data() + n * p.row_bytes();
  if (p.bits == 8) {
    std::memcpy(c, row, static_cast<size_t>(p.Kp));
    return;
  }
  for (int64_t k0 = 0; k0 < p.Kp; k0 += 128)
    for (int64_t j = 0; j < 64; j += 8) {
      const auto b = load_word<uint64_t>(row + k0 / 2 + j);
      store_word(c + k0 + j, b & kLowNibbles);
      store_word(c + k0 + 64 + j, (b >> 4) & kLowNibbles);
    }
}

// Rows -> panels (qmatmul.h): codes and, behind them, the group scales the
// VNNI kernels read.
void to_panels(PackedMatrix& p) {
  p.Np = (p.N + 15) / 16 * 16;
  const size_t code_bytes = static_cast<size_t>(p.Np / 16 * p.panel_bytes());
  const size_t scale_bytes = static_cast<size_t>(p.Np * p.group_stride) * (p.half ? sizeof(uint16_t) : sizeof(float));
  p.panel_scales_at = static_cast<int64_t>((code_bytes + 63) / 64 * 64);
  sy::plugin::HostVector<uint8_t> panel(static_cast<size_t>(p.panel_scales_at) + scale_bytes, 0);
  // A row at a time: its codes a byte each, then each 32-block's 4-byte
  // lanes written whole (no read-modify-write of nibbles).
  std::vector<uint8_t> c(static_cast<size_t>(p.Kp));
  for (int64_t n = 0; n < p.N; ++n) {
    row_codes(p, n, c.data());
    const int64_t r = n % 16;
    uint8_t* rows = panel.data() + (n / 16) * p.panel_bytes() + r * 4;
    for (int64_t k0 = 0; k0 < p.Kp; k0 += 32) {
      uint8_t* block = rows + (k0 / 32) * p.block_bytes();
      const uint8_t* src = c.data() + k0;
      if (p.bits == 8) {
        for (int64_t t = 0; t < 8; ++t) store_word(block + t * 64, load_word<uint32_t>(src + t * 4));
      } else {
        for (int64_t t = 0; t < 4; ++t)
          store_word(block + t * 64, load_word<uint32_t>(src + t * 8) | (load_word<uint32_t>(src + t * 8 + 4) << 4));
      }
    }
  }
  // Padding rows: their codes are zeros and their scales zeros (unread outputs).
  auto reorder = [&](auto& in, auto* out) {
    for (int64_t n = 0; n < p.N; ++n)
      for (int64_t g = 0; g < p.group_stride; ++g)
        out[static_cast<size_t>(((n / 16) * p.group_stride + g) * 16 + n % 16)] = in[static_cast<size_t>(n * p.group_stride + g)];
  };
  uint8_t* scales_at = panel.data() + p.panel_scales_at;
  if (p.half) {
    reorder(p.half_scales, reinterpret_cast<uint16_t*>(scales_at));
    std::vector<uint16_t>().swap(p.half_scales);  // the rows' copy is not read again
  } else {
    reorder(p.scales, reinterpret_cast<float*>(scales_at));
  }
  if (!p.negzp.empty()) {  // the zero-point terms are summed a panel at a time
    std::vector<float> rows = std::move(p.negzp);
    p.negzp.assign(static_cast<size_t>(p.Np * p.group_stride), 0.f);
    reorder(rows, p.negzp.data());
  }
  p.codes = std::move(panel);
  p.panels = true;
}

}  // namespace

PackedMatrix pack(const QuantizedWeight& q, Isa for_isa) {
  PackedMatrix p;
  p.bits = q.bits;
  p.K = q.K;
  p.N = q.N;
  p.Kp = (q.K + 127) / 128 * 128;
  p.group = q.block_size;
  p.n_groups = q.n_blocks;
  p.codes.assign(static_cast<size_t>(p.N * p.row_bytes()), 0);
  p.group_stride = p.n_groups == 1 ? 1 : std::max(p.n_groups, (p.Kp + p.group - 1) / p.group);
  p.scales.assign(static_cast<size_t>(p.N * p.group_stride), 0.f);
  const bool symmetric = q.symmetric();
  p.symmetric_zero_point = static_cast<float>(1 << (q.bits - 1));
  if (!symmetric) p.negzp.assign(static_cast<size_t>(p.N * p.group_stride), 0.f);
  // A row's blocks lie one after another: its codes are one stream (a
  // byte each, or two nibbles a byte, low first) when a block fills whole bytes.
  const bool stream = q.block_size * q.bits % 8 == 0;
  std::vector<uint8_t> c(static_cast<size_t>(p.Kp), 0);  // a row's codes, a byte each; zeros past K
  for (int64_t n = 0; n < p.N; ++n) {
    uint8_t* row = p.codes.data() + n * p.row_bytes();
    const uint8_t* src = q.codes.data() + n * q.n_blocks * q.blob_bytes();
    if (!stream) {
      for (int64_t k = 0; k < p.K; ++k) c[static_cast<size_t>(k)] = static_cast<uint8_t>(code_at(q, n, k));
    } else if (q.bits == 8) {
      std::memcpy(c.data(), src, static_cast<size_t>(p.K));
    } else {
      int64_t k = 0;
      for (; k + 8 <= p.K; k += 8) store_word(c.data() + k, nibbles_to_bytes(load_word<uint32_t>(src + k / 2)));
      for (; k < p.K; ++k) c[static_cast<size_t>(k)] = static_cast<uint8_t>((k & 1) ? src[k >> 1] >> 4 : src[k >> 1] & 0x0F);
    }
    if (p.bits == 8) {
      std::memcpy(row, c.data(), static_cast<size_t>(p.Kp));
    } else {  // 128-element chunks: element j in the low nibble of byte j % 64, j + 64 in the high one
      for (int64_t k0 = 0; k0 < p.Kp; k0 += 128)
        for (int64_t j = 0; j < 64; j += 8)
          store_word(row + k0 / 2 + j, load_word<uint64_t>(c.data() + k0 + j) | (load_word<uint64_t>(c.data() + k0 + 64 + j) << 4));
    }
    for (int64_t g = 0; g < p.n_groups; ++g) {
      const float s = q.scales[static_cast<size_t>(n * q.n_blocks + g)];
      p.scales[static_cast<size_t>(n * p.group_stride + g)] = s;
      if (!symmetric) p.negzp[static_cast<size_t>(n * p.group_stride + g)] = -s * zero_point_value(q, n, g);
    }
  }
  if (p.n_groups > 1) {
    p.half_scales.resize(p.scales.size());
    for (size_t i = 0; i < p.scales.size(); ++i) {
      p.half_scales[i] = sy::plugin::f32_to_f16(p.scales[i]);
      if (sy::plugin::f16_to_f32(p.half_scales[i]) != p.scales[i]) {  // an import's fp32 scales: keep them
        p.half_scales.clear();
        break;
      }
    }
    p.half = !p.half_scales.empty();
  }
  if (uses_panels(for_isa)) {
    if (p.fits_panels()) to_panels(p);
  }
  return p;
}

// Dequantizes rows [n0, n1) to fp32 [n1 - n0, K].
void dequantize_rows(const PackedMatrix& w, int64_t n0, int64_t n1, float* out) {
  for (int64_t n = n0; n < n1; ++n) {
    const float* s = w.scales.data() + n * w.group_stride;
    float* o = out + (n - n0) * w.K;
    for (int64_t g = 0; g < w.n_groups; ++g) {
      const float scale = s[g], z = w.negzp_at(n, g);
      for (int64_t k = g * w.group; k < std::min(w.K, (g + 1) * w.group); ++k) o[k] = static_cast<float>(w.code(n, k)) * scale + z;
    }
  }
}

namespace {

// Per-group sums of a zero-padded activation row.
void group_sums(const PackedMatrix& w, const float* x, float* xsum) {
  for (int64_t g = 0; g < w.n_groups; ++g) {
    const int64_t k0 = g * w.group, k1 = std::min(w.K, k0 + w.group);
    float s = 0;
    for (int64_t k = k0; k < k1; ++k) s += x[k];
    xsum[g] = s;
  }
}

Isa usable(const PackedMatrix& w, Isa isa) {
  while (isa != Isa::Scalar && (!w.supports(isa) || !isa_available(isa))) isa = static_cast<Isa>(static_cast<int>(isa) - 1);
  return isa;
}

constexpr int64_t kGemmMinRows = 16;  // from here on, tiles (dequantized for sgemm but on VNNI and AVX2 int4)
constexpr int64_t kTileRows = kPrefillTileRows;

// The AVX2 int8-activation prefill: int4 only (vpmaddubsw's 16-bit sums
// would overflow on int8 codes), in the geometries its blocks fit.
bool avx2_int4_tiles(const PackedMatrix& w, Isa isa, int64_t M) {
  return isa == Isa::Avx2Int8 && M >= kGemmMinRows && w.bits == 4 && w.fits_int8_activations();
}

}  // namespace

void gemv_scalar(const PackedMatrix& w, const float* x, const float* xsum, float* y, int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; ++n) {
    const float* s = w.scales.data() + n * w.group_stride;
    float acc = 0;
    for (int64_t g = 0; g < w.n_groups; ++g) {
      const int64_t k0 = g * w.group, k1 = std::min(w.K, k0 + w.group);
      float dot = 0;
      for (int64_t k = k0; k < k1; ++k) dot += static_cast<float>(w.code(n, k)) * x[k];
      acc += s[g] * dot + w.negzp_at(n, g) * xsum[g];
    }
    y[n] = acc;
  }
}

bool rounds_activations(const PackedMatrix& w, Isa isa, int64_t M) {
  isa = usable(w, isa);
  return uses_panels(isa) || (isa == Isa::Avx2Int8 && M < kGemmMinRows) || avx2_int4_tiles(w, isa, M);
}

bool matches_single_token(const PackedMatrix& w, Isa isa, int64_t M) {
  return M < kGemmMinRows || uses_panels(usable(w, isa));
}

namespace {

// The activation rows, zero-padded to Kp and quantized, in the calling
// thread's scratch reused across calls (no allocation per step once grown).
// A prompt's rows are quantized on all threads (serial, they held a
// 128-token int4 prefill's 1 -> 2 thread scaling down).
std::vector<QuantizedActivation>& quantized_rows(const PackedMatrix& w, const float* x, int64_t M, Isa isa, const ParallelFor& pf) {
  thread_local std::vector<QuantizedActivation> qa_storage;
  std::vector<QuantizedActivation>& qa = qa_storage;  // a worker must name the caller's rows, not its own
  if (qa.size() < static_cast<size_t>(M)) qa.resize(static_cast<size_t>(M));
  auto rows = [&](int64_t m0, int64_t m1) {
    thread_local std::vector<float> xpad;  // each thread's own
    xpad.resize(static_cast<size_t>(w.Kp));
    for (int64_t m = m0; m < m1; ++m) {
      std::copy(x + m * w.K, x + (m + 1) * w.K, xpad.begin());
      std::fill(xpad.begin() + w.K, xpad.end(), 0.f);
      if (uses_panels(isa)) quantize_activation(w, xpad.data(), qa[static_cast<size_t>(m)]);
      else quantize_activation_avx2(w, xpad.data(), qa[static_cast<size_t>(m)]);
    }
  };
  if (M >= 16) pf(M, 8, rows);
  else rows(0, M);
  return qa;
}

}  // namespace

void qmatmul(const PackedMatrix& w, const float* x, int64_t M, const float* bias, float* y, Isa isa, const ParallelFor& pf) {
  isa = usable(w, isa);
  const int64_t N = w.N, K = w.K;
  if (uses_panels(isa)) {
    // Panels of 16 rows on VNNI, one token or many (prefill, a batch of
    // decodes, the k+1 rows of a speculative verification): every
    // activation row quantized once, every weight load serving up to 8
    // tokens, no fp32 copy of the weights; a token's results are the same
    // bits at any M. One token takes enough panels per work item to amortise
    // the dispatch (as the GEMV below); several, 4 panels.
    const std::vector<QuantizedActivation>& qa = quantized_rows(w, x, M, isa, pf);
    const int64_t grain = M == 1 ? std::max<int64_t>(1, (1 << 16) / w.panel_bytes()) : 4;
    // From 16 tokens on AMX where granted: 16 x 16 x 32 tile products, the
    // same bits.
    auto* gemm = isa == Isa::Avx512Amx && M >= kGemmMinRows ? gemm_amx : gemm_avx512vnni;
    pf(w.Np / 16, grain, [&](int64_t p0, int64_t p1) { gemm(w, qa.data(), M, y, p0, p1); });
  } else if (avx2_int4_tiles(w, isa, M)) {
    // Prefill on AVX2 without VNNI, int4: every activation row quantized
    // once, 8-row panels of int8 products (gemm_avx2_int4); a float tile
    // through sgemm costs more than the integer products here.
    std::vector<QuantizedActivation>& qa = quantized_rows(w, x, M, isa, pf);
    if (folds_zero_point(w))
      for (int64_t m = 0; m < M; ++m) fill_block_zero(qa[static_cast<size_t>(m)]);
    pf((N + 7) / 8, 4, [&](int64_t g0, int64_t g1) { gemm_avx2_int4(w, qa.data(), M, y, g0, g1); });
  } else if (M >= kGemmMinRows) {
    // Prefill: each 64-row tile is dequantized once and multiplied for all M tokens.
    // The path's own vector width (its int8 activations are for few rows:
    // a tile is dequantized to fp32 whatever the path).
    auto* dequantize = isa == Isa::Avx512 || isa == Isa::Avx512Vnni ? dequantize_rows_avx512
                       : isa == Isa::Avx2 || isa == Isa::Avx2Int8   ? dequantize_rows_avx2
                                                                    : dequantize_rows;
    const int64_t tiles = (N + kTileRows - 1) / kTileRows;
    pf(tiles, 1, [&](int64_t t0, int64_t t1) {
      std::vector<float> wt(static_cast<size_t>(kTileRows * K));
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t n0 = t * kTileRows, nt = std::min(kTileRows, N - n0);
        dequantize(w, n0, n0 + nt, wt.data());
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(M), static_cast<int>(nt), static_cast<int>(K), 1.f, x,
                    static_cast<int>(K), wt.data(), static_cast<int>(K), 0.f, y + n0, static_cast<int>(N));
      }
    });
  } else {
    // Decode (one token per sequence, a few sequences): GEMV per token, the
    // tokens of a work item sharing each block of weight rows while it is in
    // cache (on avx2int8 each row's codes are also unpacked once for up to
    // four tokens, gemv_avx2_int8).
    // Per-thread scratch, reused across calls: no allocation per decode step
    // once the buffers have grown to the largest matrix. Bound to local
    // references: a lambda run on a worker names the worker's own copies.
    const bool int8 = int8_activations(isa);
    thread_local std::vector<float> xpad_storage, xsum_storage;
    std::vector<float>& xpad = xpad_storage;
    std::vector<float>& xsum = xsum_storage;
    const std::vector<QuantizedActivation>* qa = int8 ? &quantized_rows(w, x, M, isa, pf) : nullptr;
    if (!int8) {  // fp32 activations: zero-padded rows and their group sums
      xpad.assign(static_cast<size_t>(M * w.Kp), 0.f);
      xsum.resize(static_cast<size_t>(M * w.n_groups));
      for (int64_t m = 0; m < M; ++m) {
        float* xm = xpad.data() + m * w.Kp;
        std::copy(x + m * K, x + (m + 1) * K, xm);
        group_sums(w, xm, xsum.data() + m * w.n_groups);
      }
    }
    auto* gemv = isa == Isa::Avx512 ? gemv_avx512 : isa == Isa::Avx2 ? gemv_avx2 : gemv_scalar;
    // Rows per work item: enough to amortise the dispatch, small enough to balance.
    const int64_t grain = std::max<int64_t>(8, (1 << 16) / std::max<int64_t>(1, w.row_bytes()));
    constexpr int64_t kRowBlock = 16;
    pf(N, grain, [&](int64_t n0, int64_t n1) {
      for (int64_t b = n0; b < n1; b += kRowBlock) {
        const int64_t e = std::min(n1, b + kRowBlock);
        if (isa == Isa::Avx2Int8) {
          gemv_avx2_int8(w, qa->data(), M, y, N, b, e);
          continue;
        }
        for (int64_t m = 0; m < M; ++m) gemv(w, xpad.data() + m * w.Kp, xsum.data() + m * w.n_groups, y + m * N, b, e);
      }
    });
  }
  if (bias)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) y[m * N + n] += bias[n];
}

}  // namespace sy_quant
