// The quantized matmul kernels alone, per path and scheme: GEMV (one token)
// and GEMM (prefill) time, and the weight bytes streamed per second against
// the machine's measured read bandwidth. As in a decode step, the weights
// come from memory, not the caches: the GEMV cycles through copies of the
// matrix that together exceed the last-level cache twice over. Prints a table, writes JSON (--out).
//   bench_qmatmul [--k 4096] [--n 4096] [--threads 1|2] [--schemes int8,int4:32,...] [--paths avx512vnni,...] [--out F]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "bench/bench_runner.h"
#include "kernel_timing.h"
#include "qmatmul.h"

using namespace sy_quant;

using sy::bench::best_seconds;

namespace {
// Halves, as the engine's pool on a 2-core machine (the kernels' ParallelFor).
void two_threads(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) { sy::bench::two_threads(n, grain, fn); }
void one_thread(int64_t n, int64_t, const std::function<void(int64_t, int64_t)>& fn) { fn(0, n); }
}  // namespace

int main(int argc, char** argv) {
  int64_t K = 4096, N = 4096, M_prefill = 128;
  int threads = 2;
  std::string out = "bench-qmatmul.json", schemes = "int8,int4:32,int4-asym:32,int4:128", paths;  // paths: empty = every one this CPU has
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--schemes") && i + 1 < argc) schemes = argv[++i];
    if (!std::strcmp(argv[i], "--paths") && i + 1 < argc) paths = argv[++i];
    if (!std::strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
    if (!std::strcmp(argv[i], "--k") && i + 1 < argc) K = std::atoll(argv[++i]);
    if (!std::strcmp(argv[i], "--n") && i + 1 < argc) N = std::atoll(argv[++i]);
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads = std::atoi(argv[++i]);
  }
  const sy_quant::ParallelFor pf = threads == 1 ? sy_quant::ParallelFor(one_thread) : sy_quant::ParallelFor(two_threads);
  threads = threads == 1 ? 1 : 2;
  const double bw = sy::measure_read_bandwidth_gbs(threads);
  std::printf("quantized matmul kernels, W [%lld x %lld], %d thread(s); measured read bandwidth %.1f GB/s\n", (long long)K, (long long)N,
              threads, bw);
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.f, 0.02f);
  std::vector<float> w(static_cast<size_t>(K * N)), x(static_cast<size_t>(M_prefill * K)), y(static_cast<size_t>(M_prefill * N));
  for (auto& v : w) v = d(rng);
  for (auto& v : x) v = d(rng) * 50;
  nlohmann::json rows = nlohmann::json::array();
  std::printf("%-14s %-11s %10s %12s %10s %8s %13s %14s\n", "scheme", "path", "MB read", "GEMV us", "GB/s", "of bw", "batch8 tok/s",
              "GEMM128 tok/s");
  const auto listed = [](const std::string& list, const std::string& name) { return ("," + list + ",").find("," + name + ",") != std::string::npos; };
  for (size_t from = 0; from <= schemes.size();) {
    const size_t comma = std::min(schemes.find(',', from), schemes.size());
    const std::string scheme_name = schemes.substr(from, comma - from);
    from = comma + 1;
    const char* scheme = scheme_name.c_str();
    QuantSpec spec = parse_scheme(scheme, 32);
    const QuantizedWeight q = quantize(w.data(), K, N, spec);
    for (Isa isa : kAllIsas) {
      if (!isa_available(isa) || (!paths.empty() && !listed(paths, isa_name(isa)))) continue;
      PackedMatrix p = pack(q, isa);  // the path's own layout
      // Copies enough to leave the caches: each GEMV reads the next one.
      std::vector<PackedMatrix> copies(static_cast<size_t>(std::max<int64_t>(1, sy::bench::weight_rotation_bytes() / p.weight_bytes() + 1)), p);
      const int reps = isa == Isa::Scalar ? 3 : 30;
      // A sweep over all the copies, per matrix; best of a few sweeps.
      const auto sweep = [&] {
        for (const auto& c : copies) qmatmul(c, x.data(), 1, nullptr, y.data(), isa, pf);
      };
      const double gemv = best_seconds(sweep, std::max(1, reps / 10)) / static_cast<double>(copies.size());
      // Eight tokens against weights read from memory (batched decode,
      // a speculative verification): where the tile's arithmetic and the
      // weight stream meet.
      const auto sweep8 = [&] {
        for (const auto& c : copies) qmatmul(c, x.data(), 8, nullptr, y.data(), isa, pf);
      };
      const double batch8 = best_seconds(sweep8, std::max(1, reps / 10)) / static_cast<double>(copies.size());
      double gemm = best_seconds([&] { qmatmul(p, x.data(), M_prefill, nullptr, y.data(), isa, pf); }, 3);
      const double mb = static_cast<double>(p.weight_bytes()) / 1e6, gbs = mb / 1e3 / gemv;
      std::printf("%-14s %-11s %10.1f %12.1f %10.1f %7.0f%% %13.0f %14.0f\n", scheme, isa_name(isa), mb, gemv * 1e6, gbs, 100 * gbs / bw,
                  8 / batch8, M_prefill / gemm);
      rows.push_back({{"scheme", scheme}, {"path", isa_name(isa)}, {"weight_mb", mb}, {"gemv_us", gemv * 1e6}, {"gemv_gbs", gbs},
                      {"bandwidth_fraction", gbs / bw}, {"batch8_tokens_per_s", 8 / batch8}, {"gemm_tokens_per_s", M_prefill / gemm}});
    }
  }
  std::ofstream(out) << nlohmann::json{{"K", K}, {"N", N}, {"read_bandwidth_gbs", bw}, {"rows", rows}}.dump(2) << "\n";
  return 0;
}
