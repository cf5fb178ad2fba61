// The prefix cache's disk tier: full blocks written behind the engine as
// they are committed, one file per block, found again by their chained hash
// after RAM evicted them or the process restarted.
//
// A file is `<dir>/<model fingerprint>/<block hash>.kv`: a header that says
// what it holds (format version, model fingerprint, KV geometry and dtype,
// the block's hash, its parent's hash and its tokens), an FNV-1a checksum
// of the payload, then each layer's key and value block bytes as the cache
// stores them. A file whose header or checksum does not match what the
// lookup expects is deleted and the reason logged: it is never served.
// Files are written to a temporary name and renamed, so a crash leaves
// either the whole block or nothing. The tier is bounded (max_bytes): the
// least recently used files go first; a restart rebuilds the index from
// the directory, oldest modification first.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace sy_cache {

// What a block's bytes mean: files of another geometry are foreign.
// (A file's header names the key rows' width; the value rows' width, which
// differs only for models whose keys and values differ in size, is fixed by
// the model the fingerprint names and checked through the payload's size.)
struct BlockGeometry {
  int32_t layers, kv_heads, row_elements, element_bytes, block_size, dtype;
  uint64_t model_fingerprint;
  int32_t value_row_elements = 0;  // 0: row_elements
  size_t rows_bytes(int32_t elements) const {
    return static_cast<size_t>(kv_heads) * static_cast<size_t>(block_size) * static_cast<size_t>(elements) * static_cast<size_t>(element_bytes);
  }
  size_t key_bytes() const { return rows_bytes(row_elements); }  // one layer's key block
  size_t value_bytes() const { return rows_bytes(value_row_elements > 0 ? value_row_elements : row_elements); }
  size_t payload_bytes() const { return static_cast<size_t>(layers) * (key_bytes() + value_bytes()); }
};

class DiskTier {
 public:
  using Log = std::function<void(const std::string&)>;
  DiskTier(const std::filesystem::path& dir, int64_t max_bytes, const BlockGeometry& g, Log log);
  ~DiskTier();  // finishes the queued writes
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  // Queues a block for writing (payload: payload_bytes(), layer by layer,
  // keys then values). A block already on disk is only marked recently used.
  void store(uint64_t hash, uint64_t parent_hash, const int32_t* tokens, std::vector<uint8_t> payload);
  // Whether a block of this hash may be on disk (the index says so).
  bool has(uint64_t hash) const;
  // Reads a block into payload, verified against the expected identity;
  // false when absent, unreadable or not what was asked (the file is then
  // deleted and the reason logged).
  bool load(uint64_t hash, uint64_t parent_hash, const int32_t* tokens, std::vector<uint8_t>& payload);
  // Waits until every queued write is on disk (tests, shutdown).
  void flush();

  int64_t bytes() const;
  int64_t hits = 0, dropped = 0;  // blocks loaded; files dropped as corrupt or foreign

 private:
  struct Write {
    uint64_t hash;
    std::vector<uint8_t> file;  // header + payload, ready to write
  };
  struct Entry {
    int64_t bytes;
    std::list<uint64_t>::iterator lru;
  };
  std::filesystem::path file_of(uint64_t hash) const;
  void touch(uint64_t hash);
  void add(uint64_t hash, int64_t bytes);
  void drop(uint64_t hash, const std::string& why);
  void evict_over_budget();
  void writer();

  std::filesystem::path dir_;
  int64_t max_bytes_;
  BlockGeometry g_;
  Log log_;
  mutable std::mutex mu_;  // the index and the queue (the writer thread reads both)
  std::condition_variable wake_, idle_;
  std::unordered_map<uint64_t, Entry> index_;
  std::list<uint64_t> lru_;  // least recently used first
  int64_t bytes_ = 0;
  std::deque<Write> queue_;
  int64_t queued_bytes_ = 0;
  bool busy_ = false, stop_ = false;
  std::thread thread_;
};

}  // namespace sy_cache
