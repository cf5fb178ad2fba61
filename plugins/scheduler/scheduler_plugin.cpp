// Batching schedulers behind the scheduler ABI. Each step the engine hands
// over the waiting and running sequences, the free KV blocks and the token
// budget; a scheduler answers who runs with how many tokens (or who is
// preempted).
//
//   static      wait for a full batch (batch_size, or max_wait_ms for the
//               oldest), then run that batch to completion
//   dynamic     collect for a time window (window_ms) or up to max_batch,
//               then run that batch to completion
//   continuous  per-step admission and retirement (Orca / vLLM): running
//               sequences first, then admissions in FCFS (or priority) order
//               within the token budget, long prompts split into chunks of at
//               most chunk_size so decode steps keep flowing, preemption of
//               the newest (or lowest-priority) running sequence when the
//               cache cannot hold the next tokens
//   slo         continuous batching held to a TPOT target: decodes first,
//               prompt chunks sized by a step-cost model measured at run
//               time (slo_scheduler.h)
#include <switchyard/plugin.hpp>

#include "slo_scheduler.h"

#include <algorithm>
#include <vector>

namespace {

using sy::plugin::Options;
using Decisions = std::vector<sy_sched_decision>;

int32_t remaining(const sy_sched_seq& s) { return s.remaining_tokens; }

// Batch-to-completion scheduling (static and dynamic differ in when a batch
// starts: how many requests it waits for, and for how long).
class BatchToCompletion {
 public:
  BatchToCompletion(int64_t size, double wait_s) : size_(size), wait_s_(wait_s) {
    if (size_ <= 0) throw sy::plugin::Error("the batch size must be positive", SY_INVALID_ARGUMENT);
  }

  Decisions plan(const sy_sched_input& in) const {
    Decisions out;
    int32_t budget = in.token_budget;
    auto run = [&](const sy_sched_seq& s) {
      int32_t t = std::min(budget, remaining(s));
      out.push_back({s.id, SY_SCHED_RUN, t});
      budget -= t;
    };
    if (in.num_running > 0) {
      // The current batch runs to completion; nobody joins it. Preempted
      // members of the batch come back first.
      for (int32_t i = 0; i < in.num_running && budget > 0; ++i) run(in.running[i]);
      for (int32_t i = 0; i < in.num_waiting && budget > 0; ++i)
        if (in.waiting[i].state == SY_SEQ_PREEMPTED) run(in.waiting[i]);
      return out;
    }
    if (in.num_waiting == 0) return out;
    double oldest = in.waiting[0].arrival_time;
    for (int32_t i = 1; i < in.num_waiting; ++i) oldest = std::min(oldest, in.waiting[i].arrival_time);
    const bool full = in.num_waiting >= size_, waited = in.now - oldest >= wait_s_;
    if (!full && !waited) return out;  // keep collecting
    const auto limit = static_cast<int32_t>(std::min<int64_t>({size_, in.max_seqs, in.num_waiting}));
    for (int32_t i = 0; i < limit && budget > 0; ++i) run(in.waiting[i]);
    return out;
  }

 private:
  int64_t size_;
  double wait_s_;  // the oldest waiting request triggers a partial batch after this long
};

struct StaticBatch : BatchToCompletion {
  explicit StaticBatch(const Options& o)
      : BatchToCompletion(o.get_int("batch_size"), static_cast<double>(o.get_int("max_wait_ms")) / 1000.0) {}
};
struct DynamicBatch : BatchToCompletion {
  explicit DynamicBatch(const Options& o)
      : BatchToCompletion(o.get_int("max_batch"), static_cast<double>(o.get_int("window_ms")) / 1000.0) {}
};

class Continuous {
 public:
  explicit Continuous(const Options& o) : chunk_size_(o.get_int("chunk_size")), priorities_(o.get_bool("priorities")) {
    if (chunk_size_ <= 0) throw sy::plugin::Error("chunk_size must be positive", SY_INVALID_ARGUMENT);
  }

  Decisions plan(const sy_sched_input& in) const {
    auto order = [&](const sy_sched_seq& a, const sy_sched_seq& b) {
      if (priorities_ && a.priority != b.priority) return a.priority < b.priority;
      return a.arrival_time < b.arrival_time;
    };
    std::vector<sy_sched_seq> running(in.running, in.running + in.num_running);
    std::vector<sy_sched_seq> waiting(in.waiting, in.waiting + in.num_waiting);
    std::stable_sort(running.begin(), running.end(), order);
    std::stable_sort(waiting.begin(), waiting.end(), order);
    Decisions out;
    int32_t budget = in.token_budget, free_blocks = in.free_blocks;
    const auto chunk = static_cast<int32_t>(chunk_size_);
    // Running sequences: decode tokens first (they keep flowing), then prompt chunks.
    auto decoding = [](const sy_sched_seq& s) { return remaining(s) == 1 && s.generated > 0; };
    std::vector<sy_sched_seq> keep;
    for (const auto& s : running)
      if (decoding(s)) keep.push_back(s);
    for (const auto& s : running)
      if (!decoding(s)) keep.push_back(s);
    // Tokens each would get, in order, within the budget.
    std::vector<int32_t> tokens;
    int32_t left = budget;
    for (const auto& s : keep) {
      int32_t t = std::max(0, std::min<int32_t>({left, remaining(s), chunk}));
      tokens.push_back(t);
      left -= t;
    }
    const int32_t B = in.block_size;
    auto blocks_for = [&](const sy_sched_seq& s, int32_t t) { return (s.computed_len + t + B - 1) / B - (s.computed_len + B - 1) / B; };
    int64_t need = 0;
    for (size_t i = 0; i < keep.size(); ++i) need += blocks_for(keep[i], tokens[i]);
    // Preempt from the back (newest / lowest priority) until the rest fits;
    // a victim's blocks come back to the others.
    while (need > free_blocks && !keep.empty()) {
      need -= blocks_for(keep.back(), tokens.back());
      free_blocks += (keep.back().computed_len + B - 1) / B;
      out.push_back({keep.back().id, SY_SCHED_PREEMPT, 0});
      keep.pop_back();
      tokens.pop_back();
    }
    free_blocks -= static_cast<int32_t>(need);
    for (size_t i = 0; i < keep.size(); ++i)
      if (tokens[i] > 0) {
        out.push_back({keep[i].id, SY_SCHED_RUN, tokens[i]});
        budget -= tokens[i];
      }
    // Admissions within the budget, the sequence slots and the free blocks.
    auto seqs = static_cast<int32_t>(keep.size());
    for (const auto& s : waiting) {
      if (budget <= 0 || seqs >= in.max_seqs) break;
      int32_t t = std::min<int32_t>({budget, remaining(s), chunk});
      int32_t blocks = (t + B - 1) / B;
      if (blocks > free_blocks) break;  // FCFS: no overtaking of a request that does not fit
      free_blocks -= blocks;
      out.push_back({s.id, SY_SCHED_RUN, t});
      budget -= t;
      ++seqs;
    }
    return out;
  }

 private:
  int64_t chunk_size_;
  bool priorities_;
};

}  // namespace

SY_PLUGIN(builder) {
  using sy::plugin::option_bool;
  using sy::plugin::option_int;
  builder.info("switchyard-scheduler", "1.0.0", "static, dynamic and continuous batching");
  builder.scheduler<StaticBatch>("static", "1.0.0", "wait for a full batch, run it to completion",
                                 {option_int("batch_size", "8", "requests per batch"),
                                  option_int("max_wait_ms", "1000", "start a partial batch when the oldest request waited this long")});
  builder.scheduler<DynamicBatch>("dynamic", "1.0.0", "collect for a time window or up to a size, run the batch to completion",
                                  {option_int("max_batch", "32", "most requests in one batch"),
                                   option_int("window_ms", "5", "collect arrivals for this long")});
  builder.scheduler<Continuous>("continuous", "1.0.0",
                                "per-step admission and retirement, token budget, chunked prefill, FCFS or priorities, "
                                "preemption when the KV cache is full",
                                {option_int("chunk_size", "256", "longest prompt chunk in one step"),
                                 option_bool("priorities", "false", "order by request priority, then arrival")});
  builder.scheduler<sy_sched::SloScheduler>(
      "slo", "1.0.0",
      "continuous batching held to a TPOT target: decodes first, prompt chunks sized by a step-cost model measured while "
      "it runs; admission that keeps headroom for running requests",
      {sy::plugin::option_float("tpot_ms", "50", "target time per output token: the predicted step time"),
       sy::plugin::option_float("ttft_ms", "0", "first-token target: prompts that can still meet it go first (late ones "
                                                "after), and a step grows past the TPOT budget when one would miss it (0: off)"),
       option_int("min_chunk", "16", "prompt tokens every step may run even when the target leaves no room (TTFT progress)"),
       option_int("warmup_tokens", "64", "prompt tokens per step until the cost model has seen 8 steps"),
       option_bool("priorities", "false", "order by request priority, then arrival"),
       sy::plugin::option_float("starve_ms", "-1", "a prompt waiting this long is served first, deadline or not "
                                                   "(-1: 4 x ttft_ms; 0: never)"),
       option_int("log_every", "0", "log the budget and the fitted step cost every N steps (0: never)")});
}
