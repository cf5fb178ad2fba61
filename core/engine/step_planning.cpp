// Batch planning and admission: who runs this step with how many tokens,
// from the built-in FCFS continuous batcher or a scheduler plugin (whose
// plan is checked: a plan that breaks the contract fails the step as a
// plugin failure), prefix reuse and KV allocation on admission, preemption
// by recompute when the cache is full.
#include <algorithm>
#include <unordered_map>

#include "engine/step_sequence.h"

namespace sy {

// A sequence whose tokens need more blocks than the whole cache can never
// run (it would be preempted and recomputed forever): fail it clearly.
void StepEngine::fail_requests_larger_than_the_cache() {
  const int32_t total_blocks = cache_.stats().total_blocks;
  for (Seq* s : std::vector<Seq*>(waiting_.begin(), waiting_.end()))
    if ((static_cast<int64_t>(s->tokens.size()) + block_size_ - 1) / block_size_ > total_blocks)
      finish(s, FinishReason::Error, "request of " + std::to_string(s->tokens.size()) + " tokens needs more than the whole KV cache (" +
                             std::to_string(total_blocks) + " blocks of " + std::to_string(block_size_) + " tokens)");
}

void StepEngine::preempt(Seq* s) {
  if (s->holds_cache) cache_.release(s->id);
  s->holds_cache = false;
  s->computed = 0;
  std::erase(running_, s);
  waiting_.push_front(s);
  std::lock_guard<std::mutex> lock(mu_);
  ++metrics_.preemptions;
}

// Moves a waiting sequence into the step: prefix reuse, then room for `tokens`.
// Returns without change when the cache cannot hold them.
void StepEngine::admit(Seq* s, int32_t tokens, std::vector<Scheduled>& batch) {
  int32_t cached = cache_.match_prefix(s->id, s->tokens);
  int32_t n = std::min(tokens, static_cast<int32_t>(s->tokens.size()) - cached);
  if (!cache_.allocate(s->id, n)) {
    if (cached > 0) cache_.release(s->id);
    if (running_.empty() && batch.empty())  // nothing will ever free a block for it
      finish(s, FinishReason::Error, "request of " + std::to_string(s->tokens.size()) + " tokens does not fit the KV cache even alone (" +
                             std::to_string(cache_.stats().total_blocks) + " blocks of " + std::to_string(block_size_) + " tokens" +
                             (cache_.last_refusal().empty() ? "" : "; the cache manager says: " + cache_.last_refusal()) + ")");
    return;
  }
  s->holds_cache = true;
  if (s->result.tokens.empty() && s->computed == 0) {
    s->result.cached_tokens = cached;
    std::lock_guard<std::mutex> lock(mu_);
    metrics_.cached_tokens += cached;
  }
  s->computed = cached;
  std::erase(waiting_, s);
  running_.push_back(s);
  batch.push_back({s, n});
}

std::vector<StepEngine::Scheduled> StepEngine::plan_builtin() {
  std::vector<Scheduled> batch;
  int32_t budget = options_.max_batch_tokens;
  // Running sequences first (decode, or the next chunk of their prompt).
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Seq* s = running_[i];
    int32_t n = std::min(budget, s->remaining());
    if (cache_.allocate(s->id, n)) {
      batch.push_back({s, n});
      budget -= n;
      ++i;
      continue;
    }
    // Cache full: preempt the newest running sequence (maybe this one).
    Seq* victim = running_.back();
    std::erase_if(batch, [&](const Scheduled& b) { return b.seq == victim; });
    preempt(victim);
  }
  // Then admit waiting sequences, oldest first.
  while (!waiting_.empty() && budget > 0 && static_cast<int>(running_.size()) < options_.max_seqs) {
    size_t before = batch.size();
    admit(waiting_.front(), budget, batch);
    if (batch.size() == before) break;  // no room in the cache
    budget -= batch.back().tokens;
  }
  return batch;
}

std::vector<StepEngine::Scheduled> StepEngine::plan_with_plugin() {
  auto seq_view = [&](const Seq* s, int32_t state) {
    sy_sched_seq v{};
    v.id = s->id;
    v.state = state;
    v.prompt_len = static_cast<int32_t>(state == SY_SEQ_RUNNING ? s->req.prompt.size() : s->tokens.size());
    v.computed_len = s->computed;
    v.generated = static_cast<int32_t>(s->result.tokens.size());
    v.max_tokens = s->req.max_tokens;
    v.priority = s->req.priority;
    int32_t have = (s->computed + block_size_ - 1) / block_size_;
    v.blocks_needed = (s->computed + s->remaining() + block_size_ - 1) / block_size_ - (state == SY_SEQ_RUNNING ? have : 0);
    v.arrival_time = s->arrival_ms / 1000.0;
    return v;
  };
  std::vector<sy_sched_seq> waiting, running;
  std::unordered_map<uint64_t, Seq*> by_id;
  for (Seq* s : waiting_) {
    waiting.push_back(seq_view(s, s->result.tokens.empty() ? SY_SEQ_WAITING : SY_SEQ_PREEMPTED));
    by_id[s->id] = s;
  }
  for (Seq* s : running_) {
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
  in.now = now_ms() / 1000.0;
  std::vector<sy_sched_decision> plan = scheduler_->plan(in);

  std::vector<Scheduled> batch;
  std::unordered_map<uint64_t, bool> seen;
  int32_t total = 0;
  for (const auto& d : plan) {
    auto it = by_id.find(d.seq_id);
    SY_CHECK_KIND(it != by_id.end(), ErrorKind::PluginFailure, "scheduler returned unknown sequence id " << d.seq_id);
    SY_CHECK_KIND(!seen[d.seq_id], ErrorKind::PluginFailure, "scheduler named sequence " << d.seq_id << " twice in one step");
    seen[d.seq_id] = true;
    if (d.action == SY_SCHED_PREEMPT) {
      SY_CHECK_KIND(std::find(running_.begin(), running_.end(), it->second) != running_.end(), ErrorKind::PluginFailure,
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
    Seq* s = by_id[d.seq_id];
    if (std::find(running_.begin(), running_.end(), s) == running_.end()) continue;
    int32_t n = std::min(d.num_tokens, s->remaining());
    if (cache_.allocate(s->id, n)) {
      batch.push_back({s, n});
    } else {
      // The cache disagrees with the plan: preempt this one, recompute later.
      preempt(s);
    }
  }
  for (const auto& d : plan) {
    if (d.action != SY_SCHED_RUN) continue;
    Seq* s = by_id[d.seq_id];
    if (std::find(waiting_.begin(), waiting_.end(), s) == waiting_.end()) continue;
    if (static_cast<int>(running_.size()) >= options_.max_seqs) break;
    size_t before = batch.size();
    admit(s, d.num_tokens, batch);
    if (batch.size() == before) break;
  }
  return batch;
}

}  // namespace sy
