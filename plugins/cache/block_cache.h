// A block-based KV cache: fixed-size blocks from a free list, per-sequence
// block tables, reference counts, and optionally prefix caching (full blocks
// found by a hash chained with their prefix, verified token by token, reused
// across requests, LRU eviction of unreferenced blocks, copy-on-write when a
// sequence writes into a shared block).
//
// "contiguous" is this cache with one block the size of a whole sequence;
// "paged" uses small blocks; "prefix-caching" adds the sharing.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>
#include <memory>

#include <switchyard/plugin.h>

#include "disk_tier.h"

namespace sy_cache {

struct Config {
  int32_t layers, kv_heads;
  int32_t head_dim;  // elements per stored key row (a quantized row: head_dim codes + its scale's bytes)
  int32_t block_size;
  int64_t num_blocks;
  bool prefix_caching;
  // Elements per stored value row, where values differ in size from keys
  // (latent attention caches the latent as keys, the rotary key as values). 0: head_dim.
  int32_t value_dim = 0;
  // Sliding-window attention: blocks wholly before the window of every
  // future query are freed (their table entries become -1). 0 = off.
  int32_t window = 0;
  // Where the KV storage lives (SY_DEVICE_*). On a device, storage comes from
  // host->device_alloc and copy-on-write copies go through `device_copy`.
  int32_t device = SY_DEVICE_CPU;
  // Bytes per stored element: 4 (float32), 2 (float16 / bfloat16), 1 (int8 / fp8 rows).
  int32_t element_bytes = 4;
  // The prefix cache's disk tier (disk_tier.h): off when disk_dir is empty.
  // Files are keyed by the model's fingerprint; dtype is what they hold.
  std::string disk_dir{};
  int64_t disk_bytes = 0;
  uint64_t model_fingerprint = 0;
  int32_t dtype = 0;
};

// Copies `bytes` within device memory, in the order of the device's stream.
using DeviceCopy = void (*)(void* dst, const void* src, size_t bytes);

// The copy function for KV storage on `device` (cache_plugin_cuda.cpp in a
// CUDA build); null when this build cannot keep KV there.
DeviceCopy device_copy_for(int32_t device);

class BlockCache {
 public:
  BlockCache(const Config& c, const sy_host_api* host, DeviceCopy device_copy = nullptr);
  ~BlockCache();
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  // Room for n more tokens of seq; false (and no change) when the cache is full.
  bool allocate(uint64_t seq, int32_t n);
  int32_t match_prefix(uint64_t seq, const int32_t* tokens, int32_t n);
  void commit(uint64_t seq, const int32_t* tokens, int32_t n);
  void truncate(uint64_t seq, int32_t length);
  void fork(uint64_t parent, uint64_t child);
  void release(uint64_t seq);
  const std::vector<int32_t>& table(uint64_t seq) const;
  void* keys(int32_t layer) { return k_[static_cast<size_t>(layer)]; }
  void* values(int32_t layer) { return v_[static_cast<size_t>(layer)]; }
  const Config& config() const { return c_; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size() + lru_.size()); }
  int64_t prefix_queries = 0, prefix_hits = 0;
  int64_t disk_hits = 0;  // of prefix_hits, tokens read back from the disk tier
  // The blocks made findable (stored) and no longer findable (removed) since
  // the last call, oldest first; valid until the next call.
  const std::vector<sy_cache_event>& take_events();
  // The disk tier, or null (tests flush it).
  DiskTier* disk() { return disk_.get(); }

 private:
  struct Seq {
    std::vector<int32_t> blocks;
    int32_t length = 0;     // tokens reserved
    int32_t committed = 0;  // full blocks registered for sharing
    uint64_t last_hash = 0;
  };
  struct Cached {
    uint64_t hash;
    int32_t parent;  // previous block in the chain, -1 for the first
    std::vector<int32_t> tokens;
    std::list<int32_t>::iterator lru;  // valid while unreferenced
    bool in_lru = false;
  };
  int32_t take_block();  // from the free list, else evict the least recently used cached block
  void drop_ref(int32_t block);
  void uncache(int32_t block);
  void copy_block(int32_t from, int32_t to);
  // Makes a full block findable by its chained hash (its parent block, its
  // tokens), with a STORED event: a block just computed or read from disk.
  void register_block(int32_t block, uint64_t hash, int32_t parent, const int32_t* tokens);
  // The disk tier: a committed block's bytes out, a block's bytes back in.
  void store_on_disk(int32_t block, uint64_t hash, uint64_t parent_hash, const int32_t* tokens);
  bool load_from_disk(int32_t block, uint64_t hash, uint64_t parent_hash, const int32_t* tokens);
  Seq& seq(uint64_t id);
  static uint64_t chain_hash(uint64_t parent, const int32_t* tokens, int32_t n);

  Config c_;
  const sy_host_api* host_;
  DeviceCopy device_copy_;
  void* storage_alloc(size_t bytes);
  void storage_free(void* p);
  size_t k_block_bytes_, v_block_bytes_;  // one layer's key (value) block
  std::vector<std::byte*> k_, v_;
  std::unique_ptr<DiskTier> disk_;
  std::vector<int32_t> free_;
  std::vector<int32_t> refs_;
  std::unordered_map<uint64_t, Seq> seqs_;
  std::unordered_map<int32_t, Cached> cached_;         // block -> its identity
  std::unordered_multimap<uint64_t, int32_t> by_hash_;  // hash -> block
  std::list<int32_t> lru_;                              // unreferenced cached blocks, oldest first
  // KV-cache events: pending since the last take_events, and the ones it
  // last returned (with the token lists their pointers point into).
  struct EventLog {
    std::vector<sy_cache_event> events;
    std::deque<std::vector<int32_t>> tokens;
  };
  EventLog pending_events_, taken_events_;
  // Recorded only once a host has asked (a host older than ABI 1.5 never
  // takes them, and they would pile up).
  bool events_wanted_ = false;
};

}  // namespace sy_cache
