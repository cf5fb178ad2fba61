#include "engine/step_engine.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <unordered_map>

namespace sy {

struct StepEngine::Seq {
  uint64_t id = 0;
  GenerationRequest req;
  Callbacks callbacks;
  std::promise<GenerationResult> promise;
  std::vector<int32_t> tokens;  // prompt + generated
  int32_t computed = 0;         // tokens whose KV is in the cache
  bool holds_cache = false;
  bool done = false;
  double arrival_ms = 0;
  Sampler sampler{SamplingParams{}};
  GenerationResult result;
  std::vector<int32_t> drafts;               // this step's proposals (appended to tokens)
  std::vector<std::vector<double>> draft_q;  // their draft distributions (empty: point masses)
  int32_t remaining() const { return static_cast<int32_t>(tokens.size()) - computed; }
};

StepEngine::StepEngine(DecoderModel& model, PluginCacheManager& cache, PluginScheduler* scheduler, StepEngineOptions options)
    : model_(model), cache_(cache), scheduler_(scheduler), options_(options), epoch_(std::chrono::steady_clock::now()) {
  SY_CHECK(model_.paged_attention(), model_.path() << ": the step engine needs the attention-fusion pass to have fused "
                                                      "every layer's attention");
  SY_CHECK(options_.max_batch_tokens > 0 && options_.max_seqs > 0, "step engine: max_batch_tokens and max_seqs must be positive");
  for (int l = 0; l < model_.num_layers(); ++l) {
    auto [k, v] = cache_.storage(l);
    SY_CHECK(k.rank == 4 && v.rank == 4 && k.data && v.data && k.dims[1] == model_.kv_heads() && k.dims[3] == model_.head_dim(),
             "cache manager storage for layer " << l << " does not match the model ([blocks, " << model_.kv_heads() << ", block, "
                                                << model_.head_dim() << "] expected)");
    key_cache_.push_back(k);
    value_cache_.push_back(v);
  }
  block_size_ = static_cast<int32_t>(key_cache_[0].dims[2]);
  metrics_.total_blocks = cache_.stats().total_blocks;
}

StepEngine::~StepEngine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Requests that never reached the engine thread.
  for (auto& s : incoming_) {
    s->result.finish_reason = "cancelled";
    s->promise.set_value(s->result);
  }
}

double StepEngine::now_ms() const {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - epoch_).count();
}

void StepEngine::validate(const GenerationRequest& r) const {
  model_.check_prompt(r.prompt);
  SY_CHECK(options_.max_prompt_tokens <= 0 || static_cast<int64_t>(r.prompt.size()) <= options_.max_prompt_tokens,
           "the prompt has " << r.prompt.size() << " tokens, over the limit of " << options_.max_prompt_tokens << " (limits.max_prompt_tokens)");
  SY_CHECK(r.max_tokens >= 0, "max_tokens must be >= 0, got " << r.max_tokens);
  SY_CHECK(r.timeout_ms >= 0, "timeout_ms must be >= 0");
  Sampler check(r.sampling);  // throws for bad sampling parameters
  (void)check;
}

uint64_t StepEngine::submit(const GenerationRequest& request, Callbacks callbacks, std::future<GenerationResult>* result) {
  validate(request);
  auto s = std::make_unique<Seq>();
  s->req = request;
  s->callbacks = std::move(callbacks);
  s->tokens.assign(request.prompt.begin(), request.prompt.end());
  s->sampler = Sampler(request.sampling);
  s->sampler.set_prompt(request.prompt);
  s->arrival_ms = now_ms();
  if (result) *result = s->promise.get_future();
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    SY_CHECK(!stop_, "the engine is shutting down");
    // Every submitted request ends in finish(), which counts it under mu_.
    const int64_t queued = submitted_ - (metrics_.finished + metrics_.cancelled + metrics_.failed);
    SY_CHECK(options_.max_queue <= 0 || queued < options_.max_queue,
             "the engine has " << queued << " requests queued or running, the limit (limits.max_queue) is " << options_.max_queue);
    ++submitted_;
    id = s->id = next_id_++;
    incoming_.push_back(std::move(s));
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  }
  cv_.notify_all();
  return id;
}

void StepEngine::cancel(uint64_t id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancel_requests_.push_back(id);
  }
  cv_.notify_all();
}

std::vector<GenerationResult> StepEngine::generate(const std::vector<GenerationRequest>& requests, const TokenCallback& on_token) {
  for (const auto& r : requests) validate(r);
  std::vector<std::future<GenerationResult>> futures(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    Callbacks cb;
    if (on_token) cb.on_token = [&on_token, i](uint64_t, int tok) { on_token(i, tok); };
    submit(requests[i], std::move(cb), &futures[i]);
  }
  std::vector<GenerationResult> out;
  for (auto& f : futures) out.push_back(f.get());
  for (const auto& r : out)
    if (r.finish_reason == "error") throw Error(r.error);
  return out;
}

void StepEngine::set_drafter(Drafter* drafter, int32_t max_k) {
  std::lock_guard<std::mutex> lock(forward_mu_);
  drafter_ = drafter;
  spec_k_ = drafter ? std::max(1, max_k) : 0;
}

StepEngineMetrics StepEngine::metrics() const {
  std::lock_guard<std::mutex> lock(mu_);
  return metrics_;
}

void StepEngine::record_steps(bool on) {
  std::lock_guard<std::mutex> lock(mu_);
  recording_ = on;
}

std::vector<StepRecord> StepEngine::step_records() const {
  std::lock_guard<std::mutex> lock(mu_);
  return records_;
}

void StepEngine::loop() {
  for (;;) {
    std::vector<uint64_t> cancels;
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto has_news = [&] { return stop_ || !incoming_.empty() || !cancel_requests_.empty(); };
      if (waiting_.empty() && running_.empty()) cv_.wait(lock, has_news);
      if (stop_) break;
      while (!incoming_.empty()) {
        Seq* s = incoming_.front().get();
        live_.push_back(std::move(incoming_.front()));
        incoming_.pop_front();
        metrics_.prompt_tokens += static_cast<int64_t>(s->tokens.size());
        waiting_.push_back(s);
      }
      cancels.swap(cancel_requests_);
    }
    bool worked = false;
    {
      // Engine state and the model are shared with prompt_logits().
      std::lock_guard<std::mutex> guard(forward_mu_);
      for (uint64_t id : cancels)
        for (auto& s : live_)
          if (s->id == id && !s->done) finish(s.get(), "cancelled");
      double now = now_ms();
      for (auto& s : live_)
        if (!s->done && s->req.max_tokens == 0) finish(s.get(), "length");
        else if (!s->done && s->req.timeout_ms > 0 && now - s->arrival_ms > s->req.timeout_ms) finish(s.get(), "timeout");
      try {
        worked = step();
      } catch (const std::exception& e) {
        // A failing step (a kernel error, a plugin error) fails the requests
        // it ran; the engine keeps serving the rest.
        std::string msg = e.what();
        for (Seq* s : std::vector<Seq*>(running_)) finish(s, "error", msg);
        worked = true;
      }
      std::erase_if(live_, [](const auto& s) { return s->done; });
    }
    if (!worked) {
      // Nothing ran (a batching window is open): wait for news briefly.
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(1), [&] { return stop_ || !incoming_.empty() || !cancel_requests_.empty(); });
    }
  }
  std::lock_guard<std::mutex> guard(forward_mu_);
  for (auto& s : live_)
    if (!s->done) finish(s.get(), "cancelled");
  live_.clear();
}

void StepEngine::finish(Seq* s, const std::string& reason, const std::string& error) {
  if (s->done) return;
  s->done = true;
  if (s->holds_cache) {
    try {
      cache_.release(s->id);
    } catch (const std::exception&) {
      // The cache manager lost track of it; nothing more to free here.
    }
    s->holds_cache = false;
  }
  std::erase(running_, s);
  std::erase(waiting_, s);
  if (drafter_) {
    try {
      drafter_->release(s->id);
    } catch (const std::exception&) {
    }
  }
  s->result.finish_reason = reason;
  s->result.error = error;
  sy_cache_stats stats{};
  try {
    stats = cache_.stats();
  } catch (const std::exception&) {
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++(reason == "cancelled" ? metrics_.cancelled : reason == "error" ? metrics_.failed : metrics_.finished);
    metrics_.running = static_cast<int32_t>(running_.size());
    metrics_.waiting = static_cast<int32_t>(waiting_.size());
    if (stats.total_blocks > 0) metrics_.used_blocks = stats.total_blocks - stats.free_blocks;
  }
  if (s->callbacks.on_finish) s->callbacks.on_finish(s->id, s->result);
  s->promise.set_value(s->result);
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
      finish(s, "error", "request of " + std::to_string(s->tokens.size()) + " tokens does not fit the KV cache even alone (" +
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
    SY_CHECK(it != by_id.end(), "scheduler returned unknown sequence id " << d.seq_id);
    SY_CHECK(!seen[d.seq_id], "scheduler named sequence " << d.seq_id << " twice in one step");
    seen[d.seq_id] = true;
    if (d.action == SY_SCHED_PREEMPT) {
      SY_CHECK(std::find(running_.begin(), running_.end(), it->second) != running_.end(),
               "scheduler preempted sequence " << d.seq_id << ", which is not running");
      preempt(it->second);
      continue;
    }
    SY_CHECK(d.action == SY_SCHED_RUN, "scheduler returned unknown action " << d.action);
    SY_CHECK(d.num_tokens > 0, "scheduler gave sequence " << d.seq_id << " " << d.num_tokens << " tokens");
    total += d.num_tokens;
    SY_CHECK(total <= options_.max_batch_tokens,
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

bool StepEngine::step() {
  if (waiting_.empty() && running_.empty()) return false;
  // A sequence whose tokens need more blocks than the whole cache can never
  // run (it would be preempted and recomputed forever): fail it clearly.
  const int32_t total_blocks = cache_.stats().total_blocks;
  for (Seq* s : std::vector<Seq*>(waiting_.begin(), waiting_.end()))
    if ((static_cast<int64_t>(s->tokens.size()) + block_size_ - 1) / block_size_ > total_blocks)
      finish(s, "error", "request of " + std::to_string(s->tokens.size()) + " tokens needs more than the whole KV cache (" +
                             std::to_string(total_blocks) + " blocks of " + std::to_string(block_size_) + " tokens)");
  size_t live_before = waiting_.size() + running_.size();
  std::vector<Scheduled> batch = scheduler_ ? plan_with_plugin() : plan_builtin();
  if (batch.empty()) return waiting_.size() + running_.size() != live_before;  // a failed admission is progress
  if (drafter_) add_drafts(batch);
  StepRecord record;
  for (const auto& b : batch)
    record.entries.push_back({b.seq->id, b.tokens, b.tokens > 1 || b.seq->result.tokens.empty() || b.seq->computed + b.tokens < static_cast<int32_t>(b.seq->tokens.size())});
  {
    auto stats = cache_.stats();
    std::lock_guard<std::mutex> mlock(mu_);
    metrics_.used_blocks = stats.total_blocks - stats.free_blocks;
    metrics_.peak_used_blocks = std::max(metrics_.peak_used_blocks, metrics_.used_blocks);
    metrics_.running = static_cast<int32_t>(running_.size());
    metrics_.waiting = static_cast<int32_t>(waiting_.size());
    if (recording_) records_.push_back(record);
  }
  // Only rows that are sampled from: a sequence's last token when its prompt
  // is complete, or every position of a drafted step.
  std::vector<int64_t> rows;
  std::vector<int64_t> first_row(batch.size(), -1);
  {
    int64_t at = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      const Seq* s = batch[i].seq;
      bool samples = !s->drafts.empty() || s->computed + batch[i].tokens == static_cast<int32_t>(s->tokens.size());
      if (samples) {
        first_row[i] = static_cast<int64_t>(rows.size());
        for (int64_t r = s->drafts.empty() ? at + batch[i].tokens - 1 : at; r < at + batch[i].tokens; ++r) rows.push_back(r);
      }
      at += batch[i].tokens;
    }
  }
  Tensor logits = forward(batch, rows);
  double now = now_ms();
  const int64_t V = logits.dim(1);
  for (size_t i = 0; i < batch.size(); ++i) {
    const auto& b = batch[i];
    Seq* s = b.seq;
    const float* mine = first_row[i] >= 0 ? logits.data<float>() + first_row[i] * V : nullptr;
    if (!s->drafts.empty()) {
      // Verification: one row per position of the drafted step.
      int32_t base = s->computed;  // KV before this step
      std::vector<int32_t> emitted = verify(s, mine, V);
      int32_t accepted = static_cast<int32_t>(emitted.size()) - 1;
      s->tokens.resize(s->tokens.size() - s->drafts.size());
      s->computed = base + 1 + accepted;  // the fed token and the accepted drafts
      cache_.truncate(s->id, s->computed);  // rolls the rejected drafts' KV back
      cache_.commit(s->id, s->tokens.data(), std::min<int32_t>(s->computed, static_cast<int32_t>(s->tokens.size())));
      int32_t proposed = static_cast<int32_t>(s->drafts.size());
      s->drafts.clear();
      s->draft_q.clear();
      drafter_->accepted(s->id, proposed, accepted);
      {
        std::lock_guard<std::mutex> mlock(mu_);
        ++metrics_.spec_drafts;
        metrics_.spec_draft_tokens += proposed;
        metrics_.spec_accepted_tokens += accepted;
        if (metrics_.spec_accepted_per_pos.size() < static_cast<size_t>(proposed)) metrics_.spec_accepted_per_pos.resize(static_cast<size_t>(proposed));
        for (int32_t pos = 0; pos < accepted; ++pos) ++metrics_.spec_accepted_per_pos[static_cast<size_t>(pos)];
      }
      for (size_t j = 0; j < emitted.size(); ++j) {
        if (s->done) break;  // a stop token ends the sequence; the rest is dropped
        emit(s, emitted[j], now, mine + static_cast<int64_t>(j) * V, V);  // token j was chosen from row j
      }
      // The last emitted token's KV is computed next step; earlier ones are in the cache.
      continue;
    }
    s->computed += b.tokens;
    cache_.commit(s->id, s->tokens.data(), s->computed);
    if (s->computed < static_cast<int32_t>(s->tokens.size())) continue;  // more prompt chunks to go
    emit(s, s->sampler.sample(mine, static_cast<int>(V)), now, mine, V);
  }
  return true;
}

void StepEngine::emit(Seq* s, int tok, double now, const float* row, int64_t vocab) {
  GenerationResult& res = s->result;
  s->sampler.accept(tok);
  if (s->req.sampling.logprobs >= 0) {
    res.logprobs.push_back(token_logprobs(row, static_cast<int>(vocab), tok, s->req.sampling.logprobs));
    if (s->callbacks.on_logprobs) s->callbacks.on_logprobs(s->id, res.logprobs.back());
  }
  if (res.tokens.empty()) res.ttft_ms = now - s->arrival_ms;
  res.tokens.push_back(tok);
  res.e2e_ms = now - s->arrival_ms;
  res.token_ms.push_back(res.e2e_ms);
  s->tokens.push_back(tok);
  {
    std::lock_guard<std::mutex> mlock(mu_);
    ++metrics_.generated_tokens;
  }
  if (s->callbacks.on_token) s->callbacks.on_token(s->id, tok);
  const bool stop_id = std::find(s->req.stop_ids.begin(), s->req.stop_ids.end(), tok) != s->req.stop_ids.end();
  if (stop_id || (s->req.stop_at_eos && model_.is_eos(tok, s->req.eos_ids))) finish(s, "stop");
  else if (static_cast<int>(res.tokens.size()) >= s->req.max_tokens) finish(s, "length");
  else if (static_cast<int64_t>(s->tokens.size()) >= model_.max_context()) finish(s, "context");
}

void StepEngine::add_drafts(std::vector<Scheduled>& batch) {
  int32_t used = 0;
  for (const auto& b : batch) used += b.tokens;
  for (auto& b : batch) {
    Seq* s = b.seq;
    bool decode = b.tokens == 1 && !s->result.tokens.empty() && s->computed + 1 == static_cast<int32_t>(s->tokens.size());
    if (!decode) continue;
    // Never draft past the request's limits or the step budget.
    int32_t room = std::min({spec_k_, s->req.max_tokens - static_cast<int32_t>(s->result.tokens.size()) - 1,
                             static_cast<int32_t>(model_.max_context() - static_cast<int64_t>(s->tokens.size())) - 1,
                             options_.max_batch_tokens - used});
    if (room <= 0) continue;
    std::vector<std::vector<double>> q;
    std::vector<int32_t> d = drafter_->propose(s->id, s->tokens, room, s->req.sampling, &q);
    if (d.empty()) continue;
    if (static_cast<int32_t>(d.size()) > room) d.resize(static_cast<size_t>(room));
    // A drafter is a plugin: its proposals are input like any other. An id
    // outside the vocabulary would index past the embedding table; the draft
    // is dropped and the sequence decodes normally (outputs unchanged).
    auto bad = std::find_if(d.begin(), d.end(), [&](int32_t t) { return t < 0 || (model_.vocab_size() >= 0 && t >= model_.vocab_size()); });
    if (bad != d.end()) {
      std::lock_guard<std::mutex> mlock(mu_);
      ++metrics_.spec_invalid_drafts;
      metrics_.spec_last_invalid = "drafter proposed token id " + std::to_string(*bad) + ", outside the vocabulary of " +
                                   std::to_string(model_.vocab_size()) + "; draft dropped";
      continue;
    }
    SY_CHECK_KIND(q.empty() || q.size() >= d.size(), ErrorKind::PluginFailure,
                  "drafter returned " << q.size() << " draft distributions for " << d.size() << " tokens");
    for (const auto& row : q)
      SY_CHECK_KIND(static_cast<int64_t>(row.size()) == model_.vocab_size(), ErrorKind::PluginFailure,
                    "drafter returned a draft distribution over " << row.size() << " tokens; the model's vocabulary has "
                                                                   << model_.vocab_size());
    if (!cache_.allocate(s->id, static_cast<int32_t>(d.size()))) continue;  // no room: decode without drafts
    s->drafts = d;
    s->draft_q = std::move(q);
    s->tokens.insert(s->tokens.end(), d.begin(), d.end());
    b.tokens += static_cast<int32_t>(d.size());
    used += static_cast<int32_t>(d.size());
  }
}

std::vector<int32_t> StepEngine::verify(Seq* s, const float* logits, int64_t V) {
  std::vector<int32_t> out;
  std::vector<double> p;
  const auto n = static_cast<int>(V);
  // Position i is judged as if drafts 0..i-1 had been generated: penalties
  // count them, as plain decoding would have.
  std::vector<int> pending;
  for (size_t i = 0; i < s->drafts.size(); ++i) {
    const float* row = logits + static_cast<int64_t>(i) * V;
    int32_t d = s->drafts[i];
    if (s->sampler.greedy()) {
      // Greedy: the longest prefix the target would have produced itself.
      int t = s->sampler.greedy_choice(row, n, pending);
      pending.push_back(t);
      out.push_back(t);
      if (t != d) return out;
      continue;
    }
    // Rejection sampling (Leviathan et al.): accept d with probability
    // min(1, p(d) / q(d)); else draw from max(0, p - q), renormalised.
    s->sampler.distribution(row, n, p, pending);
    double qd = s->draft_q.empty() ? 1.0 : s->draft_q[i][static_cast<size_t>(d)];
    if (qd > 0 && s->sampler.uniform() < std::min(1.0, p[static_cast<size_t>(d)] / qd)) {
      out.push_back(d);
      pending.push_back(d);
      continue;
    }
    for (size_t t = 0; t < p.size(); ++t) {
      double qt = s->draft_q.empty() ? (static_cast<int32_t>(t) == d ? 1.0 : 0.0) : s->draft_q[i][t];
      p[t] = std::max(0.0, p[t] - qt);
    }
    out.push_back(s->sampler.sample_from(p));
    return out;
  }
  // Every draft accepted: a bonus token from the last row.
  out.push_back(s->sampler.sample(logits + static_cast<int64_t>(s->drafts.size()) * V, n, pending));
  return out;
}

Tensor StepEngine::forward(const std::vector<Scheduled>& batch, const std::vector<int64_t>& rows) {
  int32_t T = 0;
  for (const auto& b : batch) T += b.tokens;
  Tensor ids = Tensor::empty(DType::I64, Shape{1, T});
  Tensor pos = Tensor::empty(DType::I64, Shape{1, T});
  std::vector<int32_t> query_start{0}, context_len;
  std::vector<uint64_t> seq_ids;
  std::vector<std::vector<int32_t>> tables;
  int32_t max_blocks = 1;
  int32_t t = 0;
  for (const auto& b : batch) {
    for (int32_t j = 0; j < b.tokens; ++j, ++t) {
      int32_t p = b.seq->computed + j;
      ids.data<int64_t>()[t] = b.seq->tokens[static_cast<size_t>(p)];
      pos.data<int64_t>()[t] = p;
    }
    query_start.push_back(t);
    context_len.push_back(b.seq->computed + b.tokens);
    seq_ids.push_back(b.seq->id);
    tables.push_back(cache_.block_table(b.seq->id));
    max_blocks = std::max(max_blocks, static_cast<int32_t>(tables.back().size()));
  }
  // Paging waste: slots held in blocks minus tokens stored (windowed-out
  // blocks, marked -1, hold nothing).
  int64_t waste_sum = 0, waste_max = 0;
  bool any_prefill = false, any_decode = false;
  for (size_t i = 0; i < batch.size(); ++i) {
    int64_t held = 0, first_kept = -1;
    for (size_t k = 0; k < tables[i].size(); ++k)
      if (tables[i][k] >= 0) {
        ++held;
        if (first_kept < 0) first_kept = static_cast<int64_t>(k);
      }
    int64_t stored = context_len[i] - std::max<int64_t>(first_kept, 0) * block_size_;
    int64_t waste = held * block_size_ - stored;
    waste_sum += waste;
    waste_max = std::max(waste_max, waste);
    bool decode = batch[i].tokens == 1 && !batch[i].seq->result.tokens.empty() &&
                  batch[i].seq->computed + 1 == static_cast<int32_t>(batch[i].seq->tokens.size());
    (decode ? any_decode : any_prefill) = true;
  }
  std::vector<int32_t> flat(static_cast<size_t>(max_blocks) * batch.size(), 0);
  for (size_t i = 0; i < tables.size(); ++i)
    std::copy(tables[i].begin(), tables[i].end(), flat.begin() + static_cast<ptrdiff_t>(i * static_cast<size_t>(max_blocks)));
  std::vector<int64_t> positions(pos.data<int64_t>(), pos.data<int64_t>() + T);

  sy_step_context step{};
  step.struct_size = sizeof(step);
  step.num_seqs = static_cast<int32_t>(batch.size());
  step.num_tokens = T;
  step.query_start = query_start.data();
  step.context_len = context_len.data();
  step.positions = positions.data();
  step.seq_ids = seq_ids.data();
  step.block_tables = flat.data();
  step.max_blocks_per_seq = max_blocks;
  step.block_size = block_size_;
  step.num_layers = static_cast<int32_t>(key_cache_.size());
  step.key_cache = key_cache_.data();
  step.value_cache = value_cache_.data();

  Executor& ex = model_.executor();
  std::vector<Tensor> inputs(ex.graph().inputs.size());
  inputs[static_cast<size_t>(model_.input_ids)] = ids;
  for (const auto& [slot, empty] : model_.shape_only_inputs()) inputs[static_cast<size_t>(slot)] = empty;
  if (model_.position_ids >= 0 && ex.input_used(static_cast<size_t>(model_.position_ids)))
    inputs[static_cast<size_t>(model_.position_ids)] = pos;
  const bool selected_in_graph = model_.logits_indices >= 0;
  if (selected_in_graph)
    inputs[static_cast<size_t>(model_.logits_indices)] =
        Tensor::from<int64_t>(Shape{static_cast<int64_t>(rows.size())}, std::span<const int64_t>(rows));
  std::vector<Tensor> out = ex.run(inputs, &step);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++metrics_.steps;
    metrics_.computed_tokens += T;
    for (int32_t c : context_len) metrics_.kv_tokens_read += c;
    metrics_.mixed_steps += any_prefill && any_decode;
    metrics_.max_waste_tokens = std::max(metrics_.max_waste_tokens, waste_max);
    metrics_.max_mean_waste_tokens = std::max(metrics_.max_mean_waste_tokens, static_cast<double>(waste_sum) / static_cast<double>(batch.size()));
  }
  Tensor logits = out[static_cast<size_t>(model_.logits)];
  const int64_t expect = selected_in_graph ? static_cast<int64_t>(rows.size()) : T;
  SY_CHECK(logits.rank() == 3 && logits.dim(0) == 1 && logits.dim(1) == expect,
           "logits have shape " << logits.shape().str() << ", expected [1, " << expect << ", vocab]");
  const int64_t V = logits.dim(2);
  if (selected_in_graph) return logits.reshaped(Shape{expect, V});
  // The graph computed every row: keep the selected ones.
  Tensor picked = Tensor::empty(DType::F32, Shape{static_cast<int64_t>(rows.size()), V});
  for (size_t i = 0; i < rows.size(); ++i)
    std::memcpy(picked.data<float>() + static_cast<int64_t>(i) * V, logits.data<float>() + rows[i] * V, static_cast<size_t>(V) * sizeof(float));
  return picked;
}

Tensor StepEngine::prompt_logits(const std::vector<int>& prompt) {
  GenerationRequest r;
  r.prompt = prompt;
  validate(r);
  Seq s;
  s.req = r;
  s.tokens.assign(prompt.begin(), prompt.end());
  {
    std::lock_guard<std::mutex> lock(mu_);
    s.id = next_id_++;
  }
  // One forward over the whole prompt, without the prefix cache, so every
  // position is computed; serialised with the engine thread's steps.
  std::lock_guard<std::mutex> lock(forward_mu_);
  SY_CHECK(cache_.allocate(s.id, static_cast<int32_t>(prompt.size())), "the prompt does not fit the KV cache");
  Tensor logits;
  std::vector<int64_t> rows(prompt.size());
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(i);
  try {
    logits = forward({{&s, static_cast<int32_t>(prompt.size())}}, rows);
  } catch (...) {
    cache_.release(s.id);
    throw;
  }
  cache_.release(s.id);
  return logits;
}

std::vector<float> StepEngine::last_logits(const std::vector<int>& prompt) {
  Tensor logits = prompt_logits(prompt);
  const int64_t V = logits.dim(1);
  const float* row = logits.data<float>() + (logits.dim(0) - 1) * V;
  return std::vector<float>(row, row + V);
}

}  // namespace sy
