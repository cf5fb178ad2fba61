// The step engine's limits, from the manifest (max_batch_tokens, max_seqs,
// limits.*, scheduler.on_failure).
#pragma once
#include <cstdint>

namespace sy {

struct StepEngineOptions {
  int max_batch_tokens = 512;  // tokens per forward pass (the schedulers' token budget)
  int max_seqs = 64;           // sequences per forward pass
  int64_t max_prompt_tokens = 0;  // 0: the model's context
  int64_t max_queue = 0;          // requests waiting or running at once (0: no limit)
  // A plugin component the whole step depends on (the scheduler) that fails
  // this many steps in a row is taken out of service; so is a step that
  // keeps failing before it runs anything (StepEngine::fail_step).
  int max_plugin_failures = 3;
  // A scheduler plugin taken out of service: false fails the queued
  // requests with its message and refuses new ones (the session is out of
  // service); true serves on with the built-in continuous batcher.
  bool scheduler_fallback_builtin = false;
};

}  // namespace sy
