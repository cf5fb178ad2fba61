// Run-time choice of the small-GEMM build: AVX-512, AVX2 + FMA, or the
// generic one (multiply then add) on any other CPU.
#include "kernels/small_gemm.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

namespace sy {

namespace small_gemm_generic {
#include "kernels/small_gemm_impl.inc"
}  // namespace small_gemm_generic

#if defined(__x86_64__) && defined(SY_SMALL_GEMM_X86)
namespace small_gemm_avx2 {
void small_gemm(bool, int64_t, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t, float, float*, int64_t);
}
namespace small_gemm_avx512 {
void small_gemm(bool, int64_t, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t, float, float*, int64_t);
}
#endif

namespace {

struct Path {
  SmallGemmFn fn;
  const char* name;
};

Path choose() {
  const char* forced = std::getenv("SWITCHYARD_GEMM_ISA");
  if (forced && *forced) {
    SmallGemmFn fn = small_gemm_build(forced);
    if (!fn) throw std::invalid_argument(std::string("SWITCHYARD_GEMM_ISA=") + forced +
                                         ": not a path this CPU has (known paths: avx512, avx2, generic)");
    return {fn, std::strcmp(forced, "avx512") == 0 ? "avx512" : std::strcmp(forced, "avx2") == 0 ? "avx2" : "generic"};
  }
  for (const char* name : {"avx512", "avx2"})
    if (SmallGemmFn fn = small_gemm_build(name)) return {fn, name};
  return {small_gemm_generic::small_gemm, "generic"};
}

const Path& path() {
  static const Path p = choose();
  return p;
}

}  // namespace

SmallGemmFn small_gemm_build(const char* name) {
  if (std::strcmp(name, "generic") == 0) return small_gemm_generic::small_gemm;
#if defined(__x86_64__) && defined(SY_SMALL_GEMM_X86)
  __builtin_cpu_init();
  if (std::strcmp(name, "avx512") == 0 && __builtin_cpu_supports("avx512f")) return small_gemm_avx512::small_gemm;
  if (std::strcmp(name, "avx2") == 0 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return small_gemm_avx2::small_gemm;
#endif
  return nullptr;
}

void small_gemm(bool tb, int64_t M, int64_t n0, int64_t n1, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
                int64_t ldb, float beta, float* C, int64_t ldc) {
  path().fn(tb, M, n0, n1, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

const char* small_gemm_path() { return path().name; }

int64_t small_gemm_max_rows(bool tb) {
  static const bool tiles = std::strcmp(path().name, "generic") != 0;  // asked per product: decided once
  return tb || !tiles ? kSmallGemmMaxRows : std::numeric_limits<int64_t>::max();
}

}  // namespace sy
