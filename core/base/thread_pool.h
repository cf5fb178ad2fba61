// A fixed pool of worker threads with one primitive, parallel_for. Kernels
// (built-in and plugin) use it instead of spawning their own threads, so the
// process never runs more compute threads than cores.
//
// A decode step is ~100 short parallel_for calls: waking a sleeping worker
// through a condition variable costs tens of microseconds each time. Workers
// (and the caller waiting for them) therefore spin for a short while before
// sleeping, like OpenMP's active wait policy and llama.cpp's thread pool, and
// a call that finds them spinning takes no lock and makes no system call:
// the job is published by one atomic increment, and the mutex and condition
// variables are touched only by a thread that is about to sleep or that must
// wake one (a Dekker-style handshake on the sleeper counts).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace sy {

class ThreadPool {
 public:
  // threads == 0: one per hardware core. The calling thread takes part in
  // every parallel_for, so a pool of N threads starts N-1 workers.
  explicit ThreadPool(int threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) over [0, n) split into at most size() contiguous
  // ranges of at least `grain` items. Runs inline when one range suffices.
  // Not re-entrant: a nested call from inside fn runs inline.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop(int index);
  void publish();        // makes the next generation visible, waking sleepers
  void wait_for_workers();

  std::vector<std::thread> workers_;
  // The job of the current generation: written by the caller before the
  // generation's increment (release), read by workers after they see it
  // (acquire); not rewritten until every worker has reported (pending_).
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int job_chunks_ = 0;
  bool stop_ = false;
  // Each on its own cache line: workers poll generation_ while the caller
  // counts pending_ down, and neither should invalidate the other's line.
  alignas(64) std::atomic<uint64_t> generation_{0};
  alignas(64) std::atomic<int> pending_{0};
  alignas(64) std::atomic<int> sleeping_workers_{0};
  std::atomic<bool> caller_sleeping_{false};
  std::mutex mu_;  // guards only the sleeps and wake-ups below
  std::condition_variable work_cv_, done_cv_;
  std::mutex call_mu_;  // one parallel_for at a time
};

}  // namespace sy
