// Memory-read bandwidth of this machine, measured the way a decode step
// reads weights: `threads` threads each streaming their share of a buffer
// far larger than the caches, summing it so the loads cannot be elided.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace sy::bench {

inline double measure_read_bandwidth_gbs(int threads, size_t bytes = size_t{1} << 30, int repeats = 5) {
  std::vector<float> buf(bytes / sizeof(float), 1.0f);
  const size_t n = buf.size();
  double best = 0;
  volatile float sink = 0;
  for (int r = 0; r < repeats; ++r) {
    std::vector<float> sums(static_cast<size_t>(threads));
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        const float* p = buf.data() + n / threads * t;
        const size_t len = n / threads;
        float acc[16] = {};
        for (size_t i = 0; i + 16 <= len; i += 16)
          for (int j = 0; j < 16; ++j) acc[j] += p[i + j];
        float s = 0;
        for (float a : acc) s += a;
        sums[static_cast<size_t>(t)] = s;
      });
    for (auto& th : pool) th.join();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(bytes) / s / 1e9);
    for (float v : sums) sink = sink + v;
  }
  return best;
}

}  // namespace sy::bench
