#include "device/device_backend.h"

namespace sy {

DeviceBackend::DeviceBackend(Device kind, int index, std::unique_ptr<MemoryResource> memory)
    : kind_(kind), index_(index), allocator_(std::make_shared<CachingAllocator>(std::move(memory))) {}

DeviceBackend::~DeviceBackend() = default;

Tensor DeviceBackend::allocate(DType dtype, const Shape& shape) {
  SY_CHECK(dtype_size(dtype) > 0, "cannot allocate a tensor of type " << dtype_name(dtype));
  size_t bytes = checked_tensor_bytes(dtype, shape);
  void* p = allocator_->allocate(bytes);
  std::shared_ptr<CachingAllocator> alloc = allocator_;
  std::shared_ptr<void> holder(p, [alloc](void* q) { alloc->deallocate(q); });
  return Tensor(dtype, shape, std::move(holder), p, kind_);
}

Tensor DeviceBackend::to_device(const Tensor& host) {
  SY_CHECK(host.on_host(), "to_device: the source is already a " << device_name(host.device()) << " tensor");
  Tensor d = allocate(host.dtype(), host.shape());
  if (host.bytes()) copy_to_device(d.raw(), host.raw(), host.bytes());
  ++transfers_.to_device;
  transfers_.bytes_to_device += host.bytes();
  return d;
}

Tensor DeviceBackend::to_host(const Tensor& dev) {
  SY_CHECK(dev.device() == kind_, "to_host: the source is not a " << device_name(kind_) << " tensor");
  Tensor h = Tensor::empty(dev.dtype(), dev.shape());
  if (dev.bytes()) copy_to_host(h.raw(), dev.raw(), dev.bytes());
  ++transfers_.to_host;
  transfers_.bytes_to_host += dev.bytes();
  return h;
}

}  // namespace sy
