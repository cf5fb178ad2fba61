#include "device/caching_allocator.h"

#include <cstdio>

#include "base/error.h"

namespace sy {
namespace {
constexpr size_t kSmallRound = 512;
constexpr size_t kLargeThreshold = size_t{1} << 20;
constexpr size_t kLargeRound = size_t{2} << 20;
constexpr size_t kMaxRequest = size_t{1} << 46;  // 64 TiB: larger is a corrupt size, not a tensor

std::string mib(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}
}  // namespace

CachingAllocator::CachingAllocator(std::unique_ptr<MemoryResource> memory) : memory_(std::move(memory)) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  release_cached_locked();
  if (!in_use_.empty())
    std::fprintf(stderr, "switchyard: %zu block(s) of %s still in use when its allocator was destroyed\n", in_use_.size(),
                 memory_->name().c_str());
}

size_t CachingAllocator::round_size(size_t bytes) {
  if (bytes == 0) return kSmallRound;
  if (bytes < kLargeThreshold) return (bytes + kSmallRound - 1) / kSmallRound * kSmallRound;
  return (bytes + kLargeRound - 1) / kLargeRound * kLargeRound;
}

void* CachingAllocator::allocate(size_t bytes) {
  SY_CHECK(bytes <= kMaxRequest, memory_->name() << ": refusing an allocation of " << bytes << " bytes");
  const size_t size = round_size(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.allocations;
  // Smallest cached block that fits and wastes at most a quarter of itself.
  auto it = free_.lower_bound(size);
  if (it != free_.end() && it->first - size <= it->first / 4) {
    void* p = it->second;
    size_t got = it->first;
    free_.erase(it);
    in_use_.emplace(p, got);
    stats_.bytes_in_use += got;
    ++stats_.cache_hits;
    return p;
  }
  void* p = memory_->allocate(size);
  if (!p && !free_.empty()) {
    release_cached_locked();
    ++stats_.cache_flushes;
    p = memory_->allocate(size);
  }
  if (!p)
    SY_THROW(memory_->name() << ": out of memory allocating " << mib(bytes) << " (" << mib(stats_.bytes_in_use)
                             << " in use by this engine, cache emptied)");
  ++stats_.device_allocs;
  in_use_.emplace(p, size);
  stats_.bytes_in_use += size;
  stats_.bytes_reserved += size;
  stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.bytes_reserved);
  return p;
}

void CachingAllocator::deallocate(void* ptr) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = in_use_.find(ptr);
  SY_CHECK(it != in_use_.end(), memory_->name() << ": freeing a pointer this allocator did not hand out");
  free_.emplace(it->second, ptr);
  stats_.bytes_in_use -= it->second;
  in_use_.erase(it);
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  release_cached_locked();
}

void CachingAllocator::release_cached_locked() {
  for (auto& [size, p] : free_) {
    memory_->deallocate(p, size);
    stats_.bytes_reserved -= size;
  }
  free_.clear();
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace sy
