#include "qmatmul.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

namespace sy_quant {

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    case Isa::Avx512Vnni: return "avx512vnni";
  }
  return "?";
}

std::optional<Isa> parse_isa(const std::string& name) {
  for (Isa i : {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni})
    if (name == isa_name(i)) return i;
  return std::nullopt;
}

bool isa_available(Isa isa) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  switch (isa) {
    case Isa::Scalar: return true;
    case Isa::Avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::Avx512: return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
    case Isa::Avx512Vnni:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vnni");
  }
  return false;
#else
  return isa == Isa::Scalar;
#endif
}

Isa select_isa() {
  if (const char* forced = std::getenv("SWITCHYARD_QUANT_ISA"); forced && *forced) {
    auto isa = parse_isa(forced);
    if (!isa) throw std::invalid_argument(std::string("SWITCHYARD_QUANT_ISA='") + forced + "': known paths are scalar, avx2, avx512, avx512vnni");
    if (!isa_available(*isa)) throw std::invalid_argument(std::string("SWITCHYARD_QUANT_ISA=") + forced + ": this CPU does not have it");
    return *isa;
  }
  for (Isa i : {Isa::Avx512Vnni, Isa::Avx512, Isa::Avx2})
    if (isa_available(i)) return i;
  return Isa::Scalar;
}

int64_t PackedMatrix::weight_bytes() const {
  return static_cast<int64_t>(codes.size() + (scales.size() + negzp.size()) * sizeof(float));
}

bool PackedMatrix::supports(Isa isa) const {
  auto fits = [&](int64_t width) { return n_groups == 1 || group % width == 0; };
  switch (isa) {
    case Isa::Scalar: return true;
    case Isa::Avx2: return fits(8);
    case Isa::Avx512: return fits(16);
    case Isa::Avx512Vnni: return fits(32);  // activation blocks must not straddle weight groups
  }
  return false;
}

PackedMatrix pack(const QuantizedWeight& q) {
  PackedMatrix p;
  p.bits = q.bits;
  p.K = q.K;
  p.N = q.N;
  p.Kp = (q.K + 63) / 64 * 64;
  p.group = q.block_size;
  p.n_groups = q.n_blocks;
  p.codes.assign(static_cast<size_t>(p.N * p.row_bytes()), 0);
  p.scales.resize(static_cast<size_t>(p.N * p.n_groups));
  p.negzp.resize(static_cast<size_t>(p.N * p.n_groups));
  for (int64_t n = 0; n < p.N; ++n) {
    uint8_t* row = p.codes.data() + n * p.row_bytes();
    for (int64_t k = 0; k < p.K; ++k) {
      const auto c = static_cast<uint8_t>(code_at(q, n, k));
      if (p.bits == 8) {
        row[k] = c;
      } else {
        const int64_t chunk = k / 64, j = k % 64;
        uint8_t& b = row[chunk * 32 + j % 32];
        b = static_cast<uint8_t>(j < 32 ? (b & 0xF0) | c : (b & 0x0F) | (c << 4));
      }
    }
    for (int64_t g = 0; g < p.n_groups; ++g) {
      const float s = q.scales[static_cast<size_t>(n * q.n_blocks + g)];
      p.scales[static_cast<size_t>(n * p.n_groups + g)] = s;
      p.negzp[static_cast<size_t>(n * p.n_groups + g)] = -s * static_cast<float>(zero_point_at(q, n, g));
    }
  }
  return p;
}

namespace {

inline int packed_code(const PackedMatrix& w, const uint8_t* row, int64_t k) {
  if (w.bits == 8) return row[k];
  const uint8_t b = row[(k / 64) * 32 + (k % 64) % 32];
  return (k % 64) < 32 ? (b & 0x0F) : (b >> 4);
}

// Dequantizes rows [n0, n1) to fp32 [n1 - n0, K].
void dequantize_rows(const PackedMatrix& w, int64_t n0, int64_t n1, float* out) {
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w.codes.data() + n * w.row_bytes();
    const float* s = w.scales.data() + n * w.n_groups;
    const float* z = w.negzp.data() + n * w.n_groups;
    float* o = out + (n - n0) * w.K;
    for (int64_t k = 0; k < w.K; ++k) {
      const int64_t g = k / w.group;
      o[k] = static_cast<float>(packed_code(w, row, k)) * s[g] + z[g];
    }
  }
}

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
  while (isa != Isa::Scalar && !w.supports(isa)) isa = static_cast<Isa>(static_cast<int>(isa) - 1);
  return isa;
}

constexpr int64_t kGemmMinRows = 4;  // from here on, dequantize tiles and use sgemm
constexpr int64_t kTileRows = 64;

}  // namespace

void gemv_scalar(const PackedMatrix& w, const float* x, const float* xsum, float* y, int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w.codes.data() + n * w.row_bytes();
    const float* s = w.scales.data() + n * w.n_groups;
    const float* z = w.negzp.data() + n * w.n_groups;
    float acc = 0;
    for (int64_t g = 0; g < w.n_groups; ++g) {
      const int64_t k0 = g * w.group, k1 = std::min(w.K, k0 + w.group);
      float dot = 0;
      for (int64_t k = k0; k < k1; ++k) dot += static_cast<float>(packed_code(w, row, k)) * x[k];
      acc += s[g] * dot + z[g] * xsum[g];
    }
    y[n] = acc;
  }
}

void qmatmul(const PackedMatrix& w, const float* x, int64_t M, const float* bias, float* y, Isa isa, const ParallelFor& pf) {
  isa = usable(w, isa);
  const int64_t N = w.N, K = w.K;
  if (M >= kGemmMinRows) {
    const int64_t tiles = (N + kTileRows - 1) / kTileRows;
    pf(tiles, 1, [&](int64_t t0, int64_t t1) {
      std::vector<float> wt(static_cast<size_t>(kTileRows * K));
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t n0 = t * kTileRows, nt = std::min(kTileRows, N - n0);
        dequantize_rows(w, n0, n0 + nt, wt.data());
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(M), static_cast<int>(nt), static_cast<int>(K), 1.f, x,
                    static_cast<int>(K), wt.data(), static_cast<int>(K), 0.f, y + n0, static_cast<int>(N));
      }
    });
  } else {
    std::vector<float> xpad(static_cast<size_t>(w.Kp), 0.f), xsum(static_cast<size_t>(w.n_groups));
    QuantizedActivation qa;
    // Rows per work item: enough to amortise the dispatch, small enough to balance.
    const int64_t grain = std::max<int64_t>(8, (1 << 16) / std::max<int64_t>(1, w.row_bytes()));
    for (int64_t m = 0; m < M; ++m) {
      std::copy(x + m * K, x + (m + 1) * K, xpad.begin());
      float* ym = y + m * N;
      if (isa == Isa::Avx512Vnni) {
        quantize_activation(w, xpad.data(), qa);
        pf(N, grain, [&](int64_t n0, int64_t n1) { gemv_avx512vnni(w, qa, ym, n0, n1); });
        continue;
      }
      group_sums(w, xpad.data(), xsum.data());
      auto* gemv = isa == Isa::Avx512 ? gemv_avx512 : isa == Isa::Avx2 ? gemv_avx2 : gemv_scalar;
      pf(N, grain, [&](int64_t n0, int64_t n1) { gemv(w, xpad.data(), xsum.data(), ym, n0, n1); });
    }
  }
  if (bias)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) y[m * N + n] += bias[n];
}

}  // namespace sy_quant
