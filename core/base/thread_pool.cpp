#include "base/thread_pool.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SY_CPU_RELAX() _mm_pause()
#else
#define SY_CPU_RELAX() ((void)0)
#endif

namespace sy {

namespace {
thread_local bool t_inside_pool = false;

// Spins until done() or ~200 us have passed; true when done() held.
template <typename Done>
bool spin_until(Done&& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
  for (int i = 0;; ++i) {
    if (done()) return true;
    SY_CPU_RELAX();
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > deadline) return false;
  }
}
}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_ = true;
  publish();
  for (auto& t : workers_) t.join();
}

// The handshake with a worker going to sleep: it counts itself in
// sleeping_workers_ and then re-checks generation_ under mu_; here the
// generation moves first and the count is read after. Sequentially
// consistent on both sides, so either the worker sees the new generation or
// this sees the sleeper and wakes it under the mutex it waits with.
void ThreadPool::publish() {
  generation_.fetch_add(1, std::memory_order_seq_cst);
  if (sleeping_workers_.load(std::memory_order_seq_cst) > 0) {
    { std::lock_guard<std::mutex> lock(mu_); }
    work_cv_.notify_all();
  }
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  t_inside_pool = true;
  for (;;) {
    if (!spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; })) {
      std::unique_lock<std::mutex> lock(mu_);
      sleeping_workers_.fetch_add(1, std::memory_order_seq_cst);
      work_cv_.wait(lock, [&] { return generation_.load(std::memory_order_seq_cst) != seen; });
      sleeping_workers_.fetch_sub(1, std::memory_order_relaxed);
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_) return;
    if (index < job_chunks_) {
      const int64_t begin = job_n_ * index / job_chunks_, end = job_n_ * (index + 1) / job_chunks_;
      (*job_)(begin, end);
    }
    // The same handshake as publish(), with the caller waiting for the count.
    if (pending_.fetch_sub(1, std::memory_order_seq_cst) == 1 && caller_sleeping_.load(std::memory_order_seq_cst)) {
      { std::lock_guard<std::mutex> lock(mu_); }
      done_cv_.notify_one();
    }
  }
}

void ThreadPool::wait_for_workers() {
  if (spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; })) return;
  std::unique_lock<std::mutex> lock(mu_);
  caller_sleeping_.store(true, std::memory_order_seq_cst);
  done_cv_.wait(lock, [&] { return pending_.load(std::memory_order_seq_cst) == 0; });
  caller_sleeping_.store(false, std::memory_order_relaxed);
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int chunks = static_cast<int>(std::min<int64_t>(size(), (n + grain - 1) / grain));
  if (chunks <= 1 || t_inside_pool || workers_.empty()) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mu_);
  job_ = &fn;
  job_n_ = n;
  job_chunks_ = chunks;
  pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  publish();
  t_inside_pool = true;
  fn(0, n / chunks);  // chunk 0 on the calling thread
  t_inside_pool = false;
  wait_for_workers();
  job_ = nullptr;
}

}  // namespace sy
