// The raw memory of one device: what a caching allocator sits on. A CUDA
// device implements it with cudaMalloc/cudaFree; tests implement it with host
// memory, a capacity and counters, so the allocator's logic is tested
// without a GPU.
#pragma once
#include <cstddef>
#include <string>

namespace sy {

class MemoryResource {
 public:
  virtual ~MemoryResource() = default;
  // Null when the device is out of memory (not an exception: the caching
  // allocator frees its cache and retries before it reports).
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr, size_t bytes) = 0;
  virtual std::string name() const = 0;
};

}  // namespace sy
