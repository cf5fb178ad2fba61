// What the step engine counts: steps, tokens, cache use, preemptions,
// speculation and plugin failures (StepEngine::metrics), structured
// output's counters, and KV-cache events. Plain data, part of the public
// facade's vocabulary (facade/engine.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace sy {

struct StepEngineMetrics {
  int64_t steps = 0;
  int64_t prompt_tokens = 0;    // prompt tokens of all requests
  int64_t cached_tokens = 0;    // of those, found in the prefix cache
  int64_t computed_tokens = 0;  // tokens run through the model
  int64_t kv_tokens_read = 0;   // sum over steps of every sequence's context length (KV read by attention)
  int64_t generated_tokens = 0;
  int64_t preemptions = 0;
  int64_t mixed_steps = 0;      // steps that ran prefill chunks and decode tokens together
  // Speculative decoding (vLLM's names): drafts, proposed and accepted tokens,
  // accepted tokens by draft position.
  int64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
  // Of spec_drafts, those verified as trees (a drafter's propose_tree, ABI 1.9).
  int64_t spec_tree_drafts = 0;
  // Drafts dropped because the drafter proposed a token id outside the
  // vocabulary, or a malformed tree: that sequence decodes without
  // speculation for the step.
  int64_t spec_invalid_drafts = 0;
  // Decoding sequence-steps the speculation policy gave no draft tokens
  // (speculation would not have paid: a large batch, a low acceptance rate).
  int64_t spec_declined = 0;
  std::string spec_last_invalid;  // what the last dropped draft held, for logs and tests
  std::vector<int64_t> spec_accepted_per_pos;
  double spec_acceptance_rate() const { return spec_draft_tokens ? static_cast<double>(spec_accepted_tokens) / static_cast<double>(spec_draft_tokens) : 0; }
  // 1 + accepted / drafts: tokens emitted per verification step.
  double spec_mean_accepted_length() const { return spec_drafts ? 1.0 + static_cast<double>(spec_accepted_tokens) / static_cast<double>(spec_drafts) : 0; }
  int64_t finished = 0, cancelled = 0, failed = 0;
  // Plugin failures that failed no request: a scheduler's plan that failed
  // (it is asked again), a cache release or drafter release at a request's
  // end; and the last one's message (it names the plugin).
  int64_t plugin_failures = 0;
  std::string last_plugin_failure;
  int32_t total_blocks = 0;
  int32_t used_blocks = 0;
  int32_t peak_used_blocks = 0;
  int32_t running = 0, waiting = 0;
  int32_t peak_running = 0;  // the most sequences one step held
  // KV slots held but not holding a token, per sequence: the worst step's
  // average over its sequences, and the worst single sequence.
  double max_mean_waste_tokens = 0;
  int64_t max_waste_tokens = 0;
  double prefix_hit_rate() const { return prompt_tokens ? static_cast<double>(cached_tokens) / static_cast<double>(prompt_tokens) : 0.0; }
};

// Structured output's counters (the logits processor's).
struct ConstraintMetrics {
  int64_t requests = 0;        // requests that carried a constraint
  int64_t refused = 0;         // of those, constraints the processor refused (bad schema, unknown kind)
  double compile_ms = 0;       // total time in begin (grammar compilation, or a cache hit)
  double last_compile_ms = 0;
  int64_t mask_rows = 0;       // masks filled
  double mask_ms = 0;          // total time filling them
};

// Block i's hash: 64-bit FNV-1a over the previous block's hash (8 bytes,
// little-endian; 0 before the first block) followed by the block's tokens
// (4 bytes each, little-endian). Documented in switchyard.h (sy_block_hashes).
uint64_t kv_block_hash(uint64_t parent, const int32_t* tokens, int32_t n);
// The hashes of the full blocks of ids, in order.
std::vector<uint64_t> kv_block_hashes(const int32_t* ids, int64_t n, int32_t block_size);

// A change to the prefix cache, named by block hash (engine/kv_events.h).
enum class KvEventKind : int32_t { Stored = 1, Removed = 2, AllCleared = 3, Lost = 4 };

struct KvEvent {
  KvEventKind kind;
  uint64_t sequence;     // 1, 2, 3, ... in the order the cache changed
  uint64_t hash = 0;     // Stored, Removed
  uint64_t parent = 0;   // Stored: the previous block's hash (0: the first block)
  std::vector<int32_t> tokens;  // Stored
  double timestamp = 0;  // seconds since the Unix epoch
};

}  // namespace sy
