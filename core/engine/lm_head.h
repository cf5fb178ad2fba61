// The target model's LM head on its own: the nodes the logits-selection pass
// put between the selected hidden rows and `logits` (the head's MatMul, float
// or quantized, and any elementwise tail such as soft-capping), copied into a
// graph of their own that shares the target's weights. Drafters that propose
// from hidden states (Medusa-style heads) score their rows with it, and the
// embedding API projects caller-given rows with it: the same kernels and the
// same weights as the target's own logits, at no extra weight memory.
#pragma once
#include <memory>

#include "base/tensor.h"
#include "graph/graph.h"
#include "kernels/registry.h"
#include "runtime/executor.h"

namespace sy {

class LmHead {
 public:
  // nullptr when `prepared` has no split-off head (no `logits_indices`
  // input: the logits-selection pass did not run or left the head alone).
  static std::unique_ptr<LmHead> split_off(const Graph& prepared, const KernelRegistry& registry, ThreadPool* threads);

  // rows [n, hidden] -> logits [n, vocab]. Thread-safe (runs are serialised).
  Tensor project(const Tensor& rows);
  int64_t hidden_size() const { return hidden_; }  // -1 when not static
  int64_t vocab_size() const { return vocab_; }    // -1 when not static

 private:
  std::unique_ptr<Executor> executor_;
  int64_t hidden_ = -1, vocab_ = -1;
};

}  // namespace sy
