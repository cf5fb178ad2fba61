#include "engine/token_masker.h"

#include <chrono>

namespace sy {

namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

TokenMasker::TokenMasker(std::unique_ptr<PluginLogitsProcessor> processor)
    : processor_(std::move(processor)), vocab_size_(processor_->vocab_size()), words_((vocab_size_ + 31) / 32) {}

void TokenMasker::begin(uint64_t seq, const OutputConstraint& c, int32_t budget) {
  std::lock_guard<std::mutex> lock(mu_);
  ++metrics_.requests;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    processor_->begin(seq, c.kind, c.spec);
  } catch (...) {
    ++metrics_.refused;
    throw;
  }
  if (budget > 0) {
    try {
      processor_->set_token_budget(seq, budget);
    } catch (...) {
      processor_->end(seq);
      throw;
    }
  }
  metrics_.last_compile_ms = ms_since(t0);
  metrics_.compile_ms += metrics_.last_compile_ms;
}

void TokenMasker::fill(const std::vector<uint64_t>& seqs, uint32_t* rows) {
  if (seqs.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  const auto t0 = std::chrono::steady_clock::now();
  processor_->fill_masks(seqs.data(), static_cast<int32_t>(seqs.size()), rows, words_);
  metrics_.mask_ms += ms_since(t0);
  metrics_.mask_rows += static_cast<int64_t>(seqs.size());
}

bool TokenMasker::accept(uint64_t seq, int32_t token) {
  std::lock_guard<std::mutex> lock(mu_);
  return processor_->accept(seq, token);
}

void TokenMasker::rollback(uint64_t seq, int32_t tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  processor_->rollback(seq, tokens);
}

bool TokenMasker::terminated(uint64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  return (processor_->query(seq) & SY_CONSTRAINT_TERMINATED) != 0;
}

void TokenMasker::end(uint64_t seq) noexcept {
  try {
    std::lock_guard<std::mutex> lock(mu_);
    processor_->end(seq);
  } catch (...) {
  }
}

bool TokenMasker::any_allowed(const uint32_t* row, int32_t n) {
  for (int32_t w = 0; w < n / 32; ++w)
    if (row[w]) return true;
  for (int32_t t = n / 32 * 32; t < n; ++t)
    if (allowed(row, t)) return true;
  return false;
}

ConstraintMetrics TokenMasker::metrics() const {
  std::lock_guard<std::mutex> lock(mu_);
  return metrics_;
}

}  // namespace sy
