#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "base/thread_pool.h"

namespace sy {
namespace {

TEST(ThreadPool, CoversTheRangeExactlyOnce) {
  ThreadPool pool(4);
  for (int64_t n : {1, 3, 4, 1000, 12345}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    pool.parallel_for(n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  }
}

TEST(ThreadPool, NestedCallsRunInline) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  pool.parallel_for(8, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) pool.parallel_for(10, 1, [&](int64_t x, int64_t y) { total += y - x; });
  });
  EXPECT_EQ(total.load(), 80);
}

}  // namespace
}  // namespace sy

namespace sy {
namespace {

// Workers spin for a while after each job, then sleep: back-to-back jobs hit
// the spinning path, jobs after a pause the sleeping one. Every item must be
// covered exactly once either way (and TSan sees the hand-offs in CI).
TEST(ThreadPool, SpinningAndSleepingHandOffsBothCoverEveryItem) {
  ThreadPool pool(2);
  std::vector<std::atomic<int>> hits(1000);
  for (int round = 0; round < 300; ++round) {
    if (round % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // past the spin window
    pool.parallel_for(1000, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1, std::memory_order_relaxed);
    });
  }
  for (auto& h : hits) ASSERT_EQ(h.load(), 300);
}

}  // namespace
}  // namespace sy

namespace sy {
namespace {

// A worker's range that outlasts the caller's spin window makes the caller
// sleep on the count of pending workers: the last worker must wake it (a
// lost wake-up hangs this test until ctest's timeout). Workers sleeping
// between the rounds exercise the other handshake.
TEST(ThreadPool, ACallerSleepingOnASlowWorkerIsWokenEveryTime) {
  ThreadPool pool(3);
  std::atomic<int> ranges{0};
  for (int round = 0; round < 60; ++round) {
    if (round % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(400));  // workers go to sleep
    pool.parallel_for(3, 1, [&](int64_t b, int64_t) {
      if (b != 0) std::this_thread::sleep_for(std::chrono::microseconds(300 * b));
      ranges.fetch_add(1, std::memory_order_relaxed);
    });
    ASSERT_EQ(ranges.load(), 3 * (round + 1)) << "round " << round;
  }
}

}  // namespace
}  // namespace sy
