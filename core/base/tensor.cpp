#include "base/tensor.h"

#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <mutex>
#include <sstream>

namespace sy {

const char* device_name(Device d) { return d == Device::CUDA ? "cuda" : "cpu"; }

std::string Shape::str() const {
  std::ostringstream os;
  os << '[';
  for (int i = 0; i < rank_; ++i) os << (i ? "," : "") << d_[static_cast<size_t>(i)];
  os << ']';
  return os.str();
}

namespace {
constexpr size_t kAlign = 64;  // cache line; also AVX-512 friendly
constexpr uint64_t kMaxTensorBytes = uint64_t{1} << 40;

// Bytes of a tensor, refusing shapes whose size overflows or is absurd
// (a hostile model can ask Expand or ConstantOfShape for anything).
size_t checked_bytes(DType dtype, const Shape& shape) {
  uint64_t bytes = dtype_size(dtype);
  for (int64_t d : shape) {
    SY_CHECK(d >= 0, "negative dimension in shape " << shape.str());
    if (d == 0) return 0;
    SY_CHECK(bytes <= kMaxTensorBytes / static_cast<uint64_t>(d), "a tensor of shape " << shape.str() << " and type "
                                                                                         << dtype_name(dtype) << " is larger than 1 TiB");
    bytes *= static_cast<uint64_t>(d);
  }
  return static_cast<size_t>(bytes);
}
}  // namespace

size_t checked_tensor_bytes(DType dtype, const Shape& shape) { return checked_bytes(dtype, shape); }

// Large buffers (weights, KV pools, big activations) start on a 2 MiB
// boundary and ask for transparent huge pages where the kernel grants them
// only on request (THP "madvise" mode): a decode step streams every weight
// once, and with 4 KiB pages a 400 MB model is 100k TLB entries re-walked
// each token. Small buffers keep the cache-line alignment.
void* host_alloc(size_t bytes, size_t alignment) {
  const size_t align = bytes >= kHugePageBytes ? kHugePageBytes : std::max(alignment, kAlign);
  size_t n = (bytes + align - 1) / align * align;
  if (n == 0) n = align;
  void* p = std::aligned_alloc(align, n);
#ifdef MADV_HUGEPAGE
  if (p && align == kHugePageBytes) madvise(p, n, MADV_HUGEPAGE);  // advice only: a refusal changes nothing
#endif
  return p;
}

namespace {
void* aligned_alloc_bytes(size_t bytes) {
  void* p = host_alloc(bytes, kAlign);
  if (!p) throw Error("out of memory allocating " + std::to_string(bytes) + " bytes");
  return p;
}
}  // namespace

Tensor Tensor::empty(DType dtype, const Shape& shape) {
  SY_CHECK(dtype_size(dtype) > 0, "cannot allocate a tensor of type " << dtype_name(dtype));
  size_t bytes = checked_bytes(dtype, shape);
  void* p = aligned_alloc_bytes(bytes);
  std::memset(p, 0, bytes);
  return Tensor(dtype, shape, std::shared_ptr<void>(p, std::free), p);
}

Tensor Tensor::reshaped(const Shape& s) const {
  SY_CHECK(s.numel() == numel(), "cannot view " << shape_.str() << " as " << s.str());
  return Tensor(dtype_, s, holder_, data_, device_);
}

Tensor Tensor::subview(int64_t first, const Shape& s) const {
  SY_CHECK(first >= 0 && first + s.numel() <= numel(), "cannot view elements [" << first << ", " << first + s.numel() << ") of " << shape_.str());
  return Tensor(dtype_, s, holder_, data_ + static_cast<size_t>(first) * dtype_size(dtype_), device_);
}

std::vector<int64_t> Tensor::to_int64_vector() const {
  SY_CHECK(on_host(), "cannot read a " << device_name(device_) << " tensor on the host");
  std::vector<int64_t> v(static_cast<size_t>(numel()));
  if (dtype_ == DType::I64) {
    if (!v.empty()) std::memcpy(v.data(), data_, v.size() * 8);
  } else if (dtype_ == DType::I32) {
    for (size_t i = 0; i < v.size(); ++i) v[i] = data<int32_t>()[i];
  } else {
    SY_THROW("expected an int64 or int32 tensor, got " << dtype_name(dtype_));
  }
  return v;
}

struct BufferPool::Impl {
  std::mutex mu;
  std::vector<std::vector<void*>> free_by_class = std::vector<std::vector<void*>>(64);
  size_t held = 0;
  ~Impl() {
    for (auto& v : free_by_class)
      for (void* p : v) std::free(p);
  }
};

std::shared_ptr<BufferPool> BufferPool::create() {
  std::shared_ptr<BufferPool> pool(new BufferPool());
  pool->impl_ = std::make_shared<Impl>();
  return pool;
}

BufferPool::~BufferPool() = default;

size_t BufferPool::bytes_held() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->held;
}

Tensor BufferPool::allocate(DType dtype, const Shape& shape) {
  size_t elem = dtype_size(dtype);
  SY_CHECK(elem > 0, "cannot allocate a tensor of type " << dtype_name(dtype));
  size_t bytes = checked_bytes(dtype, shape);
  size_t cls = static_cast<size_t>(std::bit_width(std::max<size_t>(bytes, 64) - 1));
  size_t cap = size_t{1} << cls;
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto& list = impl_->free_by_class[cls];
    if (!list.empty()) {
      p = list.back();
      list.pop_back();
    }
  }
  if (!p) {
    p = aligned_alloc_bytes(cap);
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->held += cap;
  }
  // The deleter keeps the pool's state alive, so tensors may outlive the pool
  // object (outputs handed to the caller).
  std::shared_ptr<Impl> impl = impl_;
  std::shared_ptr<void> holder(p, [impl, cls](void* q) {
    std::lock_guard<std::mutex> lock(impl->mu);
    impl->free_by_class[cls].push_back(q);
  });
  return Tensor(dtype, shape, std::move(holder), p);
}

}  // namespace sy
