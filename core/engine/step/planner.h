// Who runs this step with how many tokens: the built-in FCFS continuous
// batcher (running sequences first, then admissions, chunked prefill within
// the token budget) or a scheduler plugin, whose plan is checked (a plan
// that breaks the contract is a plugin failure). Owns the waiting and
// running lists, admission with prefix reuse and KV allocation, and
// preemption by recompute when the cache is full.
#pragma once
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "engine/step/request_queue.h"
#include "engine/step/sequence.h"
#include "engine/step/step_counters.h"
#include "engine/step/step_options.h"
#include "engine/step/step_plan.h"
#include "plugin_host/components.h"

namespace sy {

class StepPlanner {
 public:
  // `scheduler` may be null: the built-in batcher.
  StepPlanner(PluginCacheManager& cache, PluginScheduler* scheduler, const StepEngineOptions& options, int32_t block_size,
              SequenceEnds& ends, RequestQueue& queue, StepCounters& counters, std::function<double()> now_ms);

  void add(Sequence* s);     // a new arrival joins the waiting list
  void remove(Sequence* s);  // a finished sequence leaves both lists
  bool idle() const { return waiting_.empty() && running_.empty(); }
  const std::deque<Sequence*>& waiting() const { return waiting_; }
  const std::vector<Sequence*>& running() const { return running_; }

  // Fails requests the whole cache cannot hold, then asks the scheduler
  // plugin (contained: a failed plan runs nothing this step) or the
  // built-in batcher. After max_plugin_failures failed plans in a row the
  // scheduler is out of service (out_of_service() says why) unless the
  // manifest lets the built-in batcher take over.
  StepPlan plan();
  const std::string& out_of_service() const { return scheduler_out_; }
  // The cache manager failed to release a sequence (its blocks may be
  // lost): named when a later request does not fit.
  void note_cache_failure(const std::string& why) { cache_failed_ = why; }

 private:
  void fail_requests_larger_than_the_cache();
  StepPlan plan_builtin();
  StepPlan plan_with_plugin();
  void admit(Sequence* s, int32_t tokens, StepPlan& plan);
  void preempt(Sequence* s);

  PluginCacheManager& cache_;
  PluginScheduler* scheduler_;  // null: the built-in batcher (also after a fallback)
  const StepEngineOptions& options_;
  const int32_t block_size_;
  SequenceEnds& ends_;
  RequestQueue& queue_;  // told to refuse new requests when the scheduler is out of service
  StepCounters& counters_;
  std::function<double()> now_ms_;
  std::deque<Sequence*> waiting_;    // oldest first; preempted ones at the front
  std::vector<Sequence*> running_;   // holding KV, in admission order
  int32_t scheduler_failures_ = 0;   // consecutive failed plans
  std::string scheduler_out_;        // why the scheduler is out of service ("" : in service)
  std::string cache_failed_;
};

}  // namespace sy
