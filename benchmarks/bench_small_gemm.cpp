// fp32 products as decode (M = 1), speculative verification (M = k + 1),
// batches and prompts (up to 256 rows) run them: the small-GEMM kernel per
// instruction-set path against OpenBLAS (sgemv at M = 1, sgemm above), on
// weights read from memory, as a model's are (each run takes the next of
// enough copies to overflow the last-level cache: a repeated matrix sits in
// an L3 of hundreds of MB on some servers and reads faster than memory),
// split over two threads as the engine's pool does (--threads 1: one). The questions it
// answers: does verifying k drafts cost about one decode step, and from
// how many rows do the register tiles beat the one-pass form and OpenBLAS?
// Prints a table (time, weight GB/s against the measured read bandwidth, and
// the cost relative to M = 1), writes JSON (--out).
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "base/tensor.h"
#include "bench/bench_runner.h"
#include "kernel_timing.h"
#include "kernels/small_gemm.h"

extern "C" void openblas_set_num_threads(int);

namespace {
int g_threads = 2;
// Column split as the engine's: halves at a multiple of 32 (or all on one thread, --threads 1).
void two_threads(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (g_threads == 1) return fn(0, n);
  sy::bench::two_threads(n, 0, fn, 32);
}
using sy::bench::best_seconds;

}  // namespace

int main(int argc, char** argv) {
  std::string out = "bench-small-gemm.json";
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) g_threads = std::atoi(argv[++i]) == 1 ? 1 : 2;
  openblas_set_num_threads(1);
  const double bw = sy::measure_read_bandwidth_gbs(g_threads);
  std::printf("few-row fp32 products, %d thread(s); measured read bandwidth %.1f GB/s; engine path: %s\n", g_threads, bw, sy::small_gemm_path());
  // A 110m-shaped layer's widest matrices and a vocabulary projection.
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{768, 2048}, {2048, 768}, {768, 32000}, {2048, 5632}};
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.f, 0.02f);
  nlohmann::json rows = nlohmann::json::array();
  std::printf("%-12s %-9s %3s %10s %8s %8s %10s\n", "K x N", "path", "M", "us", "GB/s", "of bw", "x M=1");
  for (auto [K, N] : shapes) {
    const int64_t copies = std::max<int64_t>(1, sy::bench::weight_rotation_bytes() / (K * N * 4));
    // On 2 MB pages, as the engine holds weights (host_alloc): on 4 KB
    // pages the TLB, not the kernel, would set the few-row rates.
    std::unique_ptr<float, decltype(&std::free)> weights(static_cast<float*>(sy::host_alloc(copies * K * N * 4, 64)), &std::free);
    std::vector<float> x(static_cast<size_t>(256 * K)), y(static_cast<size_t>(256 * N));
    for (int64_t i = 0; i < K * N; ++i) weights.get()[i] = d(rng);
    for (int64_t c = 1; c < copies; ++c) std::copy_n(weights.get(), K * N, weights.get() + c * K * N);
    for (auto& v : x) v = d(rng);
    // `w.data()`: the next copy, one per product (taken once, before the threads split it).
    struct Rotation {
      const float* all;
      int64_t size, copies, next = 0;
      const float* data() { return all + (next++ % copies) * size; }
    } w{weights.get(), K * N, copies};
    std::vector<std::pair<std::string, std::function<void(int64_t)>>> paths;
    paths.emplace_back("openblas", [&](int64_t M) {
      const float* wp = w.data();
      two_threads(N, [&](int64_t n0, int64_t n1) {
        if (M == 1)
          cblas_sgemv(CblasRowMajor, CblasTrans, static_cast<int>(K), static_cast<int>(n1 - n0), 1.f, wp + n0, static_cast<int>(N),
                      x.data(), 1, 0.f, y.data() + n0, 1);
        else
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(M), static_cast<int>(n1 - n0), static_cast<int>(K), 1.f,
                      x.data(), static_cast<int>(K), wp + n0, static_cast<int>(N), 0.f, y.data() + n0, static_cast<int>(N));
      });
    });
    for (const char* name : {"generic", "avx2", "avx512"})
      if (sy::SmallGemmFn fn = sy::small_gemm_build(name))
        paths.emplace_back(name, [&, fn](int64_t M) {
          const float* wp = w.data();
          two_threads(N, [&](int64_t n0, int64_t n1) { fn(false, M, n0, n1, K, 1.f, x.data(), K, wp, N, 0.f, y.data(), N); });
        });
    // The same products with the weight stored transposed ([N, K], a dot
    // product per output): each thread streams whole contiguous rows.
    for (const char* name : {"avx2", "avx512"})
      if (sy::SmallGemmFn fn = sy::small_gemm_build(name))
        paths.emplace_back(std::string(name) + "-nt", [&, fn](int64_t M) {
          const float* wp = w.data();
          two_threads(N, [&](int64_t n0, int64_t n1) { fn(true, M, n0, n1, K, 1.f, x.data(), K, wp, K, 0.f, y.data(), N); });
        });
    const double mb = static_cast<double>(K * N) * 4 / 1e6;
    for (auto& [name, run] : paths) {
      double one = 0;
      for (int64_t M : {1, 2, 3, 4, 6, 8, 12, 16, 32, 64, 128, 256}) {
        // Past 16 rows only the [K, N] paths that take them in one pass: OpenBLAS's sgemm and the register tiles.
        if (M > 16 && (name == "generic" || name.ends_with("-nt"))) continue;
        const double s = best_seconds([&] { run(M); }, M > 16 ? 5 : 15);
        if (M == 1) one = s;
        const double gbs = mb / 1e3 / s;
        char shape[32];
        std::snprintf(shape, sizeof shape, "%lldx%lld", static_cast<long long>(K), static_cast<long long>(N));
        std::printf("%-12s %-9s %3lld %10.1f %8.1f %7.0f%% %10.2f\n", shape, name.c_str(), static_cast<long long>(M), s * 1e6, gbs,
                    100 * gbs / bw, s / one);
        rows.push_back({{"K", K}, {"N", N}, {"path", name}, {"M", M}, {"us", s * 1e6}, {"weight_gbs", gbs}, {"bandwidth_fraction", gbs / bw},
                        {"relative_to_m1", s / one}});
      }
    }
  }
  std::ofstream(out) << nlohmann::json{{"threads", g_threads}, {"read_bandwidth_gbs", bw}, {"engine_path", sy::small_gemm_path()}, {"rows", rows}}.dump(2) << "\n";
  return 0;
}
