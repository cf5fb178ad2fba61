// KV-cache events and block hashes: what an external router needs to send a
// request to the engine that already holds its prompt prefix (llm-d, NVIDIA
// Dynamo and SGLang's router work this way).
//
// The cache manager plugin reports blocks by index (sy_cache_event); this
// log names them by a hash chained over the prefix, the same hash
// kv_block_hashes computes for any token sequence, so a router that sees the
// events and hashes a request's prompt finds the longest cached prefix by
// walking the prompt's hashes. The hash is defined here, not by the plugin,
// so every cache manager reports the same one.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "engine/step_metrics.h"
#include "plugin_host/components.h"

namespace sy {

// Thread-safe: the engine records, any thread enables and polls.
class KvEventLog {
 public:
  explicit KvEventLog(int32_t device = 0) : device_(device) {}
  int32_t device() const { return device_; }
  // Translates the cache manager's events (block indices) into hashed ones,
  // queued when recording is on. Events of blocks whose parent is unknown
  // (a cache manager that broke the parent-first order) are counted, not queued.
  void record(const std::vector<PluginCacheManager::Event>& events);
  // capacity > 0: start recording (at most capacity events wait; on
  // overflow the queue is replaced by one Lost event), beginning with a
  // Stored event for every block already findable, parents first, so a
  // router that starts late sees the whole cache. 0: stop and drop the queue.
  void enable(size_t capacity);
  std::vector<KvEvent> poll(size_t max);
  uint64_t orphans() const;

 private:
  struct Block {
    uint64_t hash, parent;
    uint64_t order;  // when it was stored: parents come before children
    std::vector<int32_t> tokens;
  };
  void push(KvEvent e);  // with mu_ held, while recording (capacity_ > 0)

  const int32_t device_;
  mutable std::mutex mu_;
  std::unordered_map<int32_t, Block> blocks_;  // findable blocks by index
  uint64_t stored_ = 0, sequence_ = 0, orphans_ = 0;
  size_t capacity_ = 0;  // 0: not recording
  std::deque<KvEvent> queue_;
};

}  // namespace sy
