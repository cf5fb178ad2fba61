// The planner (planner.h): the built-in batcher, a scheduler plugin's
// checked plan, admission and preemption.
#include "engine/step/planner.h"

#include <algorithm>
#include <unordered_map>

namespace sy {

StepPlanner::StepPlanner(PluginCacheManager& cache, PluginScheduler* scheduler, const StepEngineOptions& options, int32_t block_size,
                         SequenceEnds& ends, RequestQueue& queue, StepCounters& counters, std::function<double()> now_ms)
    : cache_(cache),
      scheduler_(scheduler),
      options_(options),
      block_size_(block_size),
      ends_(ends),
      queue_(queue),
      counters_(counters),
      now_ms_(std::move(now_ms)) {}

void StepPlanner::add(Sequence* s) { waiting_.push_back(s); }

void StepPlanner::remove(Sequence* s) {
  std::erase(running_, s);
  std::erase(waiting_, s);
}

// A sequence whose tokens need more blocks than the whole cache can never
// run (it would be preempted and recomputed forever): fail it clearly.
void StepPlanner::fail_requests_larger_than_the_cache() {
  const int32_t total_blocks = cache_.stats().total_blocks;
  for (Sequence* s : std::vector<Sequence*>(waiting_.begin(), waiting_.end()))
    if ((static_cast<int64_t>(s->tokens.size()) + block_size_ - 1) / block_size_ > total_blocks)
      ends_.finish(s, FinishReason::Error, "request of " + std::to_string(s->tokens.size()) + " tokens needs more than the whole KV cache (" +
                             std::to_string(total_blocks) + " blocks of " + std::to_string(block_size_) + " tokens)");
}

void StepPlanner::preempt(Sequence* s) {
  // A cache manager that cannot free the sequence fails it (finish lets go).
  if (s->holds_cache && !contained(ends_, s, [&] { cache_.release(s->id); })) return;
  s->holds_cache = false;
  s->computed = 0;
  s->state = SeqState::Waiting;
  std::erase(running_, s);
  waiting_.push_front(s);
  counters_.update([](StepEngineMetrics& m) { ++m.preemptions; });
}

// Moves a waiting sequence into the step: prefix reuse, then room for `tokens`.
// Returns without change when the cache cannot hold them.
void StepPlanner::admit(Sequence* s, int32_t tokens, StepPlan& batch) {
  int32_t cached = 0;
  if (!contained(ends_, s, [&] { cached = cache_.match_prefix(s->id, s->tokens); })) return;
  s->holds_cache = cached > 0;
  int32_t n = std::min(tokens, static_cast<int32_t>(s->tokens.size()) - cached);
  bool room = false;
  if (!contained(ends_, s, [&] { room = cache_.allocate(s->id, n); })) return;
  if (!room) {
    if (cached > 0 && !contained(ends_, s, [&] { cache_.release(s->id); })) return;
    s->holds_cache = false;
    if (running_.empty() && batch.empty())  // nothing will ever free a block for it
      ends_.finish(s, FinishReason::Error, "request of " + std::to_string(s->tokens.size()) + " tokens does not fit the KV cache even alone (" +
                             std::to_string(cache_.stats().total_blocks) + " blocks of " + std::to_string(block_size_) + " tokens" +
                             (cache_.last_refusal().empty() ? "" : "; the cache manager says: " + cache_.last_refusal()) +
                             (cache_failed_.empty() ? "" : "; the cache manager failed earlier: " + cache_failed_) + ")");
    return;
  }
  s->holds_cache = true;
  s->state = SeqState::Running;
  if (s->result.tokens.empty() && s->computed == 0) {
    s->result.cached_tokens = cached;
    s->result.queue_ms = now_ms_() - s->arrival_ms;
    counters_.update([&](StepEngineMetrics& m) { m.cached_tokens += cached; });
  }
  s->computed = cached;
  std::erase(waiting_, s);
  running_.push_back(s);
  batch.entries.push_back({s, n});
}

// The scheduler plugin's plan, contained: a failed plan runs nothing this
// step (the requests stay queued, the plan is asked again next step); after
// max_plugin_failures failures in a row the scheduler is out of service:
// the engine serves on with the built-in batcher when the manifest allows
// (scheduler.on_failure: builtin), or fails every queued request with the
// plugin's message and refuses new ones.
StepPlan StepPlanner::plan() {
  fail_requests_larger_than_the_cache();
  if (!scheduler_out_.empty()) {
    // Out of service without a fallback: requests that were submitted before
    // submit() started refusing (already in the queue) fail the same way.
    for (Sequence* s : std::vector<Sequence*>(running_)) ends_.finish(s, FinishReason::Error, scheduler_out_);
    for (Sequence* s : std::vector<Sequence*>(waiting_.begin(), waiting_.end())) ends_.finish(s, FinishReason::Error, scheduler_out_);
    return {};
  }
  if (!scheduler_) return plan_builtin();
  try {
    StepPlan batch = plan_with_plugin();
    scheduler_failures_ = 0;
    return batch;
  } catch (const std::exception& e) {
    const std::string msg = scheduler_->label() + ": " + e.what();
    if (++scheduler_failures_ < options_.max_plugin_failures) {
      counters_.plugin_failure(msg);
      return {};
    }
    const std::string why = msg + " (failed " + std::to_string(scheduler_failures_) + " steps in a row: the scheduler is out of service" +
                            (options_.scheduler_fallback_builtin ? "; serving on with the built-in batcher)" : ")");
    counters_.plugin_failure(why);
    if (options_.scheduler_fallback_builtin) {
      scheduler_ = nullptr;
      return plan_builtin();
    }
    scheduler_out_ = why;
    queue_.refuse(why);  // before the queued requests fail: a resubmission is refused too
    return plan();  // fails what is queued
  }
}

StepPlan StepPlanner::plan_builtin() {
  StepPlan batch;
  int32_t budget = options_.max_batch_tokens;
  // Running sequences first (decode, or the next chunk of their prompt).
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* s = running_[i];
    int32_t n = std::min(budget, s->remaining());
    bool room = false;
    if (!contained(ends_, s, [&] { room = cache_.allocate(s->id, n); })) continue;  // failed: it left running_
    if (room) {
      batch.entries.push_back({s, n});
      budget -= n;
      ++i;
      continue;
    }
    // Cache full: preempt the newest running sequence (maybe this one).
    Sequence* victim = running_.back();
    std::erase_if(batch.entries, [&](const StepPlan::Entry& b) { return b.seq == victim; });
    preempt(victim);
  }
  // Then admit waiting sequences, oldest first.
  while (!waiting_.empty() && budget > 0 && static_cast<int>(running_.size()) < options_.max_seqs) {
    size_t before = batch.entries.size();
    Sequence* s = waiting_.front();
    admit(s, budget, batch);
    if (s->finished()) continue;        // failed (its cache call, or too large): on to the next
    if (batch.entries.size() == before) break;  // no room in the cache
    budget -= batch.entries.back().tokens;
  }
  return batch;
}

StepPlan StepPlanner::plan_with_plugin() {
  auto seq_view = [&](const Sequence* s, int32_t state) {
    sy_sched_seq v{};
    v.id = s->id;
    v.state = state;
    // One meaning per field whatever the state (before ABI 1.3 a waiting
    // sequence's prompt_len included its generated tokens, so the natural
    // prompt_len + generated - computed_len double-counted a preempted one).
    v.prompt_len = static_cast<int32_t>(s->req.prompt.size());
    v.computed_len = s->computed;
    v.generated = static_cast<int32_t>(s->result.tokens.size());
    v.remaining_tokens = s->remaining();
    v.max_tokens = s->req.max_tokens;
    v.priority = s->req.priority;
    int32_t have = (s->computed + block_size_ - 1) / block_size_;
    v.blocks_needed = (s->computed + s->remaining() + block_size_ - 1) / block_size_ - (state == SY_SEQ_RUNNING ? have : 0);
    v.arrival_time = s->arrival_ms / 1000.0;
    return v;
  };
  std::vector<sy_sched_seq> waiting, running;
  std::unordered_map<uint64_t, Sequence*> by_id;
  for (Sequence* s : waiting_) {
    waiting.push_back(seq_view(s, s->result.tokens.empty() ? SY_SEQ_WAITING : SY_SEQ_PREEMPTED));
    by_id[s->id] = s;
  }
  for (Sequence* s : running_) {
    running.push_back(seq_view(s, SY_SEQ_RUNNING));
    by_id[s->id] = s;
  }
  auto stats = cache_.stats();
  sy_sched_input in{};
  in.struct_size = sizeof(in);
  in.waiting = waiting.data();
  in.num_waiting = static_cast<int32_t>(waiting.size());
  in.running = running.data();
  in.num_running = static_cast<int32_t>(running.size());
  in.free_blocks = stats.free_blocks;
  in.block_size = block_size_;
  in.token_budget = options_.max_batch_tokens;
  in.max_seqs = options_.max_seqs;
  in.now = now_ms_() / 1000.0;
  std::vector<sy_sched_decision> plan = scheduler_->plan(in);

  StepPlan batch;
  std::unordered_map<uint64_t, bool> seen;
  int32_t total = 0;
  for (const auto& d : plan) {
    auto it = by_id.find(d.seq_id);
    SY_CHECK_KIND(it != by_id.end(), ErrorKind::PluginFailure, "scheduler returned unknown sequence id " << d.seq_id);
    SY_CHECK_KIND(!seen[d.seq_id], ErrorKind::PluginFailure, "scheduler named sequence " << d.seq_id << " twice in one step");
    seen[d.seq_id] = true;
    if (d.action == SY_SCHED_PREEMPT) {
      SY_CHECK_KIND(it->second->state == SeqState::Running, ErrorKind::PluginFailure,
                    "scheduler preempted sequence " << d.seq_id << ", which is not running");
      preempt(it->second);
      continue;
    }
    SY_CHECK_KIND(d.action == SY_SCHED_RUN, ErrorKind::PluginFailure, "scheduler returned unknown action " << d.action);
    SY_CHECK_KIND(d.num_tokens > 0, ErrorKind::PluginFailure, "scheduler gave sequence " << d.seq_id << " " << d.num_tokens << " tokens");
    total += d.num_tokens;
    SY_CHECK_KIND(total <= options_.max_batch_tokens, ErrorKind::PluginFailure,
                  "scheduler planned " << total << "+ tokens, over the step budget of " << options_.max_batch_tokens);
  }
  // Running sequences first, then admissions, in the plan's order.
  for (const auto& d : plan) {
    if (d.action != SY_SCHED_RUN) continue;
    Sequence* s = by_id[d.seq_id];
    if (s->state != SeqState::Running) continue;
    int32_t n = std::min(d.num_tokens, s->remaining());
    bool room = false;
    if (!contained(ends_, s, [&] { room = cache_.allocate(s->id, n); })) continue;
    if (room) {
      batch.entries.push_back({s, n});
    } else {
      // The cache disagrees with the plan: preempt this one, recompute later.
      preempt(s);
    }
  }
  for (const auto& d : plan) {
    if (d.action != SY_SCHED_RUN) continue;
    Sequence* s = by_id[d.seq_id];
    if (s->state != SeqState::Waiting) continue;
    if (static_cast<int>(running_.size()) >= options_.max_seqs) break;
    size_t before = batch.entries.size();
    admit(s, d.num_tokens, batch);
    if (s->finished()) continue;
    if (batch.entries.size() == before) break;
  }
  return batch;
}

}  // namespace sy
