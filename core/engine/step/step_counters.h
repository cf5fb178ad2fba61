// The step engine's counters (engine/step_metrics.h) and, when asked, the
// plan of every step. Written by the engine thread, read by any thread.
#pragma once
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/step_metrics.h"

namespace sy {

// One step's plan, for tests and traces: which sequences ran how many tokens.
struct StepRecord {
  struct Entry {
    uint64_t request;
    int32_t tokens;
    bool prefill;  // a prompt chunk (else a decode token)
  };
  std::vector<Entry> entries;
};

class StepCounters {
 public:
  // f(StepEngineMetrics&) under the lock.
  template <typename F>
  void update(F&& f) {
    std::lock_guard<std::mutex> lock(mu_);
    f(metrics_);
  }
  StepEngineMetrics snapshot() const {
    std::lock_guard<std::mutex> lock(mu_);
    return metrics_;
  }
  void plugin_failure(const std::string& msg) {
    update([&](StepEngineMetrics& m) {
      ++m.plugin_failures;
      m.last_plugin_failure = msg;
    });
  }
  void record_steps(bool on) {
    std::lock_guard<std::mutex> lock(mu_);
    recording_ = on;
  }
  void record(StepRecord r) {
    std::lock_guard<std::mutex> lock(mu_);
    if (recording_) records_.push_back(std::move(r));
  }
  std::vector<StepRecord> records() const {
    std::lock_guard<std::mutex> lock(mu_);
    return records_;
  }

 private:
  mutable std::mutex mu_;  // guards all three: the engine thread writes, callers read
  StepEngineMetrics metrics_;
  bool recording_ = false;
  std::vector<StepRecord> records_;
};

}  // namespace sy
