// The ragged step engine: every forward pass runs a flattened batch of
// prefill chunks and decode tokens from many sequences over the KV cache of
// a cache-manager plugin, through the PagedAttention nodes of a graph the
// attention-fusion pass rewrote.
//
// Requests arrive from any thread (submit) into a queue served by one engine
// thread. The step is a pipeline of named parts in engine/step/, each owning
// its state: the RequestQueue (where threads meet), the StepPlanner (who
// runs with how many tokens: a scheduler plugin or the built-in FCFS
// continuous batcher; preemption by recompute when the cache is full), the
// Speculator (drafts and their verification), the Constrainer (structured
// output's masks), the StepRunner (the ragged batch laid out and run) and
// postprocessing here (tokens sampled, emitted, stops checked). The plan
// (StepPlan) is what passes from the planner to the rest. No request is
// lost and preemption does not change its output; tokens stream through
// callbacks; requests can be cancelled and carry their own limits.
#pragma once
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/decoder_model.h"
#include "engine/drafter.h"
#include "engine/kv_events.h"
#include "engine/request.h"
#include "engine/step/constrainer.h"
#include "engine/step/planner.h"
#include "engine/step/request_queue.h"
#include "engine/step/runner.h"
#include "engine/step/speculator.h"
#include "engine/step/step_counters.h"
#include "engine/step/step_options.h"
#include "engine/step_metrics.h"
#include "engine/token_masker.h"
#include "plugin_host/components.h"

namespace sy {

class StepEngine : private SequenceEnds {
 public:
  // `scheduler` may be null: the built-in FCFS continuous batcher.
  StepEngine(DecoderModel& model, PluginCacheManager& cache, PluginScheduler* scheduler = nullptr,
             StepEngineOptions options = {});
  ~StepEngine();  // stops the engine thread; unfinished requests end "cancelled"
  StepEngine(const StepEngine&) = delete;
  StepEngine& operator=(const StepEngine&) = delete;

  using Callbacks = RequestCallbacks;  // engine/request.h
  // Thread-safe. Validates the request (throws sy::Error naming the
  // problem) and queues it; returns its id. The future completes when the
  // request finishes, for whatever reason.
  uint64_t submit(const GenerationRequest& request, Callbacks callbacks, std::future<GenerationResult>* result = nullptr);
  // Thread-safe; unknown or finished ids are ignored.
  void cancel(uint64_t id);

  // Synchronous convenience: submits all, waits for all.
  std::vector<GenerationResult> generate(const std::vector<GenerationRequest>& requests, const TokenCallback& on_token = {});
  std::vector<float> last_logits(const std::vector<int>& prompt);
  // Logits [tokens, vocab] at every position of one prompt, computed in one
  // forward (teacher forcing, for quality measurements).
  Tensor prompt_logits(const std::vector<int>& prompt);
  // Every position's final hidden state [tokens, hidden] of one prompt, in
  // one forward (the LM head runs on the last row only). Throws when the
  // graph does not expose them (StepRunner::forward).
  Tensor prompt_hidden_states(const std::vector<int>& prompt);

  StepEngineMetrics metrics() const { return counters_.snapshot(); }
  // Speculative decoding: decode steps carry up to max_k draft tokens from
  // `drafter` (not owned; null turns it off), verified in the same forward.
  // adaptive_length: the speculation policy chooses each sequence's draft
  // length per step (0 when speculating would not pay); false: always max_k.
  void set_drafter(Drafter* drafter, int32_t max_k, bool adaptive_length = true);
  // Structured output: requests with a constraint are masked by `masker`
  // (not owned; it outlives the engine). Without one they are refused, with
  // `unavailable` as the reason when given.
  void set_token_masker(TokenMasker* masker, std::string unavailable = {}) { constrainer_.set(masker, std::move(unavailable)); }
  // Keep the plan of every step (off by default).
  void record_steps(bool on) { counters_.record_steps(on); }
  std::vector<StepRecord> step_records() const { return counters_.records(); }
  PluginCacheManager& cache() { return cache_; }

  // KV-cache events (kv_events.h) and KV transfer between engines
  // (step/kv_transfer.cpp: prefill on one engine, decode on another).
  int32_t kv_block_size() const { return runner_.block_size(); }
  KvEventLog& kv_events() { return kv_events_; }
  // The KV of the longest cached prefix of ids (whole blocks) in the
  // versioned transfer format; empty blocks when nothing is cached.
  std::string export_kv(const std::vector<int32_t>& ids);
  // Puts exported blocks into this engine's prefix cache (blocks it already
  // holds are kept). Returns the tokens of ids now cached. Throws
  // InvalidArgument for a malformed or foreign export (another model or KV
  // geometry), OutOfMemory when the cache cannot take the blocks.
  int32_t import_kv(const std::string& data);

 private:
  // The step, one scheduling round and forward (step_engine.cpp):
  // plan -> drafts -> layout and masks -> run -> sample, verify and emit.
  bool step();
  // One forward over a whole prompt outside the steps (no prefix cache):
  // logits of `rows`, and with `hidden` every token's hidden state.
  Tensor forward_prompt(const std::vector<int>& prompt, const std::vector<int64_t>& rows, Tensor* hidden);
  Tensor run(const StepPlan& plan, const SampledRows& sampled);
  // Postprocessing (step_postprocess.cpp): a sequence's rows of logits
  // into tokens, each emitted, stops and limits checked.
  void postprocess(const StepPlan& plan, const SampledRows& sampled, const Tensor& logits, double now);
  void advance(const StepPlan::Entry& e, const float* row, int64_t vocab, double now);
  void emit(Sequence* s, int tok, double now, const float* row, int64_t vocab);
  void keep_hidden(Sequence* s, int64_t token);
  // The engine thread's loop around the step, and what frames it.
  void loop();
  void admit_arrivals(RequestQueue::Arrivals& arrivals);
  void end_overdue();
  void fail_step(const std::string& msg);
  void note_step(const StepPlan& plan);
  void finish(Sequence* s, FinishReason reason, const std::string& error = {}) override;
  void validate(const GenerationRequest& r) const;
  double now_ms() const;
  void drain_cache_events();  // engine thread, or model_mu_ held

  DecoderModel& model_;
  PluginCacheManager& cache_;
  StepEngineOptions options_;
  std::chrono::steady_clock::time_point epoch_;
  StepCounters counters_;  // any thread reads
  RequestQueue queue_;     // where submitters, cancellers and the engine thread meet
  StepRunner runner_;
  Constrainer constrainer_;
  StepPlanner planner_;
  std::unique_ptr<Speculator> speculator_;  // with a drafter
  Tensor step_hidden_;  // this step's final hidden states [tokens, hidden], for a drafter that reads them
  KvEventLog kv_events_;
  int32_t failed_steps_ = 0;  // consecutive steps that failed before running anything
  std::vector<std::unique_ptr<Sequence>> live_;  // every sequence the engine thread holds
  std::once_flag thread_started_;
  std::thread thread_;
  // Guards the model, the cache manager and the engine thread's state
  // between the engine's steps and callers that use the model directly
  // (prompt_logits, KV export and import, set_drafter).
  std::mutex model_mu_;
};

}  // namespace sy
