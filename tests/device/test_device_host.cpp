// The host code of the device layer, without a GPU: the caching allocator
// over a fake device memory, device selection, the transfer plan and the
// 16-bit conversions GPU kernels use for their weights.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <thread>

#include "base/half.h"
#include "device/caching_allocator.h"
#include "device/device_registry.h"
#include "fake_device.h"
#include "plugin_host/host_api.h"
#include "runtime/transfer_plan.h"
#include "test_support.h"

namespace sy {
namespace {

using test::HostBackedMemory;

struct Alloc {
  HostBackedMemory* mem;
  CachingAllocator alloc;
  explicit Alloc(size_t cap) : mem(new HostBackedMemory(cap)), alloc(std::unique_ptr<MemoryResource>(mem)) {}
};

TEST(CachingAllocator, RoundsSizesSoNearbyRequestsShareBlocks) {
  EXPECT_EQ(CachingAllocator::round_size(0), 512u);
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::round_size((1u << 20) - 1), 1u << 20);
  EXPECT_EQ(CachingAllocator::round_size((1u << 20) + 1), 2u << 20);
  EXPECT_EQ(CachingAllocator::round_size((5u << 20) + 7), 6u << 20);
}

TEST(CachingAllocator, FreedBlocksAreReusedWithoutAskingTheDevice) {
  Alloc a(64 << 20);
  void* p = a.alloc.allocate(1000);
  a.alloc.deallocate(p);
  void* q = a.alloc.allocate(900);  // same 1024-byte class
  EXPECT_EQ(p, q);
  EXPECT_EQ(a.mem->allocations(), 1);
  AllocatorStats s = a.alloc.stats();
  EXPECT_EQ(s.cache_hits, 1u);
  EXPECT_EQ(s.bytes_in_use, 1024u);
  EXPECT_EQ(s.bytes_reserved, 1024u);
  a.alloc.deallocate(q);
  EXPECT_EQ(a.alloc.stats().bytes_in_use, 0u);
}

TEST(CachingAllocator, ABigCachedBlockDoesNotServeASmallRequest) {
  Alloc a(64 << 20);
  void* big = a.alloc.allocate(8 << 20);
  a.alloc.deallocate(big);
  void* small = a.alloc.allocate(4096);
  EXPECT_NE(small, big);
  EXPECT_EQ(a.mem->allocations(), 2);
  void* similar = a.alloc.allocate(7 << 20);  // 8 MiB block wastes 1/8: reused
  EXPECT_EQ(similar, big);
  a.alloc.deallocate(small);
  a.alloc.deallocate(similar);
}

TEST(CachingAllocator, OutOfMemoryEmptiesTheCacheAndRetriesBeforeFailing) {
  Alloc a(10 << 20);
  void* p = a.alloc.allocate(6 << 20);
  a.alloc.deallocate(p);                 // 6 MiB cached
  void* q = a.alloc.allocate(9 << 20);   // does not fit beside the cached block, nor reuse it
  EXPECT_NE(q, nullptr);
  EXPECT_EQ(a.alloc.stats().cache_flushes, 1u);
  EXPECT_EQ(a.mem->frees(), 1);
  std::string msg = test::error_of([&] { a.alloc.allocate(4 << 20); });
  EXPECT_HAS(msg, "fake-cuda:0: out of memory allocating 4.0 MiB");
  EXPECT_HAS(msg, "10.0 MiB in use");
  a.alloc.deallocate(q);
  // Still usable after the failure.
  void* r = a.alloc.allocate(1 << 20);
  a.alloc.deallocate(r);
}

TEST(CachingAllocator, RefusesForeignPointersAndAbsurdSizes) {
  Alloc a(1 << 20);
  int x = 0;
  EXPECT_HAS(test::error_of([&] { a.alloc.deallocate(&x); }), "did not hand out");
  EXPECT_HAS(test::error_of([&] { a.alloc.allocate(size_t{1} << 50); }), "refusing an allocation");
}

TEST(CachingAllocator, EmptyCacheReturnsEveryFreeBlockAndKeepsLiveOnes) {
  Alloc a(64 << 20);
  void* keep = a.alloc.allocate(1 << 10);
  for (int i = 0; i < 5; ++i) a.alloc.deallocate(a.alloc.allocate(static_cast<size_t>(i + 1) << 20));
  EXPECT_GT(a.alloc.stats().bytes_reserved, 1024u);
  a.alloc.empty_cache();
  EXPECT_EQ(a.alloc.stats().bytes_reserved, 1024u);
  EXPECT_EQ(a.mem->used(), 1024u);
  a.alloc.deallocate(keep);
}

TEST(CachingAllocator, ConcurrentUseKeepsTheBooksBalanced) {
  Alloc a(256 << 20);
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      std::vector<void*> held;
      for (int i = 0; i < 2000; ++i) {
        if (held.size() < 8 && rng() % 2) held.push_back(a.alloc.allocate(rng() % 200000 + 1));
        else if (!held.empty()) {
          a.alloc.deallocate(held.back());
          held.pop_back();
        }
      }
      for (void* p : held) a.alloc.deallocate(p);
    });
  for (auto& t : ts) t.join();
  AllocatorStats s = a.alloc.stats();
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_GT(s.cache_hits, s.device_allocs);  // the point of caching
  EXPECT_EQ(a.mem->used(), s.bytes_reserved);
}

TEST(DeviceSpec, ParsesTheFourFormsAndNamesBadText) {
  EXPECT_EQ(parse_device_spec("cpu").kind, Device::CPU);
  EXPECT_TRUE(parse_device_spec("auto").automatic);
  DeviceSpec c = parse_device_spec("cuda");
  EXPECT_EQ(c.kind, Device::CUDA);
  EXPECT_EQ(c.index, 0);
  EXPECT_EQ(parse_device_spec("cuda:3").index, 3);
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:x", "CUDA", "cuda:99999999", ""})
    EXPECT_HAS(test::error_of([&] { parse_device_spec(bad); }), "is not one of: cpu, cuda, cuda:N, auto") << bad;
}

TEST(DeviceSpec, ResolvesAgainstWhatTheMachineHas) {
  DeviceProbe none{0, "no driver"}, two{2, ""};
  EXPECT_EQ(resolve_device(parse_device_spec("auto"), none).kind, Device::CPU);
  EXPECT_EQ(resolve_device(parse_device_spec("auto"), two).kind, Device::CUDA);
  EXPECT_EQ(resolve_device(parse_device_spec("cpu"), two).kind, Device::CPU);
  EXPECT_EQ(resolve_device(parse_device_spec("cuda:1"), two).index, 1);
  EXPECT_HAS(test::error_of([&] { resolve_device(parse_device_spec("cuda"), none); }),
             "device 'cuda:0' requested, but there is no CUDA device: no driver");
  EXPECT_HAS(test::error_of([&] { resolve_device(parse_device_spec("cuda:2"), two); }), "this machine has 2 CUDA device(s)");
}

TEST(DeviceRegistry, OneBackendPerDeviceAndTheProbeSaysWhyThereIsNone) {
  {
    test::ScopedFakeCuda fake;
    auto a = open_device(DeviceSpec{Device::CUDA, 0, false});
    auto b = open_device(DeviceSpec{Device::CUDA, 0, false});
    EXPECT_EQ(a, b);
    EXPECT_EQ(open_device(DeviceSpec{}), nullptr);  // the CPU has no backend
  }
  DeviceProbe real = probe_cuda();
  if (real.count == 0) {
    EXPECT_FALSE(real.why_none.empty());
  }
}

TEST(DeviceRegistry, PluginDeviceCallsReachTheCallingSessionsDeviceNotTheLastOpened) {
  // Two sessions in one process on cuda:0 and cuda:1: each plugin call runs
  // with its session's HostContext, so device memory lands on that device.
  test::ScopedFakeCuda fake(size_t{1} << 30, 2);
  auto dev0 = open_device(DeviceSpec{Device::CUDA, 0, false});
  auto dev1 = open_device(DeviceSpec{Device::CUDA, 1, false});  // opened last
  ASSERT_EQ(dev0->index(), 0);
  ASSERT_EQ(dev1->index(), 1);
  HostContext a{nullptr, dev0}, b{nullptr, dev1}, cpu{nullptr, nullptr};
  const sy_host_api* host = host_api();
  void* pa = nullptr;
  void* pb = nullptr;
  {
    PluginCall call("plugin-a", &a);
    ASSERT_EQ(host->device_alloc(SY_DEVICE_CUDA, 4096, &pa), SY_OK);
    EXPECT_EQ(host->device_stream(SY_DEVICE_CUDA), dev0->stream());
  }
  {
    PluginCall call("plugin-b", &b);
    ASSERT_EQ(host->device_alloc(SY_DEVICE_CUDA, 8192, &pb), SY_OK);
    EXPECT_EQ(host->device_stream(SY_DEVICE_CUDA), dev1->stream());
  }
  EXPECT_EQ(dev0->allocator().stats().allocations, 1u);
  EXPECT_EQ(dev1->allocator().stats().allocations, 1u);
  EXPECT_EQ(dev0->allocator().stats().bytes_in_use, CachingAllocator::round_size(4096));
  EXPECT_EQ(dev1->allocator().stats().bytes_in_use, CachingAllocator::round_size(8192));
  {
    PluginCall call("plugin-a", &a);
    EXPECT_EQ(host->device_free(SY_DEVICE_CUDA, pa), SY_OK);
  }
  {
    PluginCall call("plugin-b", &b);
    EXPECT_EQ(host->device_free(SY_DEVICE_CUDA, pb), SY_OK);
  }
  EXPECT_EQ(dev0->allocator().stats().bytes_in_use, 0u);
  EXPECT_EQ(dev1->allocator().stats().bytes_in_use, 0u);
  {
    // A CPU session has no CUDA device to hand out, whatever is open.
    PluginCall call("plugin-c", &cpu);
    void* p = nullptr;
    EXPECT_EQ(host->device_alloc(SY_DEVICE_CUDA, 64, &p), SY_UNSUPPORTED);
    EXPECT_NE(std::string(host->last_error()).find("no CUDA device"), std::string::npos) << host->last_error();
  }
}

PlannedNode N(std::vector<ValueId> in, std::vector<ValueId> out, Device d, std::vector<InputUse> uses = {}) {
  return PlannedNode{std::move(in), std::move(out), d, std::move(uses)};
}

// ---- transfer plan: a -> [cpu] x -> [cuda] y -> [cuda] z -> [cpu] w, plus a constant
struct PlanCase {
  // values: 0 input, 1 const, 2 x, 3 y, 4 z, 5 w
  std::vector<bool> constant{false, true, false, false, false, false};
};

TEST(TransferPlan, AllOnTheCpuNeedsNoCopies) {
  PlanCase c;
  std::vector<PlannedNode> steps = {N({0, 1}, {2}, Device::CPU), N({2}, {3}, Device::CPU), N({3, 1}, {4}, Device::CPU)};
  TransferPlan p = plan_transfers(6, c.constant, {4}, steps);
  EXPECT_EQ(p.copies_per_run(), 0);
  EXPECT_EQ(p.num_slots, 6);
  EXPECT_EQ(p.output_slots, std::vector<int>({4}));
  EXPECT_EQ(p.release[1], std::vector<int>({2}));
  EXPECT_EQ(p.release[2], std::vector<int>({3}));
}

TEST(TransferPlan, CopiesOnlyWhereTheDeviceChangesAndSharesThem) {
  PlanCase c;
  // x = f(in, const) on cpu; y = g(x) cuda; z = h(y, x, const) cuda; w = k(z, x) cpu; outputs w and z.
  std::vector<PlannedNode> steps = {N({0, 1}, {2}, Device::CPU),
                                    N({2}, {3}, Device::CUDA),
                                    N({3, 2, 1}, {4}, Device::CUDA),
                                    N({4, 2}, {5}, Device::CPU)};
  TransferPlan p = plan_transfers(6, c.constant, {5, 4}, steps);
  // x goes up once (shared by both cuda readers), z comes down once for w,
  // and that same host copy of z is the graph output: no second download.
  ASSERT_EQ(p.before[1].size(), 1u);
  EXPECT_EQ(p.before[1][0].from_slot, 2);
  EXPECT_EQ(p.before[1][0].to, Device::CUDA);
  int x_dev = p.before[1][0].to_slot;
  EXPECT_TRUE(p.before[2].empty());
  EXPECT_EQ(p.input_slots[2], std::vector<int>({3, x_dev, 1}));  // the constant is read on the host
  ASSERT_EQ(p.before[3].size(), 1u);
  EXPECT_EQ(p.before[3][0].from_slot, 4);
  EXPECT_EQ(p.before[3][0].to, Device::CPU);
  int z_host = p.before[3][0].to_slot;
  EXPECT_EQ(p.input_slots[3], std::vector<int>({z_host, 2}));  // x read on the host where it lives
  EXPECT_TRUE(p.outputs_to_host.empty());
  EXPECT_EQ(p.output_slots, std::vector<int>({5, z_host}));
  EXPECT_EQ(p.copies_per_run(), 2);
  EXPECT_EQ(p.num_slots, 8);
  // Releases: the device copy of x after its last device reader; x itself after w.
  EXPECT_NE(std::find(p.release[2].begin(), p.release[2].end(), x_dev), p.release[2].end());
  EXPECT_NE(std::find(p.release[2].begin(), p.release[2].end(), 3), p.release[2].end());
  EXPECT_NE(std::find(p.release[3].begin(), p.release[3].end(), 2), p.release[3].end());
  for (const auto& r : p.release) {
    EXPECT_EQ(std::find(r.begin(), r.end(), 1), r.end()) << "constants are never released";
    EXPECT_EQ(std::find(r.begin(), r.end(), z_host), r.end()) << "graph outputs are kept";
  }
}

TEST(TransferPlan, AGraphOutputLeftOnTheDeviceIsDownloadedAtTheEnd) {
  PlanCase c;
  std::vector<PlannedNode> steps = {N({0, 1}, {2}, Device::CUDA), N({2}, {3}, Device::CUDA)};
  TransferPlan p = plan_transfers(6, c.constant, {3}, steps);
  ASSERT_EQ(p.before[0].size(), 1u);  // the graph input goes up
  ASSERT_EQ(p.outputs_to_host.size(), 1u);
  EXPECT_EQ(p.outputs_to_host[0].from_slot, 3);
  EXPECT_EQ(p.output_slots[0], p.outputs_to_host[0].to_slot);
  EXPECT_EQ(p.copies_per_run(), 2);
}

TEST(TransferPlan, OmittedInputsAndUnreadOutputs) {
  PlanCase c;
  std::vector<PlannedNode> steps = {N({0, kNoValue}, {2, 3}, Device::CUDA), N({2}, {4}, Device::CPU)};
  TransferPlan p = plan_transfers(6, c.constant, {4}, steps);
  EXPECT_EQ(p.input_slots[0][1], -1);
  EXPECT_NE(std::find(p.release[0].begin(), p.release[0].end(), 3), p.release[0].end()) << "unread output released at once";
}

TEST(TransferPlan, HostInputsAndShapeOnlyInputsAreNotCopiedToTheDevice) {
  PlanCase c;
  // x = f(in) on cuda; y = Reshape(x, shape=in) on cuda reading `in` on the
  // host; z = Shape(y) on the cpu reading only y's shape; w = g(y, z) on cuda.
  std::vector<PlannedNode> steps = {
      N({0}, {2}, Device::CUDA),
      N({2, 0}, {3}, Device::CUDA, {InputUse::Data, InputUse::HostData}),
      N({3}, {4}, Device::CPU, {InputUse::ShapeOnly}),
      N({3, 4}, {5}, Device::CUDA, {InputUse::Data, InputUse::HostData})};
  TransferPlan p = plan_transfers(6, c.constant, {5}, steps);
  ASSERT_EQ(p.before[0].size(), 1u);                // `in` goes up once for f
  EXPECT_TRUE(p.before[1].empty());                 // and is read on the host, where it lives, by Reshape
  EXPECT_EQ(p.input_slots[1][1], 0);
  EXPECT_TRUE(p.before[2].empty());                 // Shape reads y's shape on the device: no download
  EXPECT_EQ(p.input_slots[2][0], 3);
  EXPECT_TRUE(p.before[3].empty());                 // z is a host value read on the host
  EXPECT_EQ(p.copies_per_run(), 2);                 // in -> cuda, w -> host
}

TEST(HalfConversions, Float16RoundTripsEveryValueAndRoundsToNearestEven) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = half_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(half_to_float(float_to_half(f))));
      continue;
    }
    ASSERT_EQ(float_to_half(f), h) << h;
  }
  EXPECT_EQ(half_to_float(float_to_half(1.0f + 1.0f / 2048)), 1.0f);  // tie -> even
  EXPECT_EQ(half_to_float(float_to_half(1.0f + 3.0f / 2048)), 1.0f + 2.0f / 1024);
  EXPECT_TRUE(std::isinf(half_to_float(float_to_half(70000.f))));
}

TEST(HalfConversions, BFloat16RoundsToNearestEvenAndKeepsSpecials) {
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = bf16_to_float(static_cast<uint16_t>(b));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(f))));
      continue;
    }
    ASSERT_EQ(float_to_bf16(f), b) << b;
  }
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 1.0f / 256)), 1.0f);                  // tie -> even (down)
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 3.0f / 256)), 1.0f + 4.0f / 256);     // tie -> even (up)
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 1.5f / 256)), 1.0f + 2.0f / 256);     // above half: up
  EXPECT_TRUE(std::isinf(bf16_to_float(float_to_bf16(3.4e38f))));                    // rounds past the largest finite
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
  // 7 stored fraction bits: the error of any normal float is at most half a unit, 2^-8 relative.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1e6f, 1e6f);
  for (int i = 0; i < 10000; ++i) {
    float f = u(rng);
    EXPECT_LE(std::abs(bf16_to_float(float_to_bf16(f)) - f), std::abs(f) / 256.f);
  }
}

}  // namespace
}  // namespace sy
