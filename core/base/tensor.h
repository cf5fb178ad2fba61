// A tensor is a typed, shaped view of a reference-counted byte buffer.
// Views (Reshape, Squeeze, a present-KV fed back as past) share the buffer;
// the buffer returns to its pool when the last view goes away, which is how
// the executor reuses memory by lifetime without tracking aliases itself.
#pragma once
#include <array>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/device.h"
#include "base/dtype.h"
#include "base/error.h"

namespace sy {

// Inline shape: decoders never go past rank 6, and keeping dims out of the
// heap removes an allocation from every node of every step.
class Shape {
 public:
  static constexpr int kMaxRank = 8;
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.size()); }
  explicit Shape(std::span<const int64_t> dims) { assign(dims.data(), dims.size()); }

  int rank() const { return rank_; }
  int64_t operator[](int i) const { return d_[static_cast<size_t>(i)]; }
  int64_t& operator[](int i) { return d_[static_cast<size_t>(i)]; }
  const int64_t* begin() const { return d_.data(); }
  const int64_t* end() const { return d_.data() + rank_; }
  std::span<const int64_t> dims() const { return {d_.data(), static_cast<size_t>(rank_)}; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank_; ++i) n *= d_[static_cast<size_t>(i)];
    return n;
  }
  void push_back(int64_t v) {
    SY_CHECK(rank_ < kMaxRank, "tensor rank above " << kMaxRank << " is not supported");
    d_[static_cast<size_t>(rank_++)] = v;
  }
  void resize(int r) {
    SY_CHECK(r >= 0 && r <= kMaxRank, "tensor rank " << r << " is not supported (max " << kMaxRank << ")");
    for (int i = rank_; i < r; ++i) d_[static_cast<size_t>(i)] = 1;
    rank_ = r;
  }
  bool operator==(const Shape& o) const {
    if (rank_ != o.rank_) return false;
    for (int i = 0; i < rank_; ++i)
      if (d_[static_cast<size_t>(i)] != o.d_[static_cast<size_t>(i)]) return false;
    return true;
  }
  std::string str() const;

 private:
  void assign(const int64_t* p, size_t n) {
    SY_CHECK(n <= static_cast<size_t>(kMaxRank), "tensor rank " << n << " is not supported (max " << kMaxRank << ")");
    rank_ = static_cast<int>(n);
    for (size_t i = 0; i < n; ++i) d_[i] = p[i];
  }
  std::array<int64_t, kMaxRank> d_{};
  int rank_ = 0;
};

// Bytes of a tensor of this type and shape; refuses negative dimensions and
// sizes past 1 TiB (a hostile model can ask Expand or ConstantOfShape for anything).
size_t checked_tensor_bytes(DType dtype, const Shape& shape);

// The size from which host buffers go on huge pages (host_alloc).
inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// Host memory for tensors and plugins (free with std::free): `alignment`
// (a power of two) for small buffers; buffers of 2 MiB or more start on a
// 2 MiB boundary and are advised onto transparent huge pages. Returns null
// when out of memory.
void* host_alloc(size_t bytes, size_t alignment);

class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, Shape shape, std::shared_ptr<void> holder, void* data, Device device = Device::CPU)
      : dtype_(dtype), shape_(shape), holder_(std::move(holder)), data_(static_cast<std::byte*>(data)), device_(device) {}

  // Owned, zero-initialised host tensor (for tests, folding, small constants).
  static Tensor empty(DType dtype, const Shape& shape);
  template <typename T>
  static Tensor from(const Shape& shape, std::span<const T> values) {
    Tensor t = empty(DTypeOf<T>::value, shape);
    SY_CHECK(static_cast<int64_t>(values.size()) == shape.numel(),
             "Tensor::from: " << values.size() << " values for shape " << shape.str());
    if (!values.empty()) std::memcpy(t.data_, values.data(), values.size() * sizeof(T));
    return t;
  }
  template <typename T>
  static Tensor from(const Shape& shape, std::initializer_list<T> values) {
    return from<T>(shape, std::span<const T>(values.begin(), values.size()));
  }

  bool defined() const { return dtype_ != DType::Undefined; }
  // Device tensors hold device pointers: only kernels of that device and the
  // device backend's copies may touch their bytes.
  Device device() const { return device_; }
  bool on_host() const { return device_ == Device::CPU; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return shape_.rank(); }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t numel() const { return shape_.numel(); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }

  template <typename T> T* data() { return reinterpret_cast<T*>(data_); }
  template <typename T> const T* data() const { return reinterpret_cast<const T*>(data_); }
  void* raw() { return data_; }
  const void* raw() const { return data_; }
  const std::shared_ptr<void>& holder() const { return holder_; }

  // A view with another shape over the same bytes (same element count).
  Tensor reshaped(const Shape& s) const;
  // A view of the contiguous elements [first, first + s.numel()) as shape s.
  Tensor subview(int64_t first, const Shape& s) const;

  // Reads an integer tensor (int64 or int32) as int64 values: shape operands.
  std::vector<int64_t> to_int64_vector() const;

 private:
  DType dtype_ = DType::Undefined;
  Shape shape_;
  std::shared_ptr<void> holder_;
  std::byte* data_ = nullptr;
  Device device_ = Device::CPU;
};

// Hands out buffers for tensors and takes them back when their last view is
// released. Size classes are powers of two so a decode step, whose shapes
// grow by one position at a time, keeps reusing the same blocks.
class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  static std::shared_ptr<BufferPool> create();
  Tensor allocate(DType dtype, const Shape& shape);
  size_t bytes_held() const;
  ~BufferPool();

 private:
  BufferPool() = default;
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace sy
