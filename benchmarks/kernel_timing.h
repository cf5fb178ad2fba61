// Timing helpers shared by the kernel benchmarks (bench_qmatmul,
// bench_small_gemm): the engine's two-thread split, best-of-N timing, and
// how many bytes of weight copies put a product's weights in memory.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>
#include <unistd.h>
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

// Bytes of weight copies a kernel benchmark cycles through so that every
// product reads its matrix from memory, as a decode step does: twice the
// last-level cache (at least 256 MB, at most 2 GB). A server's L3 may hold
// hundreds of MB (480 MB on a Sapphire Rapids VM), where one repeated
// matrix reads at 1.5x the memory rate.
inline int64_t weight_rotation_bytes() {
  long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (l3 <= 0) l3 = 64L << 20;
  return std::clamp<int64_t>(2 * static_cast<int64_t>(l3), int64_t{256} << 20, int64_t{2} << 30);
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
