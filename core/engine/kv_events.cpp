#include "engine/kv_events.h"

#include <algorithm>
#include <chrono>

namespace sy {

namespace {

constexpr uint64_t kFnvOffset = 14695981039346656037ull;  // 0xcbf29ce484222325
constexpr uint64_t kFnvPrime = 1099511628211ull;

uint64_t fnv_bytes(uint64_t h, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) {
    h ^= (value >> (8 * i)) & 0xFF;  // little-endian, whatever the host's order
    h *= kFnvPrime;
  }
  return h;
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint64_t kv_block_hash(uint64_t parent, const int32_t* tokens, int32_t n) {
  uint64_t h = fnv_bytes(kFnvOffset, parent, 8);
  for (int32_t i = 0; i < n; ++i) h = fnv_bytes(h, static_cast<uint32_t>(tokens[i]), 4);
  return h;
}

std::vector<uint64_t> kv_block_hashes(const int32_t* ids, int64_t n, int32_t block_size) {
  std::vector<uint64_t> out;
  if (block_size <= 0) return out;
  uint64_t h = 0;
  for (int64_t b = 0; (b + 1) * block_size <= n; ++b) {
    h = kv_block_hash(h, ids + b * block_size, block_size);
    out.push_back(h);
  }
  return out;
}

void KvEventLog::push(KvEvent e) {
  e.sequence = ++sequence_;
  if (queue_.size() >= capacity_) {
    // Nobody polled in time: the consumer's view is stale either way. One
    // Lost event tells it to resynchronise (enable again for a snapshot).
    queue_.clear();
    KvEvent lost{KvEventKind::Lost, e.sequence, 0, 0, {}, e.timestamp};
    queue_.push_back(std::move(lost));
    return;
  }
  queue_.push_back(std::move(e));
}

void KvEventLog::record(const std::vector<PluginCacheManager::Event>& events) {
  if (events.empty()) return;
  const double now = unix_seconds();
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& e : events) {
    if (e.kind == SY_CACHE_BLOCK_STORED) {
      uint64_t parent = 0;
      if (e.parent >= 0) {
        auto it = blocks_.find(e.parent);
        if (it == blocks_.end()) {
          ++orphans_;
          continue;
        }
        parent = it->second.hash;
      }
      const uint64_t h = kv_block_hash(parent, e.tokens.data(), static_cast<int32_t>(e.tokens.size()));
      blocks_[e.block] = Block{h, parent, ++stored_, e.tokens};
      if (capacity_) push(KvEvent{KvEventKind::Stored, 0, h, parent, e.tokens, now});
    } else if (e.kind == SY_CACHE_BLOCK_REMOVED) {
      auto it = blocks_.find(e.block);
      if (it == blocks_.end()) continue;  // an orphan's removal, or never findable
      if (capacity_) push(KvEvent{KvEventKind::Removed, 0, it->second.hash, 0, {}, now});
      blocks_.erase(it);
    } else {
      blocks_.clear();
      if (capacity_) push(KvEvent{KvEventKind::AllCleared, 0, 0, 0, {}, now});
    }
  }
}

void KvEventLog::enable(size_t capacity) {
  std::lock_guard<std::mutex> lock(mu_);
  queue_.clear();
  capacity_ = capacity;
  if (capacity_ == 0) return;
  std::vector<const Block*> snapshot;
  for (const auto& [index, b] : blocks_) snapshot.push_back(&b);
  std::sort(snapshot.begin(), snapshot.end(), [](const Block* a, const Block* b) { return a->order < b->order; });
  const double now = unix_seconds();
  for (const Block* b : snapshot) push(KvEvent{KvEventKind::Stored, 0, b->hash, b->parent, b->tokens, now});
}

std::vector<KvEvent> KvEventLog::poll(size_t max) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<KvEvent> out;
  while (!queue_.empty() && out.size() < max) {
    out.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  return out;
}

uint64_t KvEventLog::orphans() const {
  std::lock_guard<std::mutex> lock(mu_);
  return orphans_;
}

}  // namespace sy
