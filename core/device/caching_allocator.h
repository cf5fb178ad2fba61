// A caching allocator for device memory, in the manner of PyTorch's CUDA
// allocator reduced to what a decoder needs: cudaMalloc/cudaFree synchronise
// the device and cost tens of microseconds, while a decode step allocates the
// same few hundred activation sizes every time. Freed blocks are kept in
// per-size free lists and handed out again; the cache is emptied and the
// allocation retried before an out-of-memory is reported.
//
// Sizes are rounded so that nearby requests share blocks: to 512 bytes below
// 1 MiB, to 2 MiB above (a decode step's shapes grow by one position at a
// time). A cached block is reused for a request when it wastes at most a
// quarter of itself, so a 1 GiB block never serves a 1 KiB tensor.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "device/memory_resource.h"

namespace sy {

struct AllocatorStats {
  size_t bytes_in_use = 0;     // handed out and not yet returned (rounded sizes)
  size_t bytes_reserved = 0;   // in use + cached, i.e. what the device gave us
  size_t peak_reserved = 0;
  uint64_t allocations = 0;    // calls to allocate()
  uint64_t cache_hits = 0;     // served from the cache
  uint64_t device_allocs = 0;  // calls into the memory resource
  uint64_t cache_flushes = 0;  // times the cache was emptied to satisfy a request
};

class CachingAllocator {
 public:
  explicit CachingAllocator(std::unique_ptr<MemoryResource> memory);
  ~CachingAllocator();  // returns every cached block; blocks still in use are a caller bug, reported to stderr
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Throws sy::Error naming the device, the request and the allocator's state
  // when the memory resource refuses even after the cache is emptied.
  void* allocate(size_t bytes);
  void deallocate(void* ptr);
  // Returns every cached (free) block to the device.
  void empty_cache();

  AllocatorStats stats() const;
  static size_t round_size(size_t bytes);
  MemoryResource& memory() { return *memory_; }

 private:
  void release_cached_locked();
  std::unique_ptr<MemoryResource> memory_;
  mutable std::mutex mu_;
  std::multimap<size_t, void*> free_;           // rounded size -> block
  std::unordered_map<void*, size_t> in_use_;    // block -> rounded size
  AllocatorStats stats_;
};

}  // namespace sy
