// Every quantized matmul path against the straightforward reference: the
// weight dequantized to fp32 (quant_format's dequantize), then a plain
// double-precision multiply. Random shapes, including K and N that are not
// multiples of the group or of any SIMD width, on every path this CPU has.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "qmatmul.h"

namespace sy_quant {
namespace {

std::vector<float> random_vector(size_t n, std::mt19937& rng, float scale = 1.f) {
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Runs fn over [0, n) on two real threads, like the host pool.
const ParallelFor two_threads = [](int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= grain) return fn(0, n);
  const int64_t mid = n / 2;
  std::thread t([&] { fn(0, mid); });
  fn(mid, n);
  t.join();
};

struct Case {
  int64_t M, K, N, group;  // group 0: per output channel
  int bits;
  bool symmetric;
  // Group scales as an import may carry them (not fp16 values): the
  // kernels' fp32-scale variants instead of the half-scale ones.
  bool fp32_scales = false;
  // Float zero points (-min / scale: "int4-min", GGUF's Q4_1 and K-quants).
  bool float_min = false;
};

std::vector<Isa> paths() {
  std::vector<Isa> v;
  for (Isa i : kAllIsas)
    if (isa_available(i)) v.push_back(i);
  return v;
}

void check(const Case& c, Isa isa, uint32_t seed) {
  std::mt19937 rng(seed);
  auto w = random_vector(static_cast<size_t>(c.K * c.N), rng, 0.05f);
  auto x = random_vector(static_cast<size_t>(c.M * c.K), rng);
  auto bias = random_vector(static_cast<size_t>(c.N), rng);
  QuantizedWeight q = quantize(w.data(), c.K, c.N, {c.bits, c.group, c.symmetric && !c.float_min, c.float_min});
  ASSERT_EQ(q.float_zero_points.empty(), !c.float_min);
  if (c.fp32_scales)
    for (float& sc : q.scales) sc *= 1.0001f;
  PackedMatrix p = pack(q, isa);
  ASSERT_EQ(p.panels, uses_panels(isa)) << "the VNNI path's layout (groups of 16 included)";
  ASSERT_EQ(!p.half, q.n_blocks == 1 || c.fp32_scales) << "bits=" << c.bits << " group=" << c.group;
  auto wd = dequantize(q);
  std::vector<float> y(static_cast<size_t>(c.M * c.N), -1.f);
  qmatmul(p, x.data(), c.M, bias.data(), y.data(), isa, two_threads);
  const bool rounded = rounds_activations(p, isa, c.M);
  double worst = 0;
  for (int64_t m = 0; m < c.M; ++m) {
    const float* xm = x.data() + m * c.K;
    // Activation rounding of the int8-activation paths: each x_k moves by at most half of
    // its 32-block's step amax/127.
    std::vector<double> step(static_cast<size_t>(c.K));
    for (int64_t b = 0; b < c.K; b += 32) {
      double amax = 0;
      for (int64_t k = b; k < std::min(c.K, b + 32); ++k) amax = std::max(amax, std::fabs(double(xm[k])));
      for (int64_t k = b; k < std::min(c.K, b + 32); ++k) step[static_cast<size_t>(k)] = amax / 127.0;
    }
    for (int64_t n = 0; n < c.N; ++n) {
      double ref = bias[static_cast<size_t>(n)], magnitude = std::fabs(ref), rounding = 0;
      for (int64_t k = 0; k < c.K; ++k) {
        double wk = wd[static_cast<size_t>(k * c.N + n)];
        ref += double(xm[k]) * wk;
        magnitude += std::fabs(double(xm[k]) * wk);
        rounding += std::fabs(wk) * step[static_cast<size_t>(k)] / 2;
      }
      // fp32 accumulation error ~ K * eps * sum|x w|; the int8-activation paths add the
      // activation rounding bound.
      double tol = 4e-6 * std::sqrt(double(c.K)) * magnitude + 1e-6 + (rounded ? rounding * 1.001 : 0);
      double err = std::fabs(double(y[static_cast<size_t>(m * c.N + n)]) - ref);
      worst = std::max(worst, err / tol);
      ASSERT_LE(err, tol) << isa_name(isa) << " M=" << c.M << " K=" << c.K << " N=" << c.N << " group=" << c.group << " bits=" << c.bits
                          << (c.symmetric ? " sym" : " asym") << " at (" << m << ", " << n << ")";
    }
  }
}

TEST(QMatMul, EveryPathMatchesDequantizeThenMultiply) {
  std::vector<Case> cases;
  std::mt19937 rng(7);
  // Fixed corner shapes, then random ones.
  for (int bits : {8, 4})
    for (bool sym : {true, false})
      for (int64_t group : {int64_t{0}, int64_t{16}, int64_t{32}, int64_t{64}, int64_t{128}}) {
        if (bits == 4 && group == 0) continue;
        for (int64_t M : {1, 2, 5, 17})
          for (auto [K, N] : {std::pair<int64_t, int64_t>{64, 64}, {172, 64}, {64, 172}, {1, 3}, {33, 7}, {300, 129}, {512, 96}})
            cases.push_back({M, K, N, group, bits, sym, M == 2});
      }
  for (int bits : {8, 4})
    for (int64_t group : {int64_t{16}, int64_t{32}, int64_t{128}})
      for (int64_t M : {1, 2, 17})
        for (auto [K, N] : {std::pair<int64_t, int64_t>{64, 64}, {172, 64}, {33, 7}, {512, 96}})
          cases.push_back({M, K, N, group, bits, false, M == 2, true});  // M == 2: fp32 scales (GGUF import)
  // A trained model's prompt (SmolLM2's widths, Q4_1-style float zero
  // points, a 70-token prompt): many 32-blocks and token tiles past 40 rows.
  for (int64_t K : {576, 1536})
    for (bool float_min : {false, true}) cases.push_back({70, K, 200, 32, 4, true, false, float_min});
  std::uniform_int_distribution<int64_t> dim(1, 700), rows(1, 40);
  for (int i = 0; i < 60; ++i) {
    int bits = i % 2 ? 4 : 8;
    int64_t groups[] = {0, 16, 32, 64, 128};
    int64_t group = groups[i % 5];
    if (bits == 4 && group == 0) group = 32;
    cases.push_back({rows(rng), dim(rng), dim(rng), group, bits, i % 3 != 0});
  }
  int runs = 0;
  for (Isa isa : paths()) {
    for (size_t i = 0; i < cases.size(); ++i) check(cases[i], isa, static_cast<uint32_t>(i));
    runs += static_cast<int>(cases.size());
  }
  // Machines differ (AVX2 only, AVX-512, VNNI): the log says what this run
  // tested and what it could not.
  std::printf("%d cases on paths:", runs);
  for (Isa isa : paths()) std::printf(" %s", isa_name(isa));
  std::printf("; not tested here (this CPU lacks them):");
  int missing = 0;
  for (Isa isa : kAllIsas)
    if (!isa_available(isa)) {
      std::printf(" %s", isa_name(isa));
      ++missing;
    }
  std::printf("%s\n", missing ? "" : " none");
}

// pack() moves codes as words (rows, then panels): every code it stores
// reads back as the quantized weight's own, and the padding past K is zero,
// in both layouts, for K that is not a multiple of 128 (odd where 8-bit),
// one group per row, and K-quant-like groups of 16.
TEST(QMatMul, PackingKeepsEveryCodeInRowsAndPanels) {
  std::mt19937 rng(11);
  for (int bits : {4, 8})
    for (int64_t group : {int64_t{0}, int64_t{16}, int64_t{32}})
      for (auto [K, N] : {std::pair<int64_t, int64_t>{1, 3}, {33, 7}, {172, 17}, {300, 33}}) {
        if ((group && K % group) || (!group && bits * K % 8)) continue;  // geometries quantize() takes
        const std::vector<float> w = random_vector(static_cast<size_t>(K * N), rng);
        const QuantizedWeight q = quantize(w.data(), K, N, {bits, group, false});
        for (Isa isa : {Isa::Scalar, Isa::Avx512Vnni}) {
          const PackedMatrix p = pack(q, isa);
          for (int64_t n = 0; n < N; ++n)
            for (int64_t k = 0; k < p.Kp; ++k)
              ASSERT_EQ(p.code(n, k), k < K ? code_at(q, n, k) : 0)
                  << bits << "-bit, group " << group << ", K " << K << ", row " << n << ", element " << k << (p.panels ? ", panels" : ", rows");
        }
      }
}

TEST(QMatMul, PathsAgreeWithEachOtherOnOneLargeMatrix) {
  Case c{1, 2048, 512, 64, 4, true};
  for (Isa isa : paths()) check(c, isa, 99);
}

// A token's outputs are the same bits whatever other tokens share the call,
// wherever matches_single_token says so (VNNI at every count, the others
// below their fp32 GEMM threshold): batching decodes and speculative
// verification leave a quantized model's greedy output unchanged.
TEST(QMatMul, ATokensOutputIsTheSameBitsWhateverTheTokenCount) {
  std::mt19937 rng(11);
  int compared = 0;
  for (Isa isa : paths())
    for (int bits : {8, 4})
      for (bool sym : {true, false})
        for (auto [K, N, group] : {std::tuple<int64_t, int64_t, int64_t>{768, 200, 32}, {300, 129, 64}, {512, 96, 0}, {576, 70, 16}}) {
          if (bits == 4 && group == 0) group = 32;
          auto w = random_vector(static_cast<size_t>(K * N), rng, 0.05f);
          PackedMatrix p = pack(quantize(w.data(), K, N, {bits, group, sym}), isa);
          const int64_t most = 33;
          auto x = random_vector(static_cast<size_t>(most * K), rng);
          std::vector<float> alone(static_cast<size_t>(most * N));
          for (int64_t m = 0; m < most; ++m) qmatmul(p, x.data() + m * K, 1, nullptr, alone.data() + m * N, isa, two_threads);
          for (int64_t M : {2, 3, 4, 5, 7, 8, 16, 17, 33}) {
            if (!matches_single_token(p, isa, M)) continue;
            std::vector<float> y(static_cast<size_t>(M * N));
            qmatmul(p, x.data(), M, nullptr, y.data(), isa, two_threads);
            for (int64_t m = 0; m < M; ++m)
              ASSERT_EQ(0, std::memcmp(y.data() + m * N, alone.data() + m * N, static_cast<size_t>(N) * sizeof(float)))
                  << isa_name(isa) << " bits " << bits << (sym ? " sym" : " asym") << " K " << K << " N " << N << ": token " << m
                  << " of " << M << " differs from the same token alone";
            ++compared;
          }
        }
  std::printf("%d (path, matrix, token count) combinations equal to single-token calls\n", compared);
  EXPECT_GT(compared, 0);
}

// The AMX tiles promise gemm_avx512vnni's bits, not only its bound: every
// weight geometry the panels take (int8 and int4, symmetric, integer and
// float zero points, per-row scales, groups of 32 and 128, fp16 and fp32
// group scales), token counts that are and are not multiples of 16, and N
// past a whole panel.
TEST(QMatMul, AmxTilesGiveTheVnniPathsBits) {
  if (!isa_available(Isa::Avx512Amx))
    GTEST_SKIP() << "this CPU or OS does not grant AMX-INT8 tiles (amx_granted() is false)";
  std::mt19937 rng(17);
  int compared = 0;
  for (int bits : {8, 4})
    for (int zero : {0, 1, 2})  // symmetric, integer zero points, float zero points
      for (auto [K, N, group] : {std::tuple<int64_t, int64_t, int64_t>{576, 203, 32}, {1536, 64, 128}, {300, 129, 64}, {256, 40, 0}, {512, 33, 16}})
        for (bool fp32_scales : {false, true}) {
          if (bits == 4 && group == 0) continue;
          if (fp32_scales && group == 0) continue;
          auto w = random_vector(static_cast<size_t>(K * N), rng, 0.05f);
          QuantizedWeight q = quantize(w.data(), K, N, {bits, group, zero == 0, zero == 2});
          if (fp32_scales)
            for (float& sc : q.scales) sc *= 1.0001f;
          PackedMatrix p = pack(q, Isa::Avx512Amx);
          ASSERT_TRUE(p.panels);
          for (int64_t M : {16, 31, 48, 70}) {
            auto x = random_vector(static_cast<size_t>(M * K), rng);
            std::vector<float> vnni(static_cast<size_t>(M * N)), amx(static_cast<size_t>(M * N));
            qmatmul(p, x.data(), M, nullptr, vnni.data(), Isa::Avx512Vnni, two_threads);
            qmatmul(p, x.data(), M, nullptr, amx.data(), Isa::Avx512Amx, two_threads);
            for (int64_t i = 0; i < M * N; ++i)
              ASSERT_EQ(0, std::memcmp(&amx[static_cast<size_t>(i)], &vnni[static_cast<size_t>(i)], sizeof(float)))
                  << "bits " << bits << " zero " << zero << " K " << K << " N " << N << " group " << group << (fp32_scales ? " fp32 scales" : "")
                  << " M " << M << " at (" << i / N << ", " << i % N << "): amx " << amx[static_cast<size_t>(i)] << ", avx512vnni "
                  << vnni[static_cast<size_t>(i)];
            ++compared;
          }
        }
  std::printf("%d (matrix, token count) combinations: AMX tiles equal to the VNNI tiles bit for bit\n", compared);
}

// Where a prompt takes int8-activation tiles but a token alone the GEMV
// (int4 on avx2int8), both multiply the same quantized activations and sum
// exact integer block products: they may differ only by the float
// accumulation's order, far inside the activation-rounding bound the test
// above allows (a wrong block scale or zero point would still fit that
// bound on random data; it does not fit this one).
TEST(QMatMul, PromptTilesAgreeWithTheSingleTokenPathToFloatRounding) {
  std::mt19937 rng(13);
  int compared = 0;
  for (Isa isa : paths())
    for (bool sym : {true, false})
      for (auto [K, N, group] : {std::tuple<int64_t, int64_t, int64_t>{576, 203, 32}, {1536, 64, 128}, {300, 129, 64}, {256, 40, 0}}) {
        auto w = random_vector(static_cast<size_t>(K * N), rng, 0.05f);
        PackedMatrix p = pack(quantize(w.data(), K, N, {4, group, sym, !sym}), isa);
        const int64_t M = 70;
        if (!rounds_activations(p, isa, M) || !rounds_activations(p, isa, 1) || matches_single_token(p, isa, M)) continue;
        auto x = random_vector(static_cast<size_t>(M * K), rng);
        std::vector<float> alone(static_cast<size_t>(M * N)), y(static_cast<size_t>(M * N));
        for (int64_t m = 0; m < M; ++m) qmatmul(p, x.data() + m * K, 1, nullptr, alone.data() + m * N, isa, two_threads);
        qmatmul(p, x.data(), M, nullptr, y.data(), isa, two_threads);
        for (int64_t m = 0; m < M; ++m) {
          double magnitude = 0;
          for (int64_t n = 0; n < N; ++n) magnitude = std::max(magnitude, std::fabs(double(alone[static_cast<size_t>(m * N + n)])));
          for (int64_t n = 0; n < N; ++n)
            ASSERT_NEAR(y[static_cast<size_t>(m * N + n)], alone[static_cast<size_t>(m * N + n)], 2e-6 * std::sqrt(double(K)) * (magnitude + 1))
                << isa_name(isa) << (sym ? " sym" : " asym") << " K " << K << " N " << N << " group " << group << " at (" << m << ", " << n << ")";
        }
        ++compared;
      }
  std::printf("%d (path, matrix) combinations: prompt tiles against single-token calls\n", compared);
}

// The int8-activation quantizers against a portable statement of what they
// promise (per 32-block: scale amax/127, codes x*127/amax rounded to
// nearest even, -z times each 4 codes' sum for symmetric weights): every
// build the CPU has must give exactly these, so AVX2 and VNNI agree.
TEST(QMatMul, Int8ActivationBuildsQuantizeAsTheReferenceSays) {
  std::mt19937 rng(5);
  int builds = 0;
  for (int64_t group : {int64_t{0}, int64_t{16}, int64_t{32}, int64_t{128}}) {
    const int64_t K = 700, N = 8;
    auto w = random_vector(static_cast<size_t>(K * N), rng, 0.05f);
    PackedMatrix p = pack(quantize(w.data(), K, N, {8, group, true}));
    std::vector<float> x = random_vector(static_cast<size_t>(p.Kp), rng);
    std::fill(x.begin() + K, x.end(), 0.f);
    std::vector<int8_t> q(static_cast<size_t>(p.Kp));
    std::vector<float> scale(static_cast<size_t>(p.Kp / 32));
    std::vector<int32_t> zero_start(static_cast<size_t>(p.Kp / 4));
    for (int64_t b = 0; b < p.Kp / 32; ++b) {
      float amax = 0;
      for (int64_t k = b * 32; k < b * 32 + 32; ++k) amax = std::max(amax, std::fabs(x[static_cast<size_t>(k)]));
      scale[static_cast<size_t>(b)] = amax / 127.f;
      const float inv = amax > 0 ? 127.f / amax : 0.f;
      for (int64_t k = b * 32; k < b * 32 + 32; ++k) q[static_cast<size_t>(k)] = static_cast<int8_t>(std::nearbyint(x[static_cast<size_t>(k)] * inv));
    }
    for (int64_t j = 0; j < p.Kp / 4; ++j) {
      int32_t sum = 0;
      for (int64_t k = 4 * j; k < 4 * j + 4; ++k) sum += q[static_cast<size_t>(k)];
      zero_start[static_cast<size_t>(j)] = -static_cast<int32_t>(p.symmetric_zero_point) * sum;
    }
    // Per group: each of its 32-blocks' (in groups of 16, half blocks')
    // code sum times the block's scale.
    std::vector<float> group_sum(static_cast<size_t>(p.n_groups), 0.f);
    const bool halves = p.n_groups > 1 && p.group == 16;
    for (int64_t b = 0; b < p.Kp / 32; ++b)
      for (int64_t h = 0; h < (halves ? 2 : 1); ++h) {
        const int64_t k0 = b * 32 + h * 16, k1 = halves ? k0 + 16 : k0 + 32;
        int32_t sum = 0;
        for (int64_t k = k0; k < k1; ++k) sum += q[static_cast<size_t>(k)];
        const int64_t g = p.n_groups == 1 ? 0 : halves ? 2 * b + h : b / (p.group / 32);
        group_sum[static_cast<size_t>(std::min(g, p.n_groups - 1))] += scale[static_cast<size_t>(b)] * static_cast<float>(sum);
      }
    std::vector<int32_t> half_zero(static_cast<size_t>(p.Kp / 16));
    for (size_t h = 0; h < half_zero.size(); ++h)
      half_zero[h] = zero_start[4 * h] + zero_start[4 * h + 1] + zero_start[4 * h + 2] + zero_start[4 * h + 3];
    for (Isa isa : {Isa::Avx2Int8, Isa::Avx512Vnni}) {
      if (!isa_available(isa) || (isa == Isa::Avx2Int8 && group == 16)) continue;  // avx2int8 has no groups of 16
      ++builds;
      QuantizedActivation a;
      if (isa == Isa::Avx512Vnni) quantize_activation(p, x.data(), a);
      else quantize_activation_avx2(p, x.data(), a);
      EXPECT_EQ(a.q, q) << isa_name(isa) << " group " << group;
      EXPECT_EQ(a.zero_start, zero_start) << isa_name(isa) << " group " << group;
      if (isa == Isa::Avx512Vnni) {  // braces: EXPECT_EQ expands to an if/else
        EXPECT_EQ(a.half_zero, half_zero) << "the groups of 16's start values";
      }
      ASSERT_EQ(a.group_sum.size(), group_sum.size());
      for (size_t g = 0; g < group_sum.size(); ++g) EXPECT_FLOAT_EQ(a.group_sum[g], group_sum[g]) << isa_name(isa) << " group " << group;
      for (int64_t b = 0; b < p.Kp / 32; ++b)
        ASSERT_EQ(a.scale16[static_cast<size_t>((b / 2) * 16 + (b % 2) * 8)], scale[static_cast<size_t>(b)]) << isa_name(isa) << " block " << b;
    }
  }
  // The log says which builds this machine checked (scalar-only CPUs have none).
  std::printf("int8-activation quantizers checked: %d of 7 (build x group)\n", builds);
}

TEST(QuantFormat, RoundTripErrorIsAtMostHalfAStep) {
  std::mt19937 rng(3);
  for (int bits : {8, 4})
    for (int kind : {0, 1, 2})  // symmetric, asymmetric, float minimums
      for (int64_t group : {int64_t{0}, int64_t{32}}) {
        if (bits == 4 && group == 0) continue;
        const bool sym = kind == 0;
        const int64_t K = 100, N = 9;
        auto w = random_vector(static_cast<size_t>(K * N), rng);
        QuantizedWeight q = quantize(w.data(), K, N, {bits, group, sym, kind == 2});
        auto wd = dequantize(q);
        for (int64_t n = 0; n < N; ++n)
          for (int64_t k = 0; k < K; ++k) {
            const float s = q.scales[static_cast<size_t>(n * q.n_blocks + k / q.block_size)];
            ASSERT_LE(std::fabs(wd[static_cast<size_t>(k * N + n)] - w[static_cast<size_t>(k * N + n)]), s * 0.5f + 1e-6f)
                << "bits=" << bits << " sym=" << sym << " group=" << group;
          }
      }
}

TEST(QuantFormat, ZeroWeightsStayExactlyZero) {
  std::vector<float> w(64 * 4, 0.f);
  w[5] = 1.f;
  for (bool sym : {true, false}) {
    const QuantizedWeight q = quantize(w.data(), 64, 4, {4, 32, sym});
    auto wd = dequantize(q);
    // The scale is an fp16 value rounded up, so the one weight is off by a
    // little of its step; every zero stays exactly zero.
    for (size_t i = 0; i < w.size(); ++i) {
      if (w[i] == 0.f) {
        EXPECT_EQ(wd[i], 0.f) << i;
      }
    }
    EXPECT_NEAR(wd[5], 1.f, q.scales[1 * q.n_blocks + 0] * 0.5f);
  }
}

TEST(QuantFormat, SchemesParseAndBadOnesAreNamed) {
  EXPECT_EQ(scheme_name(parse_scheme("int8", 32)), "int8");
  EXPECT_EQ(scheme_name(parse_scheme("int4", 32)), "int4:32");
  EXPECT_EQ(scheme_name(parse_scheme("int4-asym:128", 32)), "int4-asym:128");
  EXPECT_EQ(scheme_name(parse_scheme("int4-min", 32)), "int4-min:32");
  EXPECT_TRUE(parse_scheme("int8-min:64", 32).float_min);
  EXPECT_EQ(scheme_name(parse_scheme("int8:64", 32)), "int8:64");
  for (const char* bad : {"int3", "int4:0", "int4:10", "int4:x", "int8-sym", ""}) {
    try {
      parse_scheme(bad, 32);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("scheme"), std::string::npos) << e.what();
    }
  }
}

TEST(QMatMul, ForcedPathIsHonouredAndUnknownOnesRefused) {
  setenv("SWITCHYARD_QUANT_ISA", "scalar", 1);
  EXPECT_EQ(select_isa(), Isa::Scalar);
  setenv("SWITCHYARD_QUANT_ISA", "neon", 1);
  EXPECT_THROW(select_isa(), std::invalid_argument);
  unsetenv("SWITCHYARD_QUANT_ISA");
  EXPECT_TRUE(isa_available(select_isa()));
}

}  // namespace
}  // namespace sy_quant
