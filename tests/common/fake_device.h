// A "CUDA" device whose memory is host memory: lets the executor's
// placement, copies and the device allocator run on machines without a GPU.
// Its memory has a capacity (to test out-of-memory handling) and counts what
// it hands out; its kernels are the CPU kernels, which check that every input
// they get is where the transfer plan says it must be.
#pragma once
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "device/device_backend.h"
#include "device/device_registry.h"
#include "kernels/registry.h"

namespace sy::test {

class HostBackedMemory : public MemoryResource {
 public:
  explicit HostBackedMemory(size_t capacity) : capacity_(capacity) {}
  ~HostBackedMemory() override {
    for (auto& [p, n] : live_) std::free(p);
  }
  void* allocate(size_t bytes) override {
    if (used_ + bytes > capacity_) return nullptr;
    void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (!p) return nullptr;
    live_[p] = bytes;
    used_ += bytes;
    ++allocations_;
    return p;
  }
  void deallocate(void* ptr, size_t bytes) override {
    auto it = live_.find(ptr);
    if (it == live_.end() || it->second != bytes) std::abort();  // the allocator lost track: fail loudly
    used_ -= bytes;
    live_.erase(it);
    std::free(ptr);
    ++frees_;
  }
  std::string name() const override { return "fake-cuda:0"; }
  size_t used() const { return used_; }
  int allocations() const { return allocations_; }
  int frees() const { return frees_; }

 private:
  size_t capacity_, used_ = 0;
  int allocations_ = 0, frees_ = 0;
  std::map<void*, size_t> live_;
};

class FakeCudaBackend : public DeviceBackend {
 public:
  explicit FakeCudaBackend(size_t capacity = size_t{1} << 30, int index = 0)
      : DeviceBackend(Device::CUDA, index, std::make_unique<HostBackedMemory>(capacity)) {}
  std::string description() const override { return "cuda:" + std::to_string(index()) + " fake (host memory)"; }
  void* stream() override { return &stream_token_; }
  void synchronize() override {}
  HostBackedMemory& memory() { return static_cast<HostBackedMemory&>(allocator().memory()); }

 protected:
  void copy_to_device(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }

 private:
  int stream_token_ = 0;
};

// Installs a provider reporting `count` fake CUDA devices for the scope.
class ScopedFakeCuda {
 public:
  explicit ScopedFakeCuda(size_t capacity = size_t{1} << 30, int count = 1) {
    close_devices();
    DeviceProvider p;
    p.probe = [count] { return DeviceProbe{count, ""}; };
    p.open = [capacity](int index) -> std::shared_ptr<DeviceBackend> { return std::make_shared<FakeCudaBackend>(capacity, index); };
    old_ = set_cuda_provider(std::move(p));
  }
  ~ScopedFakeCuda() {
    close_devices();
    set_cuda_provider(std::move(old_));
  }

 private:
  DeviceProvider old_;
};

// A CUDA kernel made of a CPU one: runs the CPU code on the fake device's
// (host) memory after checking the inputs' devices: non-constant inputs must
// be device tensors, constants host tensors.
class FakeDeviceKernel : public Kernel {
 public:
  FakeDeviceKernel(std::unique_ptr<Kernel> cpu, std::vector<bool> constant) : cpu_(std::move(cpu)), constant_(std::move(constant)) {}
  void compute(KernelContext& ctx) override {
    for (int i = 0; i < ctx.num_inputs; ++i) {
      if (!ctx.has_input(i)) continue;
      Device want = constant_[static_cast<size_t>(i)] ? Device::CPU : Device::CUDA;
      SY_CHECK(ctx.inputs[i]->device() == want, "fake device kernel: input " << i << " is on " << device_name(ctx.inputs[i]->device())
                                                                          << ", expected " << device_name(want));
    }
    ++calls;
    cpu_->compute(ctx);
  }
  static inline int calls = 0;

 private:
  std::unique_ptr<Kernel> cpu_;
  std::vector<bool> constant_;
};

// Registers fake CUDA versions of the CPU kernels of `ops` (provider "fake-gpu").
inline void add_fake_device_kernels(KernelRegistry& r, const std::vector<std::string>& ops,
                                    std::function<bool(const Graph&, const Node&)> supports = {}) {
  KernelRegistry cpu = KernelRegistry::with_builtins();
  for (const std::string& op : ops) {
    const KernelDef* base = cpu.find("", op, Device::CPU, DType::Undefined);
    SY_CHECK(base, "no CPU kernel for " << op);
    KernelDef d = *base;
    d.device = Device::CUDA;
    d.provider = "fake-gpu";
    d.priority = 100;
    d.supports = supports;
    KernelFactory make_cpu = base->create;
    d.create = [make_cpu](const KernelCreateInfo& ci) -> std::unique_ptr<Kernel> {
      SY_CHECK(ci.backend && ci.backend->kind() == Device::CUDA, "fake device kernel created without a device");
      std::vector<bool> constant;
      for (ValueId v : ci.node.inputs) constant.push_back(v != kNoValue && ci.graph.values[static_cast<size_t>(v)].constant);
      return std::make_unique<FakeDeviceKernel>(make_cpu(ci), std::move(constant));
    };
    r.add(std::move(d));
  }
}

}  // namespace sy::test
