// The step engine: requests in (submit, cancel), the engine thread's loop,
// the step itself, and how a sequence ends. The parts the step calls live
// in engine/step/; postprocessing in step_postprocess.cpp.
#include "engine/step_engine.h"

#include <algorithm>
#include <cstring>
#include <chrono>

namespace sy {

namespace {

DecoderModel& paged(DecoderModel& model) {
  SY_CHECK(model.paged_attention(), model.path() << ": the step engine needs the attention-fusion pass to have fused "
                                                    "every layer's attention");
  return model;
}

StepEngineOptions checked(StepEngineOptions o) {
  SY_CHECK(o.max_batch_tokens > 0 && o.max_seqs > 0, "step engine: max_batch_tokens and max_seqs must be positive");
  return o;
}

}  // namespace

StepEngine::StepEngine(DecoderModel& model, PluginCacheManager& cache, PluginScheduler* scheduler, StepEngineOptions options)
    : model_(paged(model)),
      cache_(cache),
      options_(checked(options)),
      epoch_(std::chrono::steady_clock::now()),
      runner_(model_, cache_, counters_),
      constrainer_(*this),
      planner_(cache_, scheduler, options_, runner_.block_size(), *this, queue_, counters_, [this] { return now_ms(); }),
      kv_events_(cache.storage(0).first.device) {
  counters_.update([&](StepEngineMetrics& m) { m.total_blocks = cache_.stats().total_blocks; });
  drain_cache_events();  // the first call tells the cache manager to record them
}

StepEngine::~StepEngine() {
  queue_.stop();
  if (thread_.joinable()) thread_.join();
  // Requests that never reached the engine thread.
  for (auto& s : queue_.drain()) {
    constrainer_.end(s.get());
    s->result.finish_reason = FinishReason::Cancelled;
    s->promise.set_value(s->result);
  }
}

// ---- requests in (any thread)

void StepEngine::validate(const GenerationRequest& r) const {
  model_.check_prompt(r.prompt);
  SY_CHECK(options_.max_prompt_tokens <= 0 || static_cast<int64_t>(r.prompt.size()) <= options_.max_prompt_tokens,
           "the prompt has " << r.prompt.size() << " tokens, over the limit of " << options_.max_prompt_tokens << " (limits.max_prompt_tokens)");
  SY_CHECK(r.max_tokens >= 0, "max_tokens must be >= 0, got " << r.max_tokens);
  SY_CHECK(r.timeout_ms >= 0, "timeout_ms must be >= 0");
  Sampler check(r.sampling);  // throws for bad sampling parameters
  (void)check;
  constrainer_.check(r);
}

uint64_t StepEngine::submit(const GenerationRequest& request, Callbacks callbacks, std::future<GenerationResult>* result) {
  validate(request);
  auto s = std::make_unique<Sequence>();
  s->id = queue_.new_id();
  s->req = request;
  s->callbacks = std::move(callbacks);
  s->tokens.assign(request.prompt.begin(), request.prompt.end());
  s->sampler = Sampler(request.sampling);
  s->sampler.set_prompt(request.prompt);
  s->arrival_ms = now_ms();
  // Compiled here, on the submitting thread: a constraint the processor
  // refuses is the caller's error, thrown like any invalid request.
  constrainer_.begin(s.get(), model_.max_context());
  if (result) *result = s->promise.get_future();
  const uint64_t id = s->id;
  try {
    queue_.push(std::move(s), options_.max_queue);  // takes s only when it queues it
  } catch (...) {
    constrainer_.end(s.get());
    throw;
  }
  std::call_once(thread_started_, [this] { thread_ = std::thread([this] { loop(); }); });
  return id;
}

void StepEngine::cancel(uint64_t id) { queue_.cancel(id); }

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
  std::lock_guard<std::mutex> lock(model_mu_);
  SequenceEnds& ends = *this;
  // Trees of drafts need every PagedAttention kernel to read token trees
  // (ABI 1.9) and the KV in host memory (the kept path is moved there).
  bool trees = runner_.key_cache()[0].device == SY_DEVICE_CPU;
  for (const NodePlacement& p : model_.executor().placements())
    if (p.op == SY_OP_DOMAIN "::" SY_OP_PAGED_ATTENTION) trees = trees && (p.capabilities & SY_KERNEL_CAP_TOKEN_TREES);
  speculator_ = drafter ? std::make_unique<Speculator>(*drafter, max_k, adaptive_length, model_, cache_, constrainer_, ends, counters_,
                                                       options_.max_batch_tokens, trees)
                        : nullptr;
}

double StepEngine::now_ms() const {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - epoch_).count();
}

// ---- the engine thread

void StepEngine::loop() {
  for (;;) {
    RequestQueue::Arrivals arrivals = queue_.take(/*idle=*/planner_.idle());
    if (arrivals.stop) break;
    bool worked = false;
    {
      std::lock_guard<std::mutex> lock(model_mu_);
      admit_arrivals(arrivals);
      end_overdue();
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
    if (!worked) queue_.wait_briefly();  // nothing ran (a batching window is open)
  }
  std::lock_guard<std::mutex> lock(model_mu_);
  for (auto& s : live_)
    if (!s->finished()) finish(s.get(), FinishReason::Cancelled);
  live_.clear();
}

// One step: schedule, draft, run, postprocess.
bool StepEngine::step() {
  if (planner_.idle()) return false;
  const size_t queued = planner_.waiting().size() + planner_.running().size();
  StepPlan plan = planner_.plan();
  if (plan.empty()) return planner_.waiting().size() + planner_.running().size() != queued;  // a failed admission is progress
  if (speculator_) {
    speculator_->propose(plan);
    plan.drop_finished();  // a drafter failed them
    if (plan.empty()) return true;
  }
  note_step(plan);
  const SampledRows sampled = SampledRows::of(plan);
  const double started = now_ms();
  const Tensor logits = run(plan, sampled);
  const double now = now_ms();
  if (speculator_) speculator_->record_step(plan.tokens(), now - started);
  postprocess(plan, sampled, logits, now);
  return true;
}

// The ragged forward, with structured output's masks filled beside it (the
// processor reads only what the sequences have accepted so far).
Tensor StepEngine::run(const StepPlan& plan, const SampledRows& sampled) {
  std::vector<Sequence*> masked = constrainer_.masker() ? constrainer_.undrafted(plan, sampled) : std::vector<Sequence*>{};
  std::future<void> masks;
  if (!masked.empty()) masks = std::async(std::launch::async, [this, &masked] { constrainer_.fill(masked); });
  const bool keep_hidden = speculator_ && speculator_->reads_hidden();
  step_hidden_ = Tensor();
  Tensor logits = runner_.forward(plan, sampled.rows, keep_hidden ? &step_hidden_ : nullptr);
  if (masks.valid()) {
    try {
      masks.get();
    } catch (const std::exception& e) {
      for (Sequence* s : masked) finish(s, FinishReason::Error, e.what());
    }
  }
  return logits;
}

void StepEngine::admit_arrivals(RequestQueue::Arrivals& arrivals) {
  int64_t prompt_tokens = 0;
  for (auto& s : arrivals.requests) {
    prompt_tokens += static_cast<int64_t>(s->tokens.size());
    planner_.add(s.get());
    live_.push_back(std::move(s));
  }
  if (prompt_tokens > 0) counters_.update([&](StepEngineMetrics& m) { m.prompt_tokens += prompt_tokens; });
  for (uint64_t id : arrivals.cancels)
    for (auto& s : live_)
      if (s->id == id && !s->finished()) finish(s.get(), FinishReason::Cancelled);
}

// Requests with nothing to generate, and those past their timeout.
void StepEngine::end_overdue() {
  const double now = now_ms();
  for (auto& s : live_)
    if (!s->finished() && s->req.max_tokens == 0) finish(s.get(), FinishReason::Length);
    else if (!s->finished() && s->req.timeout_ms > 0 && now - s->arrival_ms > s->req.timeout_ms) finish(s.get(), FinishReason::Timeout);
}

// A step that threw (a kernel, or a plugin call that concerns the whole
// step: the cache's statistics, a scheduler out of retries) fails the
// requests it was running; the engine serves on. A step that keeps failing
// before anything runs would leave the waiting requests queued forever
// behind it: after max_plugin_failures such steps in a row they fail too,
// with the same message.
void StepEngine::fail_step(const std::string& msg) {
  const bool ran_something = !planner_.running().empty();
  for (Sequence* s : std::vector<Sequence*>(planner_.running())) finish(s, FinishReason::Error, msg);
  if (ran_something) {
    failed_steps_ = 0;
    return;
  }
  if (++failed_steps_ < options_.max_plugin_failures) return;
  for (Sequence* s : std::vector<Sequence*>(planner_.waiting().begin(), planner_.waiting().end()))
    finish(s, FinishReason::Error, msg + " (the step failed " + std::to_string(failed_steps_) + " times in a row before running anything)");
  failed_steps_ = 0;
}

// The step's plan into the counters (and the trace, when recording).
void StepEngine::note_step(const StepPlan& plan) {
  StepRecord record;
  for (const auto& e : plan.entries)
    record.entries.push_back({e.seq->id, e.tokens,
                              e.tokens > 1 || e.seq->result.tokens.empty() ||
                                  e.seq->computed + e.tokens < static_cast<int32_t>(e.seq->tokens.size())});
  const auto stats = cache_.stats();
  counters_.update([&](StepEngineMetrics& m) {
    m.used_blocks = stats.total_blocks - stats.free_blocks;
    m.peak_used_blocks = std::max(m.peak_used_blocks, m.used_blocks);
    m.running = static_cast<int32_t>(planner_.running().size());
    m.peak_running = std::max(m.peak_running, m.running);
    m.waiting = static_cast<int32_t>(planner_.waiting().size());
  });
  counters_.record(std::move(record));
}

// The cache manager's events since the last step, into the event log. A
// failure here costs the events, not the step.
void StepEngine::drain_cache_events() {
  if (!cache_.has_events()) return;
  try {
    kv_events_.record(cache_.take_events());
  } catch (const std::exception& e) {
    counters_.plugin_failure(e.what());
  }
}

void StepEngine::finish(Sequence* s, FinishReason reason, const std::string& error) {
  if (s->finished()) return;
  s->state = SeqState::Finished;
  if (s->holds_cache) {
    try {
      cache_.release(s->id);
    } catch (const std::exception& e) {
      // The request's result stands (its tokens are all there); the cache
      // manager may have kept its blocks. Recorded, so that a later request
      // the cache then cannot hold is told why.
      planner_.note_cache_failure(e.what());
      counters_.plugin_failure(e.what());
    }
    s->holds_cache = false;
  }
  planner_.remove(s);
  constrainer_.end(s);
  if (speculator_) speculator_->forget(s);
  s->result.finish_reason = reason;
  s->result.error = error;
  sy_cache_stats stats{};
  try {
    stats = cache_.stats();
  } catch (const std::exception&) {
  }
  counters_.update([&](StepEngineMetrics& m) {
    ++(reason == FinishReason::Cancelled ? m.cancelled : reason == FinishReason::Error ? m.failed : m.finished);
    m.running = static_cast<int32_t>(planner_.running().size());
    m.waiting = static_cast<int32_t>(planner_.waiting().size());
    if (stats.total_blocks > 0) m.used_blocks = stats.total_blocks - stats.free_blocks;
  });
  queue_.done();
  if (s->callbacks.on_finish) s->callbacks.on_finish(s->id, s->result);
  s->promise.set_value(s->result);
}

// ---- the model used directly (serialised with the steps)

Tensor StepEngine::prompt_logits(const std::vector<int>& prompt) {
  std::vector<int64_t> rows(prompt.size());
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(i);
  return forward_prompt(prompt, rows, nullptr);
}

Tensor StepEngine::prompt_hidden_states(const std::vector<int>& prompt) {
  Tensor hidden;
  forward_prompt(prompt, {static_cast<int64_t>(prompt.size()) - 1}, &hidden);
  SY_CHECK(hidden.dtype() == DType::F32, "hidden states are " << dtype_name(hidden.dtype()) << "; embeddings read float32");
  // A copy: the executor's buffer is reused by the next step.
  Tensor out = Tensor::empty(DType::F32, hidden.shape());
  std::memcpy(out.data<float>(), hidden.data<float>(), static_cast<size_t>(hidden.numel()) * sizeof(float));
  return out;
}

Tensor StepEngine::forward_prompt(const std::vector<int>& prompt, const std::vector<int64_t>& rows, Tensor* hidden) {
  GenerationRequest r;
  r.prompt = prompt;
  validate(r);
  Sequence s;
  s.id = queue_.new_id();
  s.req = r;
  s.tokens.assign(prompt.begin(), prompt.end());
  // One forward over the whole prompt, without the prefix cache, so every
  // position is computed.
  std::lock_guard<std::mutex> lock(model_mu_);
  SY_CHECK(cache_.allocate(s.id, static_cast<int32_t>(prompt.size())), "the prompt does not fit the KV cache");
  Tensor logits;
  try {
    logits = runner_.forward(StepPlan{{{&s, static_cast<int32_t>(prompt.size())}}}, rows, hidden);
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
