// The step engine's request queue and thread, the step itself (plan, lay
// out, run, verify or emit), finishing and metrics. The parts it calls
// live beside it: step_planning.cpp, step_layout.cpp, step_speculation.cpp.
#include "engine/step_engine.h"

#include "engine/step_sequence.h"

#include <algorithm>
#include <chrono>

namespace sy {


StepEngine::StepEngine(DecoderModel& model, PluginCacheManager& cache, PluginScheduler* scheduler, StepEngineOptions options)
    : model_(model),
      cache_(cache),
      scheduler_(scheduler),
      options_(options),
      kv_events_(cache.storage(0).first.device),
      epoch_(std::chrono::steady_clock::now()) {
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
  drain_cache_events();  // the first call tells the cache manager to record them
}

// The cache manager's events since the last step, into the event log. A
// failure here costs the events, not the step.
void StepEngine::drain_cache_events() {
  if (!cache_.has_events()) return;
  try {
    kv_events_.record(cache_.take_events());
  } catch (const std::exception& e) {
    note_plugin_failure(e.what());
  }
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
    if (s->constrained) masker_->end(s->id);
    s->result.finish_reason = FinishReason::Cancelled;
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
  SY_CHECK(r.constraint.empty() || masker_, "the request asks for structured output (" << r.constraint.kind << ") but "
                                                << (no_masker_.empty() ? "this profile has no logits processor ('logits_processor:' in the manifest)"
                                                                       : no_masker_));
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    s->id = next_id_++;
  }
  if (!request.constraint.empty()) {
    // Compiled here, on the submitting thread: a constraint the processor
    // refuses is the caller's error, thrown like any invalid request.
    masker_->begin(s->id, request.constraint);
    s->constrained = true;
  }
  struct EndUnlessQueued {
    TokenMasker* masker;
    Seq* s;
    ~EndUnlessQueued() {
      if (s && s->constrained) masker->end(s->id);
    }
  } end_unless_queued{masker_, s.get()};
  if (result) *result = s->promise.get_future();
  const uint64_t id = s->id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    SY_CHECK(!stop_, "the engine is shutting down");
    SY_CHECK_KIND(out_of_service_.empty(), ErrorKind::PluginFailure, out_of_service_);
    // Every submitted request ends in finish(), which counts it under mu_.
    const int64_t queued = submitted_ - (metrics_.finished + metrics_.cancelled + metrics_.failed);
    SY_CHECK(options_.max_queue <= 0 || queued < options_.max_queue,
             "the engine has " << queued << " requests queued or running, the limit (limits.max_queue) is " << options_.max_queue);
    ++submitted_;
    end_unless_queued.s = nullptr;
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
    if (r.finish_reason == FinishReason::Error) throw Error(r.error);
  return out;
}

void StepEngine::set_drafter(Drafter* drafter, int32_t max_k, bool adaptive_length) {
  std::lock_guard<std::mutex> lock(forward_mu_);
  drafter_ = drafter;
  spec_k_ = drafter ? std::max(1, max_k) : 0;
  spec_policy_ = drafter ? std::make_unique<SpeculationPolicy>(spec_k_, adaptive_length) : nullptr;
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
          if (s->id == id && !s->finished()) finish(s.get(), FinishReason::Cancelled);
      double now = now_ms();
      for (auto& s : live_)
        if (!s->finished() && s->req.max_tokens == 0) finish(s.get(), FinishReason::Length);
        else if (!s->finished() && s->req.timeout_ms > 0 && now - s->arrival_ms > s->req.timeout_ms) finish(s.get(), FinishReason::Timeout);
      try {
        worked = step();
        failed_steps_ = 0;
      } catch (const std::exception& e) {
        fail_step(e.what());
        worked = true;
      }
      std::erase_if(live_, [](const auto& s) { return s->finished(); });
      drain_cache_events();
    }
    if (!worked) {
      // Nothing ran (a batching window is open): wait for news briefly.
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(1), [&] { return stop_ || !incoming_.empty() || !cancel_requests_.empty(); });
    }
  }
  std::lock_guard<std::mutex> guard(forward_mu_);
  for (auto& s : live_)
    if (!s->finished()) finish(s.get(), FinishReason::Cancelled);
  live_.clear();
}

// A step that threw (a kernel, or a plugin call that concerns the whole
// step: the cache's statistics, a scheduler out of retries) fails the
// requests it was running; the engine serves on. A step that keeps failing
// before anything runs would leave the waiting requests queued forever
// behind it: after max_plugin_failures such steps in a row they fail too,
// with the same message.
void StepEngine::fail_step(const std::string& msg) {
  const bool ran_something = !running_.empty();
  for (Seq* s : std::vector<Seq*>(running_)) finish(s, FinishReason::Error, msg);
  if (ran_something) {
    failed_steps_ = 0;
    return;
  }
  if (++failed_steps_ < options_.max_plugin_failures) return;
  for (Seq* s : std::vector<Seq*>(waiting_.begin(), waiting_.end()))
    finish(s, FinishReason::Error, msg + " (the step failed " + std::to_string(failed_steps_) + " times in a row before running anything)");
  failed_steps_ = 0;
}

void StepEngine::note_plugin_failure(const std::string& msg) {
  std::lock_guard<std::mutex> lock(mu_);
  ++metrics_.plugin_failures;
  metrics_.last_plugin_failure = msg;
}

void StepEngine::finish(Seq* s, FinishReason reason, const std::string& error) {
  if (s->finished()) return;
  s->state = SeqState::Finished;
  if (s->holds_cache) {
    try {
      cache_.release(s->id);
    } catch (const std::exception& e) {
      // The request's result stands (its tokens are all there); the cache
      // manager may have kept its blocks. Recorded, so that a later request
      // the cache then cannot hold is told why.
      cache_failed_ = e.what();
      note_plugin_failure(e.what());
    }
    s->holds_cache = false;
  }
  std::erase(running_, s);
  std::erase(waiting_, s);
  if (s->constrained) masker_->end(s->id);
  if (drafter_) {
    spec_policy_->forget(s->id);
    try {
      drafter_->release(s->id);
    } catch (const std::exception& e) {
      note_plugin_failure(e.what());
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
    ++(reason == FinishReason::Cancelled ? metrics_.cancelled : reason == FinishReason::Error ? metrics_.failed : metrics_.finished);
    metrics_.running = static_cast<int32_t>(running_.size());
    metrics_.waiting = static_cast<int32_t>(waiting_.size());
    if (stats.total_blocks > 0) metrics_.used_blocks = stats.total_blocks - stats.free_blocks;
  }
  if (s->callbacks.on_finish) s->callbacks.on_finish(s->id, s->result);
  s->promise.set_value(s->result);
}






// One scheduling round and forward: plan, lay out, run, then verify or emit.
bool StepEngine::step() {
  if (waiting_.empty() && running_.empty()) return false;
  fail_requests_larger_than_the_cache();
  const size_t live_before = waiting_.size() + running_.size();
  std::vector<Scheduled> batch = plan();
  if (batch.empty()) return waiting_.size() + running_.size() != live_before;  // a failed admission is progress
  if (drafter_) {
    add_drafts(batch);
    std::erase_if(batch, [](const Scheduled& b) { return b.seq->finished(); });  // its drafter failed it
    if (batch.empty()) return true;
  }
  note_step(batch);
  const SampledRows sampled = sampled_rows(batch);
  // Masks of the constrained sequences that sample, filled while the
  // forward runs (the processor only reads what they have accepted).
  std::vector<Seq*> masked;
  if (masker_) masked = undrafted_constrained(batch, sampled);
  std::future<void> masks;
  if (!masked.empty()) masks = std::async(std::launch::async, [this, &masked] { fill_masks(masked); });
  const double started = now_ms();
  const Tensor logits = forward(batch, sampled.rows);
  const double now = now_ms();
  if (masks.valid()) {
    try {
      masks.get();
    } catch (const std::exception& e) {
      for (Seq* s : masked) finish(s, FinishReason::Error, e.what());
    }
  }
  if (spec_policy_) {
    int32_t tokens = 0;
    for (const auto& b : batch) tokens += b.tokens;
    spec_policy_->record_step(tokens, now - started);
  }
  const int64_t V = logits.dim(1);
  if (masker_ && V != masker_->vocab_size())
    for (const auto& b : batch)
      if (b.seq->constrained)
        finish(b.seq, FinishReason::Error, masker_->label() + " masks " + std::to_string(masker_->vocab_size()) +
                                               " tokens; the model's logits have " + std::to_string(V));
  for (size_t i = 0; i < batch.size(); ++i) {
    const float* rows = sampled.first[i] >= 0 ? logits.data<float>() + sampled.first[i] * V : nullptr;
    if (batch[i].seq->finished()) continue;  // its masks failed
    if (!batch[i].seq->drafts.empty()) finish_drafted_step(batch[i].seq, rows, V, now);
    else advance(batch[i], rows, V, now);
  }
  return true;
}

// A plain step of one sequence: its KV is now computed; a complete prompt
// (or a decode token) samples the next token.
void StepEngine::advance(const Scheduled& b, const float* row, int64_t V, double now) {
  Seq* s = b.seq;
  s->computed += b.tokens;
  if (!contained(s, [&] { cache_.commit(s->id, s->tokens.data(), s->computed); })) return;
  if (s->computed < static_cast<int32_t>(s->tokens.size())) return;  // more prompt chunks to go
  if (s->constrained) {
    if (!TokenMasker::any_allowed(s->masks.data(), static_cast<int32_t>(V))) {
      finish(s, FinishReason::Error, masker_->label() + ": the constraint allows no next token");
      return;
    }
    s->sampler.set_mask(s->masks.data());
  }
  emit(s, s->sampler.sample(row, static_cast<int>(V)), now, row, V);
}

// The step's plan into the metrics (and the trace, when recording).
void StepEngine::note_step(const std::vector<Scheduled>& batch) {
  StepRecord record;
  for (const auto& b : batch)
    record.entries.push_back({b.seq->id, b.tokens,
                              b.tokens > 1 || b.seq->result.tokens.empty() ||
                                  b.seq->computed + b.tokens < static_cast<int32_t>(b.seq->tokens.size())});
  const auto stats = cache_.stats();
  std::lock_guard<std::mutex> mlock(mu_);
  metrics_.used_blocks = stats.total_blocks - stats.free_blocks;
  metrics_.peak_used_blocks = std::max(metrics_.peak_used_blocks, metrics_.used_blocks);
  metrics_.running = static_cast<int32_t>(running_.size());
  metrics_.waiting = static_cast<int32_t>(waiting_.size());
  if (recording_) records_.push_back(std::move(record));
}

void StepEngine::emit(Seq* s, int tok, double now, const float* row, int64_t vocab) {
  if (s->constrained && !accept_constrained(s, tok)) return;
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
  if (stop_id || (s->req.stop_at_eos && model_.is_eos(tok, s->req.eos_ids))) finish(s, FinishReason::Stop);
  else if (static_cast<int>(res.tokens.size()) >= s->req.max_tokens) finish(s, FinishReason::Length);
  else if (static_cast<int64_t>(s->tokens.size()) >= model_.max_context()) finish(s, FinishReason::Context);
  else if (s->constrained && s->constraint_done) finish(s, FinishReason::Stop);
}






}  // namespace sy
