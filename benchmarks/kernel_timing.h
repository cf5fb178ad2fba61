// Timing helpers shared by the kernel benchmarks (bench_qmatmul,
// bench_small_gemm): the engine's two-thread split, and best-of-N timing.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace sy::bench {

// Two worker threads, as the engine's pool on a 2-core machine: [0, n) split
// in halves at a multiple of `align` (work under `grain` runs on one thread).
inline void two_threads(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn, int64_t align = 1) {
  if (n <= grain) return fn(0, n);
  const int64_t mid = n / 2 / align * align;
  std::thread t([&] { fn(0, mid); });
  fn(mid, n);
  t.join();
}

// Best of reps: a shared machine's noise only ever adds time.
template <typename F>
double best_seconds(F&& f, int reps) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return *std::min_element(t.begin(), t.end());
}

}  // namespace sy::bench
