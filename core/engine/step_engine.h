// The ragged step engine: every forward pass runs a flattened batch of
// prefill chunks and decode tokens from many sequences over the KV cache of
// a cache-manager plugin, through the PagedAttention nodes of a graph the
// attention-fusion pass rewrote.
//
// Requests arrive from any thread (submit) into an asynchronous queue served
// by one engine thread. Each step a scheduler decides who runs with how many
// tokens: a scheduler plugin when one is selected, else the built-in FCFS
// continuous batcher. When the cache is full the engine preempts (by
// recompute); no request is lost and its output does not change. Tokens are
// streamed through callbacks as they are produced; requests can be cancelled
// and carry their own limits.
#pragma once
#include <condition_variable>
#include <deque>
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
#include "engine/speculation_policy.h"
#include "engine/step_metrics.h"
#include "engine/token_masker.h"
#include "plugin_host/components.h"

namespace sy {

struct StepEngineOptions {
  int max_batch_tokens = 512;  // tokens per forward pass (the schedulers' token budget)
  int max_seqs = 64;           // sequences per forward pass
  int64_t max_prompt_tokens = 0;  // 0: the model's context
  int64_t max_queue = 0;          // requests waiting or running at once (0: no limit)
  // A plugin component the whole step depends on (the scheduler) that fails
  // this many steps in a row is taken out of service; so is a step that
  // keeps failing before it runs anything (see fail_step).
  int max_plugin_failures = 3;
  // A scheduler plugin taken out of service: false fails the queued
  // requests with its message and refuses new ones (the session is out of
  // service); true serves on with the built-in continuous batcher.
  bool scheduler_fallback_builtin = false;
};

// One step's plan, for tests and traces: which sequences ran how many tokens.
struct StepRecord {
  struct Entry {
    uint64_t request;
    int32_t tokens;
    bool prefill;  // a prompt chunk (else a decode token)
  };
  std::vector<Entry> entries;
};

class StepEngine {
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

  StepEngineMetrics metrics() const;  // a snapshot
  // Speculative decoding: decode steps carry up to max_k draft tokens from
  // `drafter` (not owned; null turns it off), verified in the same forward.
  // adaptive_length: the speculation policy chooses each sequence's draft
  // length per step (0 when speculating would not pay); false: always max_k.
  void set_drafter(Drafter* drafter, int32_t max_k, bool adaptive_length = true);
  // Structured output: requests with a constraint are masked by `masker`
  // (not owned; it outlives the engine). Without one they are refused, with
  // `unavailable` as the reason when given.
  void set_token_masker(TokenMasker* masker, std::string unavailable = {}) {
    masker_ = masker;
    no_masker_ = std::move(unavailable);
  }
  // Keep the plan of every step (off by default).
  void record_steps(bool on);
  std::vector<StepRecord> step_records() const;
  PluginCacheManager& cache() { return cache_; }

  // KV-cache events (kv_events.h) and KV transfer between engines
  // (step_kv_transfer.cpp: prefill on one engine, decode on another).
  int32_t kv_block_size() const { return block_size_; }
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
  struct Seq;
  struct Scheduled {
    Seq* seq;
    int32_t tokens;
  };
  // Which flattened token positions are sampled from (rows), and where each
  // planned sequence's first sampled row is (first[i], -1 for none).
  struct SampledRows {
    std::vector<int64_t> rows;
    std::vector<int64_t> first;
  };
  // step_engine.cpp: the queue, the thread and the step.
  void loop();
  bool step();  // one scheduling round + forward; false when idle
  void note_step(const std::vector<Scheduled>& batch);
  void advance(const Scheduled& b, const float* row, int64_t vocab, double now);
  void finish(Seq* s, FinishReason reason, const std::string& error = {});
  void fail_step(const std::string& msg);
  void note_plugin_failure(const std::string& msg);  // into the metrics
  // Runs f, a plugin call that concerns only sequence s (its cache
  // allocation, commit, release or drafts): if it throws, s fails with the
  // plugin's message and the step goes on without it. Returns false then.
  template <typename F>
  bool contained(Seq* s, F&& f);
  // step_planning.cpp: batch planning and admission.
  void fail_requests_larger_than_the_cache();
  std::vector<Scheduled> plan();  // the plugin's (contained) or the built-in one
  std::vector<Scheduled> plan_builtin();
  std::vector<Scheduled> plan_with_plugin();
  void admit(Seq* s, int32_t tokens, std::vector<Scheduled>& batch);
  void preempt(Seq* s);
  // step_layout.cpp: the ragged batch laid out into one forward. Returns
  // logits [rows.size(), vocab] for the flattened token positions in `rows`.
  SampledRows sampled_rows(const std::vector<Scheduled>& batch) const;
  Tensor forward(const std::vector<Scheduled>& batch, const std::vector<int64_t>& rows);
  // step_speculation.cpp: drafts and their verification.
  void add_drafts(std::vector<Scheduled>& batch);
  // Accepts or rejects a sequence's drafts against the target logits rows
  // starting at `row`; returns the tokens to emit.
  std::vector<int32_t> verify(Seq* s, const float* logits, int64_t vocab);
  void finish_drafted_step(Seq* s, const float* rows, int64_t vocab, double now);
  // step_constraints.cpp: structured output. Masks for the constrained
  // sequences that sample this step (drafted ones: one row per draft
  // position, drafts the constraint refuses cut off) and the checks after
  // each emitted token.
  // Fills s->masks for each draft position and the one after the last kept
  // draft; returns how many leading drafts the constraint allows.
  int32_t constrain_drafts(Seq* s, const std::vector<int32_t>& drafts);
  std::vector<Seq*> undrafted_constrained(const std::vector<Scheduled>& batch, const SampledRows& sampled) const;
  void fill_masks(const std::vector<Seq*>& seqs);
  bool accept_constrained(Seq* s, int tok);  // false: s finished (a stop, or an error)
  // row: the logits the token was chosen from (for its logprobs).
  void emit(Seq* s, int tok, double now, const float* row, int64_t vocab);
  void validate(const GenerationRequest& r) const;
  double now_ms() const;
  void drain_cache_events();  // engine thread or forward_mu_ held
  uint64_t new_seq_id();      // a sequence id for the cache manager, outside any request

  DecoderModel& model_;
  PluginCacheManager& cache_;
  PluginScheduler* scheduler_;  // null: the built-in batcher (also after a fallback)
  int32_t scheduler_failures_ = 0;  // consecutive failed plans
  int32_t failed_steps_ = 0;        // consecutive steps that failed before running anything
  std::string cache_failed_;        // the cache manager's last failed release (its blocks may be lost)
  std::string scheduler_out_;       // why the scheduler is out of service, with no fallback ("" : in service)
  Drafter* drafter_ = nullptr;
  TokenMasker* masker_ = nullptr;
  std::string no_masker_;  // why there is no masker ("" : none was selected)
  int32_t spec_k_ = 0;
  std::unique_ptr<SpeculationPolicy> spec_policy_;  // with a drafter
  StepEngineOptions options_;
  std::vector<sy_tensor> key_cache_, value_cache_;
  int32_t block_size_ = 0;
  KvEventLog kv_events_;
  std::chrono::steady_clock::time_point epoch_;

  // Shared with submitters (guarded by mu_).
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Seq>> incoming_;
  int64_t submitted_ = 0;  // under mu_
  std::vector<uint64_t> cancel_requests_;
  StepEngineMetrics metrics_;
  bool recording_ = false;
  std::vector<StepRecord> records_;
  bool stop_ = false;
  std::string out_of_service_;  // why submit refuses every request ("" : in service)
  uint64_t next_id_ = 1;
  std::thread thread_;
  std::mutex forward_mu_;  // the model runs one forward at a time

  // Engine-thread state.
  std::vector<std::unique_ptr<Seq>> live_;
  std::deque<Seq*> waiting_;
  std::vector<Seq*> running_;
};

}  // namespace sy
