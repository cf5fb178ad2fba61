// The few-row product (decode and speculative verification): against a
// double-precision reference, and row-independent: a row's result is the
// same bits whatever other rows, column range or thread split share the call
// (what makes greedy speculation and batching equal plain decoding exactly).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/small_gemm.h"

namespace sy {
namespace {

struct Problem {
  int64_t M, N, K;
  bool tb;
  std::vector<float> A, B;
};

Problem make(int64_t M, int64_t N, int64_t K, bool tb, uint32_t seed) {
  Problem p{M, N, K, tb, std::vector<float>(static_cast<size_t>(M * K)), std::vector<float>(static_cast<size_t>(N * K))};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (auto& v : p.A) v = u(rng);
  for (auto& v : p.B) v = u(rng);
  return p;
}

double reference(const Problem& p, int64_t m, int64_t n) {
  double s = 0;
  for (int64_t k = 0; k < p.K; ++k)
    s += static_cast<double>(p.A[static_cast<size_t>(m * p.K + k)]) *
         static_cast<double>(p.tb ? p.B[static_cast<size_t>(n * p.K + k)] : p.B[static_cast<size_t>(k * p.N + n)]);
  return s;
}

// Every build this CPU has, the generic one included.
std::vector<std::pair<const char*, SmallGemmFn>> builds() {
  std::vector<std::pair<const char*, SmallGemmFn>> out;
  for (const char* name : {"generic", "avx2", "avx512"})
    if (SmallGemmFn fn = small_gemm_build(name)) out.emplace_back(name, fn);
  return out;
}

std::vector<float> run(SmallGemmFn gemm, const Problem& p, int64_t M, const float* A, float alpha, float beta, std::vector<float> C = {}) {
  if (C.empty()) C.assign(static_cast<size_t>(M * p.N), std::nanf(""));  // beta == 0 must not read C
  gemm(p.tb, M, 0, p.N, p.K, alpha, A, p.K, p.B.data(), p.tb ? p.K : p.N, beta, C.data(), p.N);
  return C;
}

TEST(SmallGemm, MatchesADoublePrecisionReference) {
  std::printf("[small_gemm path: %s]\n", small_gemm_path());
  // Column counts around the 512-column chunk and past the streamed
  // panels' 1536, K around the 4-row, 16-lane and 16-row panel steps, every
  // row count the path takes.
  for (auto [name, gemm] : builds())
  for (bool tb : {false, true})
    for (int64_t M = 1; M <= 24; ++M)  // every count to 16, and past it (register tiles on [K, N])
      for (auto [N, K] : {std::pair<int64_t, int64_t>{1, 1}, {7, 3}, {33, 17}, {513, 66}, {1030, 131}, {97, 300}, {1700, 37}}) {
        const Problem p = make(M, N, K, tb, static_cast<uint32_t>(M * 1000 + N + K));
        const std::vector<float> C = run(gemm, p, M, p.A.data(), 1.f, 0.f);
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < N; ++n) {
            const double want = reference(p, m, n);
            ASSERT_NEAR(C[static_cast<size_t>(m * N + n)], want, 1e-5 * static_cast<double>(K) + 1e-6)
                << name << " tb " << tb << " M " << M << " N " << N << " K " << K << " at (" << m << ", " << n << ")";
          }
      }
}

TEST(SmallGemm, AppliesAlphaAndBeta) {
  for (auto [name, gemm] : builds())
  for (bool tb : {false, true})
  for (int64_t M : {3, 9}) {  // one pass over the weights, and the register tiles
    const Problem p = make(M, 140, 21, tb, 5);
    std::vector<float> C0(static_cast<size_t>(M * 140));
    for (size_t i = 0; i < C0.size(); ++i) C0[i] = static_cast<float>(i % 7) - 3.f;
    const std::vector<float> C = run(gemm, p, M, p.A.data(), 0.5f, 2.f, C0);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < 140; ++n) {
        const auto i = static_cast<size_t>(m * 140 + n);
        EXPECT_NEAR(C[i], 0.5 * reference(p, m, n) + 2.0 * C0[i], 1e-4) << name << " tb " << tb << " M " << M;
      }
  }
}

TEST(SmallGemm, ARowsResultDoesNotDependOnTheOtherRowsOrTheColumnSplit) {
  for (auto [name, gemm] : builds())
  for (bool tb : {false, true}) {
    // B stored [K, N] goes past 16 rows on the SIMD builds (prompts): 40
    // rows are five register-tile groups on AVX-512, seven on AVX2, with
    // K over two panels (kPanelRows) and N over four (kPanelCols), past
    // the streamed panels' 1536 columns, plus a column short of a vector.
    // The tails below take every row count from 1 to 40: the one-pass form
    // (1-3 rows), the streamed panels (4-32) and the packed tiles all meet
    // the rows alone.
    const int64_t rows = tb || std::strcmp(name, "generic") == 0 ? kSmallGemmMaxRows : 40;
    const int64_t N = 1700, K = 203;
    const Problem p = make(rows, N, K, tb, 11);
    const std::vector<float> all = run(gemm, p, rows, p.A.data(), 1.f, 0.f);
    for (int64_t m = 0; m < rows; ++m) {
      // Alone, and as the first row of a smaller call.
      const std::vector<float> alone = run(gemm, p, 1, p.A.data() + m * K, 1.f, 0.f);
      EXPECT_EQ(0, std::memcmp(alone.data(), all.data() + m * N, static_cast<size_t>(N) * sizeof(float))) << name << " tb " << tb << " row " << m;
      const int64_t rest = rows - m;
      const std::vector<float> tail = run(gemm, p, rest, p.A.data() + m * K, 1.f, 0.f);
      EXPECT_EQ(0, std::memcmp(tail.data(), all.data() + m * N, static_cast<size_t>(rest * N) * sizeof(float))) << name << " tb " << tb;
    }
    // Columns computed in pieces (as threads split them) equal one call.
    std::vector<float> pieces(static_cast<size_t>(rows * N));
    for (int64_t n0 = 0; n0 < N; n0 += 96)
      gemm(tb, rows, n0, std::min(N, n0 + 96), K, 1.f, p.A.data(), K, p.B.data(), tb ? K : N, 0.f, pieces.data(), N);
    EXPECT_EQ(0, std::memcmp(pieces.data(), all.data(), all.size() * sizeof(float))) << name << " tb " << tb;
  }
}

TEST(SmallGemm, APromptsRowsGetTheirDecodeBits) {
  EXPECT_EQ(small_gemm_max_rows(true), kSmallGemmMaxRows);
  if (std::strcmp(small_gemm_path(), "generic") == 0) EXPECT_EQ(small_gemm_max_rows(false), kSmallGemmMaxRows);
  else EXPECT_GT(small_gemm_max_rows(false), 4096);
  // A prompt of 259 rows: two full 128-row chunks and three rows, K over
  // two panels; each row is the bits the same row gets alone.
  for (auto [name, gemm] : builds()) {
    if (std::strcmp(name, "generic") == 0) continue;
    const int64_t rows = 259, N = 150, K = 140;
    const Problem p = make(rows, N, K, false, 21);
    const std::vector<float> all = run(gemm, p, rows, p.A.data(), 1.f, 0.f);
    for (int64_t m = 0; m < rows; ++m) {
      const std::vector<float> alone = run(gemm, p, 1, p.A.data() + m * K, 1.f, 0.f);
      ASSERT_EQ(0, std::memcmp(alone.data(), all.data() + m * N, static_cast<size_t>(N) * sizeof(float))) << name << " row " << m;
    }
  }
}

}  // namespace
}  // namespace sy
