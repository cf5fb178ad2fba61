#include "engine/step/request_queue.h"

#include <chrono>

#include "base/error.h"

namespace sy {

void RequestQueue::push(std::unique_ptr<Sequence>&& s, int64_t max_queue) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    SY_CHECK(!stop_, "the engine is shutting down");
    SY_CHECK_KIND(out_of_service_.empty(), ErrorKind::PluginFailure, out_of_service_);
    SY_CHECK(max_queue <= 0 || in_flight_ < max_queue,
             "the engine has " << in_flight_ << " requests queued or running, the limit (limits.max_queue) is " << max_queue);
    ++in_flight_;
    incoming_.push_back(std::move(s));
  }
  cv_.notify_all();
}

void RequestQueue::cancel(uint64_t id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancels_.push_back(id);
  }
  cv_.notify_all();
}

void RequestQueue::refuse(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  out_of_service_ = why;
}

void RequestQueue::done() {
  std::lock_guard<std::mutex> lock(mu_);
  --in_flight_;
}

RequestQueue::Arrivals RequestQueue::take(bool idle) {
  std::unique_lock<std::mutex> lock(mu_);
  if (idle) cv_.wait(lock, [&] { return has_news(); });
  Arrivals a;
  a.stop = stop_;
  if (a.stop) return a;
  while (!incoming_.empty()) {
    a.requests.push_back(std::move(incoming_.front()));
    incoming_.pop_front();
  }
  a.cancels.swap(cancels_);
  return a;
}

void RequestQueue::wait_briefly() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::milliseconds(1), [&] { return has_news(); });
}

void RequestQueue::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
}

std::vector<std::unique_ptr<Sequence>> RequestQueue::drain() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::unique_ptr<Sequence>> out;
  for (auto& s : incoming_) out.push_back(std::move(s));
  incoming_.clear();
  return out;
}

}  // namespace sy
