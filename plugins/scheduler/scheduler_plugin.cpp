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
#include <switchyard/plugin.hpp>

#include <algorithm>
#include <vector>

namespace {

using sy::plugin::guard;
using sy::plugin::Options;

int32_t remaining(const sy_sched_seq& s) { return s.prompt_len + s.generated - s.computed_len; }

// Batch-to-completion schedulers (static and dynamic differ in when a batch starts).
struct Batch {
  int64_t size;
  double wait_s;  // the oldest waiting request triggers a partial batch after this long
};

sy_status batch_create_static(void*, const sy_options* o, void** state) {
  return guard([&] {
    Options opts(o);
    int64_t size = opts.get_int("batch_size");
    if (size <= 0) throw sy::plugin::Error("batch_size must be positive", SY_INVALID_ARGUMENT);
    *state = new Batch{size, static_cast<double>(opts.get_int("max_wait_ms")) / 1000.0};
  });
}
sy_status batch_create_dynamic(void*, const sy_options* o, void** state) {
  return guard([&] {
    Options opts(o);
    int64_t size = opts.get_int("max_batch");
    if (size <= 0) throw sy::plugin::Error("max_batch must be positive", SY_INVALID_ARGUMENT);
    *state = new Batch{size, static_cast<double>(opts.get_int("window_ms")) / 1000.0};
  });
}
sy_status batch_plan(void* state, const sy_sched_input* in, sy_sched_decision* out, int32_t cap, int32_t* count) {
  return guard([&] {
    auto* b = static_cast<Batch*>(state);
    int32_t n = 0, budget = in->token_budget;
    if (in->num_running > 0) {
      // The current batch runs to completion; nobody joins it.
      for (int32_t i = 0; i < in->num_running && n < cap && budget > 0; ++i) {
        int32_t t = std::min(budget, remaining(in->running[i]));
        out[n++] = {in->running[i].id, SY_SCHED_RUN, t};
        budget -= t;
      }
      // Preempted members of the batch come back first.
      for (int32_t i = 0; i < in->num_waiting && n < cap && budget > 0; ++i)
        if (in->waiting[i].state == SY_SEQ_PREEMPTED) {
          int32_t t = std::min(budget, remaining(in->waiting[i]));
          out[n++] = {in->waiting[i].id, SY_SCHED_RUN, t};
          budget -= t;
        }
      *count = n;
      return;
    }
    if (in->num_waiting == 0) {
      *count = 0;
      return;
    }
    double oldest = in->waiting[0].arrival_time;
    for (int32_t i = 1; i < in->num_waiting; ++i) oldest = std::min(oldest, in->waiting[i].arrival_time);
    bool full = in->num_waiting >= b->size;
    bool waited = in->now - oldest >= b->wait_s;
    if (!full && !waited) {
      *count = 0;  // keep collecting
      return;
    }
    int32_t limit = static_cast<int32_t>(std::min<int64_t>({b->size, in->max_seqs, in->num_waiting}));
    for (int32_t i = 0; i < limit && n < cap && budget > 0; ++i) {
      int32_t t = std::min(budget, remaining(in->waiting[i]));
      out[n++] = {in->waiting[i].id, SY_SCHED_RUN, t};
      budget -= t;
    }
    *count = n;
  });
}
void batch_destroy(void* state) { delete static_cast<Batch*>(state); }

// Continuous batching.
struct Continuous {
  int64_t chunk_size;
  bool priorities;
};

sy_status continuous_create(void*, const sy_options* o, void** state) {
  return guard([&] {
    Options opts(o);
    int64_t chunk = opts.get_int("chunk_size");
    if (chunk <= 0) throw sy::plugin::Error("chunk_size must be positive", SY_INVALID_ARGUMENT);
    *state = new Continuous{chunk, opts.get_bool("priorities")};
  });
}

sy_status continuous_plan(void* state, const sy_sched_input* in, sy_sched_decision* out, int32_t cap, int32_t* count) {
  return guard([&] {
    auto* c = static_cast<Continuous*>(state);
    auto order = [&](const sy_sched_seq& a, const sy_sched_seq& b) {
      if (c->priorities && a.priority != b.priority) return a.priority < b.priority;
      return a.arrival_time < b.arrival_time;
    };
    std::vector<sy_sched_seq> running(in->running, in->running + in->num_running);
    std::vector<sy_sched_seq> waiting(in->waiting, in->waiting + in->num_waiting);
    std::stable_sort(running.begin(), running.end(), order);
    std::stable_sort(waiting.begin(), waiting.end(), order);
    int32_t n = 0, budget = in->token_budget, free_blocks = in->free_blocks;
    // Running sequences: decode tokens first (they keep flowing), then prompt chunks.
    std::vector<sy_sched_seq> keep;
    for (const auto& s : running)
      if (remaining(s) == 1 && s.generated > 0) keep.push_back(s);
    for (const auto& s : running)
      if (!(remaining(s) == 1 && s.generated > 0)) keep.push_back(s);
    // Tokens each would get, in order, within the budget.
    std::vector<int32_t> tokens;
    int32_t left = budget;
    for (const auto& s : keep) {
      int32_t t = std::max(0, std::min<int32_t>({left, remaining(s), static_cast<int32_t>(c->chunk_size)}));
      tokens.push_back(t);
      left -= t;
    }
    auto blocks_for = [&](const sy_sched_seq& s, int32_t t) {
      int32_t B = in->block_size;
      return (s.computed_len + t + B - 1) / B - (s.computed_len + B - 1) / B;
    };
    int64_t need = 0;
    for (size_t i = 0; i < keep.size(); ++i) need += blocks_for(keep[i], tokens[i]);
    // Preempt from the back (newest / lowest priority) until the rest fits;
    // a victim's blocks come back to the others.
    while (need > free_blocks && !keep.empty() && n < cap) {
      need -= blocks_for(keep.back(), tokens.back());
      free_blocks += (keep.back().computed_len + in->block_size - 1) / in->block_size;
      out[n++] = {keep.back().id, SY_SCHED_PREEMPT, 0};
      keep.pop_back();
      tokens.pop_back();
    }
    free_blocks -= static_cast<int32_t>(need);
    for (size_t i = 0; i < keep.size() && n < cap; ++i)
      if (tokens[i] > 0) {
        out[n++] = {keep[i].id, SY_SCHED_RUN, tokens[i]};
        budget -= tokens[i];
      }
    // Admissions within the budget, the sequence slots and the free blocks.
    int32_t seqs = static_cast<int32_t>(keep.size());
    for (const auto& s : waiting) {
      if (n >= cap || budget <= 0 || seqs >= in->max_seqs) break;
      int32_t t = std::min<int32_t>({budget, remaining(s), static_cast<int32_t>(c->chunk_size)});
      int32_t blocks = (t + in->block_size - 1) / in->block_size;
      if (blocks > free_blocks) break;  // FCFS: no overtaking of a request that does not fit
      free_blocks -= blocks;
      out[n++] = {s.id, SY_SCHED_RUN, t};
      budget -= t;
      ++seqs;
    }
    *count = n;
  });
}
void continuous_destroy(void* state) { delete static_cast<Continuous*>(state); }

sy_scheduler_desc describe(sy::plugin::PluginBuilder& b, const char* name, const char* description,
                           const std::vector<sy::plugin::OptionSpec>& options,
                           sy_status (*create)(void*, const sy_options*, void**),
                           sy_status (*plan)(void*, const sy_sched_input*, sy_sched_decision*, int32_t, int32_t*),
                           void (*destroy)(void*)) {
  sy_scheduler_desc d{};
  d.struct_size = sizeof(d);
  d.name = name;
  d.version = "1.0.0";
  d.description = description;
  d.options = b.options(options, d.num_options);
  d.create = create;
  d.plan = plan;
  d.destroy = destroy;
  return d;
}

}  // namespace

SY_PLUGIN(builder) {
  using sy::plugin::option_bool;
  using sy::plugin::option_int;
  builder.info("switchyard-scheduler", "1.0.0", "static, dynamic and continuous batching");
  builder.scheduler(describe(builder, "static", "wait for a full batch, run it to completion",
                             {option_int("batch_size", "8", "requests per batch"),
                              option_int("max_wait_ms", "1000", "start a partial batch when the oldest request waited this long")},
                             batch_create_static, batch_plan, batch_destroy));
  builder.scheduler(describe(builder, "dynamic", "collect for a time window or up to a size, run the batch to completion",
                             {option_int("max_batch", "32", "most requests in one batch"),
                              option_int("window_ms", "5", "collect arrivals for this long")},
                             batch_create_dynamic, batch_plan, batch_destroy));
  builder.scheduler(describe(builder, "continuous",
                             "per-step admission and retirement, token budget, chunked prefill, FCFS or priorities, "
                             "preemption when the KV cache is full",
                             {option_int("chunk_size", "256", "longest prompt chunk in one step"),
                              option_bool("priorities", "false", "order by request priority, then arrival")},
                             continuous_create, continuous_plan, continuous_destroy));
}
