// Where the threads meet: submitters and cancellers on any thread, the
// engine thread taking what arrived. Everything else in the step engine is
// the engine thread's alone.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/step/sequence.h"

namespace sy {

class RequestQueue {
 public:
  uint64_t new_id() { return next_id_++; }

  // Queues s (taking it only then). Throws sy::Error (on the submitting thread) when the engine is
  // stopping, out of service, or holds max_queue requests (0: no limit).
  void push(std::unique_ptr<Sequence>&& s, int64_t max_queue);
  void cancel(uint64_t id);
  // Every later push is refused with `why` (a scheduler out of service).
  void refuse(const std::string& why);
  // A request left the engine (for whatever reason): room under max_queue.
  void done();

  struct Arrivals {
    std::vector<std::unique_ptr<Sequence>> requests;
    std::vector<uint64_t> cancels;
    bool stop = false;
  };
  // What arrived since the last call; with `idle` waits for something first.
  Arrivals take(bool idle);
  // Waits up to a millisecond for news (a batching window is open).
  void wait_briefly();
  void stop();
  // After stop: the requests that never reached the engine thread.
  std::vector<std::unique_ptr<Sequence>> drain();

 private:
  bool has_news() const { return stop_ || !incoming_.empty() || !cancels_.empty(); }

  std::mutex mu_;  // guards everything below but next_id_
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Sequence>> incoming_;
  std::vector<uint64_t> cancels_;
  bool stop_ = false;
  std::string out_of_service_;  // why push refuses every request ("" : in service)
  int64_t in_flight_ = 0;       // queued or running
  std::atomic<uint64_t> next_id_{1};
};

}  // namespace sy
