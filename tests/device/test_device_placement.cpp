// The executor on a device, without a GPU: the shared model runs with its
// MatMuls (and then most elementwise ops) on a fake CUDA device whose memory
// is host memory. Its kernels are the CPU kernels, so the logits must be
// bit-identical to the CPU run; what is tested is placement, the planned
// copies, device allocation and release, and the errors.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <set>

#include "engine/generator.h"
#include "engine/session.h"
#include "fake_device.h"
#include "manifest/manifest.h"
#include "plugin_host/host_api.h"
#include "test_support.h"

namespace sy {
namespace {

const std::vector<std::vector<int>> kPrompts = {{1, 403, 407, 261, 378}, {1, 80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90}};

bool constant_2d_weight(const Graph& g, const Node& n) {
  if (n.inputs.size() < 2 || n.inputs[1] == kNoValue) return false;
  const Value& v = g.values[static_cast<size_t>(n.inputs[1])];
  return v.constant && v.constant->rank() == 2;
}

struct Placed {
  ThreadPool threads{2};
  KernelRegistry registry = KernelRegistry::with_builtins();
  std::shared_ptr<test::FakeCudaBackend> dev;
  std::unique_ptr<DecoderModel> model;
  explicit Placed(const std::vector<std::string>& device_ops, std::function<bool(const Graph&, const Node&)> supports = {},
               size_t capacity = size_t{1} << 30) {
    ModelOptions mo;
    if (!device_ops.empty()) {
      // Only the fake device's kernels: a CUDA build's cuBLAS kernels need a real GPU.
      registry = KernelRegistry::with_builtins();
      for (const KernelDef* d : registry.all())
        SY_CHECK(d->device == Device::CPU || d->provider == "builtin", "unexpected device kernel");
      KernelRegistry cpu_only;
      for (const KernelDef* d : registry.all())
        if (d->device == Device::CPU) cpu_only.add(*d);
      registry = std::move(cpu_only);
      test::add_fake_device_kernels(registry, device_ops, supports);
      dev = std::make_shared<test::FakeCudaBackend>(capacity);
      mo.executor.device = Device::CUDA;
      mo.executor.backend = dev;
    }
    model = DecoderModel::load(test::model_path("stories260K.onnx"), registry, &threads, mo);
  }
  int placed_on_device(const std::string& op) const {
    int n = 0;
    for (const auto& p : model->executor().placements()) n += p.op == op && p.device == Device::CUDA;
    return n;
  }
};

TEST(DevicePlacement, MatMulsWithAWeightRunOnTheDeviceAndLogitsMatchTheCpuBitForBit) {
  Placed cpu({});
  Placed gpu({"MatMul"}, constant_2d_weight);
  int matmuls = 0;
  for (const auto& p : cpu.model->executor().placements()) matmuls += p.op == "MatMul";
  const int placed = gpu.placed_on_device("MatMul");
  EXPECT_GT(placed, 0);
  EXPECT_LT(placed, matmuls) << "attention's activation x activation MatMuls have no weight and stay on the CPU";
  for (const auto& p : gpu.model->executor().placements())
    if (p.device == Device::CUDA) {
      EXPECT_EQ(p.provider, "fake-gpu");
    }

  const TransferPlan& plan = gpu.model->executor().transfer_plan();
  int up = 0, down = 0;
  for (const auto& b : plan.before)
    for (const Transfer& t : b) (t.to == Device::CUDA ? up : down)++;
  down += static_cast<int>(plan.outputs_to_host.size());
  // Q/K/V (and the MLP's gate and up projections) read the same normed
  // activation: it goes up once for all of them.
  std::set<ValueId> activations;
  const Graph& g = gpu.model->executor().graph();
  for (const Node& n : g.nodes)
    if (!n.dead && n.op_type == "MatMul" && constant_2d_weight(g, n)) activations.insert(n.inputs[0]);
  EXPECT_EQ(up, static_cast<int>(activations.size()));
  EXPECT_LT(up, placed);
  EXPECT_EQ(down, placed) << "and its result comes down once";

  BaselineGenerator a(*cpu.model), b(*gpu.model);
  for (const auto& prompt : kPrompts) {
    test::FakeDeviceKernel::calls = 0;
    std::vector<float> la = a.last_logits(prompt), lb = b.last_logits(prompt);
    ASSERT_EQ(la.size(), lb.size());
    EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)), 0);
    EXPECT_EQ(test::FakeDeviceKernel::calls, placed);
  }
  TransferStats ts = gpu.dev->transfer_stats();
  EXPECT_EQ(ts.to_device, static_cast<uint64_t>(up) * kPrompts.size());
  EXPECT_EQ(ts.to_host, static_cast<uint64_t>(down) * kPrompts.size());
  AllocatorStats as = gpu.dev->allocator().stats();
  EXPECT_EQ(as.bytes_in_use, 0u) << "every device tensor is released after the run";
  EXPECT_GT(as.cache_hits, as.device_allocs) << "the second layer reuses the first layer's blocks";
}

TEST(DevicePlacement, ChainsOfDeviceOpsStayOnTheDeviceAndGreedyOutputsAreIdentical) {
  Placed cpu({});
  Placed gpu({"MatMul", "Add", "Mul", "Sigmoid", "Div", "Pow", "Sqrt", "ReduceMean", "Sub", "Softmax", "Transpose"});
  const TransferPlan& plan = gpu.model->executor().transfer_plan();
  int device_nodes = 0;
  for (const auto& p : gpu.model->executor().placements()) device_nodes += p.device == Device::CUDA;
  EXPECT_GT(device_nodes, 100);
  std::printf("%d nodes on the device, %d copies per forward pass\n", device_nodes, plan.copies_per_run());
  EXPECT_LT(plan.copies_per_run(), device_nodes) << "neighbouring device ops share their tensors without copies";

  BaselineGenerator a(*cpu.model), b(*gpu.model);
  for (const auto& prompt : kPrompts) {
    GenerationRequest req = test::greedy(prompt, 24);
    auto ra = a.generate({req}), rb = b.generate({req});
    EXPECT_EQ(ra[0].tokens, rb[0].tokens);
  }
  EXPECT_EQ(gpu.dev->allocator().stats().bytes_in_use, 0u);
}

TEST(DevicePlacement, ViewsOnTheDeviceAndShapeReadsSaveCopies) {
  const std::vector<std::string> ops = {"MatMul", "Add", "Mul", "Sigmoid", "Div", "Pow", "Sqrt", "ReduceMean", "Sub", "Softmax", "Transpose"};
  Placed without(ops);
  Placed with(ops);
  KernelRegistry reg = std::move(with.registry);
  register_device_view_kernels(reg, Device::CUDA);  // real kernels: views never touch the bytes
  ModelOptions mo;
  mo.executor.device = Device::CUDA;
  mo.executor.backend = with.dev;
  with.model = DecoderModel::load(test::model_path("stories260K.onnx"), reg, &with.threads, mo);
  const int a = without.model->executor().transfer_plan().copies_per_run();
  const int b = with.model->executor().transfer_plan().copies_per_run();
  std::printf("copies per forward pass: %d without device views, %d with\n", a, b);
  EXPECT_LT(b, a);
  int views = 0;
  for (const auto& p : with.model->executor().placements()) views += p.device == Device::CUDA && (p.op == "Reshape" || p.op == "Unsqueeze");
  EXPECT_GT(views, 0);
  Placed cpu({});
  BaselineGenerator g0(*cpu.model), g1(*with.model);
  for (const auto& prompt : kPrompts) {
    GenerationRequest req = test::greedy(prompt, 16);
    EXPECT_EQ(g0.generate({req})[0].tokens, g1.generate({req})[0].tokens);
  }
  EXPECT_EQ(with.dev->allocator().stats().bytes_in_use, 0u);
}

TEST(DevicePlacement, DeviceOutOfMemoryFailsTheRunCleanlyAndLeaksNothing) {
  Placed gpu({"MatMul"}, constant_2d_weight, 16 << 10);  // 16 KiB of "device" memory
  BaselineGenerator g(*gpu.model);
  std::vector<int> long_prompt(64, 300);
  long_prompt[0] = 1;
  std::string msg = test::error_of([&] { g.last_logits(long_prompt); });
  EXPECT_HAS(msg, "fake-cuda:0: out of memory allocating");
  EXPECT_HAS(msg, "MatMul");  // the node that asked
  EXPECT_EQ(gpu.dev->allocator().stats().bytes_in_use, 0u);
  EXPECT_EQ(g.last_logits({1, 403}).size(), 512u) << "a short prompt still fits afterwards";
}

TEST(DevicePlacement, AKernelThatLeavesItsOutputOnTheWrongDeviceIsNamed) {
  ThreadPool threads{1};
  KernelRegistry reg = KernelRegistry::with_builtins();
  KernelDef bad;
  bad.op_type = "Sigmoid";
  bad.device = Device::CUDA;
  bad.provider = "sloppy";
  bad.priority = 100;
  struct HostOutput : Kernel {
    void compute(KernelContext& ctx) override { ctx.set_output(0, Tensor::empty(DType::F32, ctx.input(0).shape())); }
  };
  bad.create = [](const KernelCreateInfo&) -> std::unique_ptr<Kernel> { return std::make_unique<HostOutput>(); };
  KernelRegistry cpu_only;
  for (const KernelDef* d : reg.all())
    if (d->device == Device::CPU) cpu_only.add(*d);
  cpu_only.add(bad);
  ModelOptions mo;
  mo.executor.device = Device::CUDA;
  mo.executor.backend = std::make_shared<test::FakeCudaBackend>();
  auto model = DecoderModel::load(test::model_path("stories260K.onnx"), cpu_only, &threads, mo);
  BaselineGenerator g(*model);
  std::string msg = test::error_of([&] { g.last_logits({1, 403}); });
  EXPECT_HAS(msg, "kernel produced output 0 on cpu but runs on cuda");
  EXPECT_HAS(msg, "Sigmoid");
}

TEST(DevicePlacement, ExecutorWithoutABackendForItsDeviceIsRefused) {
  ThreadPool threads{1};
  KernelRegistry reg = KernelRegistry::with_builtins();
  ModelOptions mo;
  mo.executor.device = Device::CUDA;
  EXPECT_HAS(test::error_of([&] { DecoderModel::load(test::model_path("stories260K.onnx"), reg, &threads, mo); }),
             "no cuda device backend was given");
}

TEST(DeviceHostApi, PluginsAllocateDeviceMemoryFromTheSessionsAllocator) {
  const sy_host_api* api = host_api();
  void* p = nullptr;
  close_devices();
  EXPECT_EQ(api->device_alloc(SY_DEVICE_CUDA, 1000, &p), SY_UNSUPPORTED);
  EXPECT_HAS(std::string(api->last_error()), "no CUDA device");
  EXPECT_EQ(api->device_stream(SY_DEVICE_CUDA), nullptr);
  {
    test::ScopedFakeCuda fake;
    auto dev = open_device(DeviceSpec{Device::CUDA, 0, false});
    HostContext session{nullptr, dev};
    PluginCall call("test", &session);  // as the session's plugin calls run
    ASSERT_EQ(api->device_alloc(SY_DEVICE_CUDA, 1000, &p), SY_OK);
    EXPECT_EQ(dev->allocator().stats().bytes_in_use, 1024u);
    EXPECT_EQ(api->device_stream(SY_DEVICE_CUDA), dev->stream());
    EXPECT_EQ(api->device_free(SY_DEVICE_CUDA, p), SY_OK);
    EXPECT_EQ(dev->allocator().stats().bytes_in_use, 0u);
    int x = 0;
    EXPECT_NE(api->device_free(SY_DEVICE_CUDA, &x), SY_OK) << "a pointer the device did not hand out";
    void* huge = nullptr;
    EXPECT_EQ(api->device_alloc(SY_DEVICE_CUDA, size_t{4} << 30, &huge), SY_OUT_OF_MEMORY);
    EXPECT_HAS(std::string(api->last_error()), "out of memory");
  }
}

TEST(DeviceConfig, TheManifestsDeviceIsCheckedWhereItIsWritten) {
  test::TempDir dir;
  std::string path = (dir.path / "m.yaml").string();
  {
    std::ofstream(path) << "model: " << test::model_path("stories260K.onnx") << "\nprofiles:\n  gpu:\n    device: tpu\n";
  }
  std::string msg = test::error_of([&] { Manifest::load(path).resolve("gpu"); });
  EXPECT_HAS(msg, "m.yaml:4: profiles.gpu.device: device 'tpu' is not one of: cpu, cuda, cuda:N, auto");
}

TEST(DeviceConfig, TheGpuManifestParsesAndItsCpuProfileMatchesThePagedEngine) {
  Manifest gpu = Manifest::load(test::source_dir() + "/examples/manifests/gpu.yaml");
  for (const std::string& p : gpu.profile_names()) EXPECT_EQ(gpu.resolve(p).device, p == "cpu-paged" ? "cpu" : "cuda") << p;
  GenerationRequest r = test::greedy({1, 403, 407, 261, 378}, 32);
  auto fused = Session::create(gpu.resolve("cpu-paged"))->generate({r})[0].tokens;
  auto plain = Session::create(Manifest::load(test::source_dir() + "/examples/manifests/stories.yaml").resolve("paged"))->generate({r})[0].tokens;
  EXPECT_EQ(fused, plain);
}

TEST(DeviceConfig, CudaWithoutADeviceIsAClearErrorAndAutoFallsBackToTheCpu) {
  // A machine without a CUDA device, on every machine (a GPU one too).
  DeviceProvider none;
  none.probe = [] { return DeviceProbe{0, "no CUDA device in this test"}; };
  none.open = [](int) -> std::shared_ptr<DeviceBackend> { return nullptr; };
  close_devices();
  DeviceProvider previous = set_cuda_provider(none);
  struct Restore {
    DeviceProvider& p;
    ~Restore() { set_cuda_provider(std::move(p)); }
  } restore{previous};
  EngineConfig cfg;
  cfg.model = test::model_path("stories260K.onnx");
  cfg.threads = 1;
  cfg.device = "cuda";
  EXPECT_HAS(test::error_of([&] { Session::create(cfg); }), "device 'cuda:0' requested, but there is no CUDA device: no CUDA device in this test");
  cfg.device = "auto";
  auto s = Session::create(cfg);
  EXPECT_EQ(s->device(), nullptr);
  EngineConfig cpu = cfg;
  cpu.device = "cpu";
  EXPECT_EQ(s->last_logits({1, 403, 407}), Session::create(cpu)->last_logits({1, 403, 407}));
}

}  // namespace
}  // namespace sy
