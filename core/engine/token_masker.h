// Structured output inside the engine: the session's logits processor (a
// plugin) behind one lock, with the bit layout of its masks and the counters
// the metrics report. Both engine modes (baseline and step engine) call it:
// begin when a constrained request arrives, a mask before each sampled row,
// accept for each emitted token, end when the request finishes.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/step_metrics.h"
#include "plugin_host/components.h"

namespace sy {

class TokenMasker {
 public:
  explicit TokenMasker(std::unique_ptr<PluginLogitsProcessor> processor);
  int32_t vocab_size() const { return vocab_size_; }
  int32_t words_per_row() const { return words_; }
  const std::string& label() const { return processor_->label(); }

  // Throws ErrorKind::InvalidArgument with the processor's message when it
  // refuses the constraint. May run on any thread (the calls are serialised).
  // budget > 0: the tokens seq may emit at most, so the processor keeps a
  // whole match within reach of it (ABI 1.6; older processors ignore it).
  void begin(uint64_t seq, const OutputConstraint& c, int32_t budget = 0);
  // One row of words_per_row() words per sequence, in the order of seqs.
  void fill(const std::vector<uint64_t>& seqs, uint32_t* rows);
  bool accept(uint64_t seq, int32_t token);  // false: not allowed (the state is unchanged)
  void rollback(uint64_t seq, int32_t tokens);
  bool terminated(uint64_t seq);             // a stop token was accepted: nothing may follow
  void end(uint64_t seq) noexcept;           // errors are dropped: the request is over

  static bool allowed(const uint32_t* row, int32_t token) { return mask_allows(row, token); }
  // Whether the row allows any of the first n tokens.
  static bool any_allowed(const uint32_t* row, int32_t n);
  ConstraintMetrics metrics() const;

 private:
  std::unique_ptr<PluginLogitsProcessor> processor_;
  int32_t vocab_size_, words_;
  mutable std::mutex mu_;
  ConstraintMetrics metrics_;
};

}  // namespace sy
