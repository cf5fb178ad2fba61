// The host's float32 product for plugin kernels (ABI 1.11, matmul_f32):
// a row's bits do not depend on how many rows, which rows or which columns
// share the call (so a plugin kernel built on it gives a token the same
// logits alone, in a batch and in its prompt), the values are the product,
// and sizes that do not fit are refused naming the field.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "plugin_host/host_api.h"

namespace sy {
namespace {

struct Product {
  int64_t M, K, N;
  std::vector<float> a, b;
  Product(int64_t m, int64_t k, int64_t n, uint32_t seed) : M(m), K(k), N(n), a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n)) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.f, 1.f);
    for (auto& v : a) v = d(rng);
    for (auto& v : b) v = d(rng);
  }
};

bool same_bits(const float* x, const float* y, int64_t n) { return std::memcmp(x, y, static_cast<size_t>(n) * sizeof(float)) == 0; }

TEST(HostMatMul, TheTableOffersItFromMinorEleven) {
  const sy_host_api* host = host_api();
  EXPECT_GE(host->abi_minor, 11);
  EXPECT_TRUE(SY_HAS_FIELD(host, sy_host_api, matmul_f32));
}

// 40 rows: past the register tiles' 6-row start and the 16 rows a call with
// B stored [N, K] takes at once; 700 columns: not a multiple of any vector.
TEST(HostMatMul, ARowHasItsBitsWhateverRowsAndColumnsShareTheCall) {
  const sy_host_api* host = host_api();
  for (int32_t tb : {0, 1}) {
    Product p(40, 96, 700, 7u + static_cast<uint32_t>(tb));
    const int64_t ldb = tb ? p.K : p.N;
    std::vector<float> all(static_cast<size_t>(p.M * p.N)), one(static_cast<size_t>(p.N)), pieces(static_cast<size_t>(p.N));
    ASSERT_EQ(host->matmul_f32(tb, p.M, 0, p.N, p.K, p.a.data(), p.K, p.b.data(), ldb, all.data(), p.N), SY_OK);
    for (int64_t m = 0; m < p.M; ++m) {
      const float* row = p.a.data() + m * p.K;
      ASSERT_EQ(host->matmul_f32(tb, 1, 0, p.N, p.K, row, p.K, p.b.data(), ldb, one.data(), p.N), SY_OK);
      EXPECT_TRUE(same_bits(one.data(), all.data() + m * p.N, p.N)) << "tb " << tb << ", row " << m;
      // The columns in three uneven pieces, as threads split them.
      for (auto [n0, n1] : {std::pair<int64_t, int64_t>{0, 33}, {33, 421}, {421, 700}})
        ASSERT_EQ(host->matmul_f32(tb, 1, n0, n1, p.K, row, p.K, p.b.data(), ldb, pieces.data(), p.N), SY_OK);
      EXPECT_TRUE(same_bits(pieces.data(), one.data(), p.N)) << "tb " << tb << ", row " << m;
      for (int64_t n = 0; n < p.N; n += 37) {  // and it is the product
        double ref = 0;
        for (int64_t k = 0; k < p.K; ++k) ref += static_cast<double>(row[k]) * p.b[static_cast<size_t>(tb ? n * p.K + k : k * p.N + n)];
        EXPECT_NEAR(one[static_cast<size_t>(n)], ref, 1e-4 * (1 + std::abs(ref))) << "tb " << tb << ", row " << m << ", column " << n;
      }
    }
  }
}

TEST(HostMatMul, SizesThatDoNotFitAreRefusedNamingTheField) {
  const sy_host_api* host = host_api();
  Product p(4, 32, 64, 3u);
  std::vector<float> c(static_cast<size_t>(4 * 64));
  auto refused = [&](sy_status st, const char* what) {
    EXPECT_EQ(st, SY_INVALID_ARGUMENT) << what;
    EXPECT_NE(std::string(host->last_error()).find(what), std::string::npos) << host->last_error();
  };
  refused(host->matmul_f32(0, 4, 0, 64, 32, p.a.data(), 32, p.b.data(), 63, c.data(), 64), "ldb 63");
  refused(host->matmul_f32(1, 4, 0, 64, 32, p.a.data(), 32, p.b.data(), 31, c.data(), 64), "ldb 31");
  refused(host->matmul_f32(0, 4, 0, 64, 32, p.a.data(), 16, p.b.data(), 64, c.data(), 64), "lda 16");
  refused(host->matmul_f32(0, 4, 0, 64, 32, p.a.data(), 32, p.b.data(), 64, c.data(), 60), "ldc 60");
  refused(host->matmul_f32(0, 4, 40, 20, 32, p.a.data(), 32, p.b.data(), 64, c.data(), 64), "column range 40..20");
  refused(host->matmul_f32(0, 4, 0, 64, 32, nullptr, 32, p.b.data(), 64, c.data(), 64), "null matrix");
  refused(host->matmul_f32(0, -1, 0, 64, 32, p.a.data(), 32, p.b.data(), 64, c.data(), 64), "negative size");
  // Nothing to compute is not an error, and K = 0 is a product of zeros.
  EXPECT_EQ(host->matmul_f32(0, 0, 0, 64, 32, nullptr, 32, nullptr, 64, nullptr, 64), SY_OK);
  c.assign(c.size(), 1.f);
  EXPECT_EQ(host->matmul_f32(0, 4, 0, 64, 0, p.a.data(), 0, p.b.data(), 64, c.data(), 64), SY_OK);
  for (float v : c) EXPECT_EQ(v, 0.f);
}

}  // namespace
}  // namespace sy
