// One accelerator as the executor sees it: a caching allocator over its
// memory, one stream its kernels and copies are ordered on, and host<->device
// copies. The CUDA implementation lives in device/cuda (built only with the
// CUDA toolkit); tests drive the executor through a fake backend whose
// "device memory" is host memory, so placement and transfers are tested on
// machines without a GPU.
#pragma once
#include <memory>
#include <string>

#include "base/device.h"
#include "base/tensor.h"
#include "device/caching_allocator.h"

namespace sy {

struct TransferStats {
  uint64_t to_device = 0, to_host = 0;
  uint64_t bytes_to_device = 0, bytes_to_host = 0;
};

class DeviceBackend : public std::enable_shared_from_this<DeviceBackend> {
 public:
  DeviceBackend(Device kind, int index, std::unique_ptr<MemoryResource> memory);
  virtual ~DeviceBackend();

  Device kind() const { return kind_; }
  int index() const { return index_; }
  virtual std::string description() const = 0;  // e.g. "cuda:0 NVIDIA H200 (139.8 GiB)"
  // The stream kernels must use (a cudaStream_t for CUDA).
  virtual void* stream() = 0;
  // Waits until every kernel and copy on the stream has finished.
  virtual void synchronize() = 0;

  // A tensor in device memory from the caching allocator; the block returns
  // to the cache when the last view goes away.
  Tensor allocate(DType dtype, const Shape& shape);
  // Copies in stream order. to_host returns when the bytes are on the host.
  Tensor to_device(const Tensor& host);
  Tensor to_host(const Tensor& dev);

  CachingAllocator& allocator() { return *allocator_; }
  TransferStats transfer_stats() const { return transfers_; }

 protected:
  virtual void copy_to_device(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;

 private:
  Device kind_;
  int index_;
  // Shared with the holders of live tensors, so a tensor may outlive the backend object.
  std::shared_ptr<CachingAllocator> allocator_;
  TransferStats transfers_;
};

}  // namespace sy
