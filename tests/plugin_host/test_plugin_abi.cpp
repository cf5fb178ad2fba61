// ABI conformance with real plugin libraries (tests/plugin_host/fixtures/*): version
// negotiation, refusals with clear messages, errors and exceptions from
// plugin code, duplicate and unknown names, every component kind called
// through the host, and repeated load/unload.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstddef>
#include <fstream>

#include "engine/generator.h"
#include "engine/session.h"
#include "plugin_host/plugin_host.h"
#include "test_support.h"

namespace sy {
namespace {

struct Host {
  ThreadPool threads{1};
  HostContext ctx{&threads, nullptr};
  KernelRegistry kernels = KernelRegistry::with_builtins();
  ComponentRegistry components = ComponentRegistry::with_builtins();
  PluginHost host{kernels, components, &ctx};
};

using test::error_of;


EngineConfig config_with(const std::vector<std::string>& plugins, const std::vector<std::string>& passes) {
  EngineConfig c;
  c.model = test::model_path("stories260K.onnx");
  c.threads = 1;
  for (const auto& p : plugins) c.plugins.push_back(PluginSpec{p, std::nullopt, "test"});
  for (const auto& p : passes) c.passes.push_back(ComponentSelection{p, {}, "test: passes"});
  return c;
}

TEST(PluginAbi, GoodPluginRegistersEveryKind) {
  Host h;
  const PluginLibrary& lib = h.host.load(SY_TEST_PLUGIN_GOOD);
  EXPECT_EQ(lib.name(), "test-kernels");
  EXPECT_EQ(lib.version(), "2.1.0");
  EXPECT_EQ(lib.abi_major(), SY_PLUGIN_ABI_MAJOR);
  EXPECT_EQ(lib.abi_minor(), SY_PLUGIN_ABI_MINOR);
  EXPECT_EQ(h.kernels.find("", "Sigmoid", Device::CPU, DType::F32)->provider, "test-kernels");
  EXPECT_EQ(h.components.get(ComponentKind::Pass, "test-noop", "t").provider, "test-kernels");
  EXPECT_EQ(h.components.get(ComponentKind::Scheduler, "test-fcfs", "t").options.size(), 1u);
  h.components.get(ComponentKind::Cache, "test-counter", "t");
  h.components.get(ComponentKind::Drafter, "test-repeat", "t");
  h.host.unload("test-kernels");
  EXPECT_EQ(h.kernels.find("", "Sigmoid", Device::CPU, DType::F32)->provider, "builtin");
  EXPECT_THROW(h.components.get(ComponentKind::Pass, "test-noop", "t"), Error);
}

TEST(PluginAbi, SchedulerCacheAndDrafterCallThroughTheHost) {
  Host h;
  h.host.load(SY_TEST_PLUGIN_GOOD);
  const auto& se = h.components.get(ComponentKind::Scheduler, "test-fcfs", "t");
  PluginScheduler sched(se, OptionValues::validate(se.options, {{"max_prefill", {"4", "t"}}}, se.label()), &h.ctx);
  sy_sched_seq running[1] = {{7, SY_SEQ_RUNNING, 3, 4, 2, 10, 0, 0, 0, 0.0, 1, 0}};
  sy_sched_seq waiting[2] = {{8, SY_SEQ_WAITING, 9, 0, 0, 10, 0, 1, 0, 0.1, 9, 0}, {9, SY_SEQ_WAITING, 2, 0, 0, 10, 0, 1, 0, 0.2, 2, 0}};
  sy_sched_input in{sizeof(sy_sched_input), waiting, 2, running, 1, 100, 16, 6, 8, 1.0, sizeof(sy_sched_seq)};
  auto plan = sched.plan(in);
  ASSERT_EQ(plan.size(), 2u);  // decode for 7, a 4-token chunk for 8; 9 does not fit the budget of 6
  EXPECT_EQ(plan[0].seq_id, 7u);
  EXPECT_EQ(plan[0].num_tokens, 1);
  EXPECT_EQ(plan[1].seq_id, 8u);
  EXPECT_EQ(plan[1].num_tokens, 4);

  const auto& ce = h.components.get(ComponentKind::Cache, "test-counter", "t");
  sy_cache_config cfg{sizeof(sy_cache_config), 5, 4, 8, SY_DTYPE_FLOAT32, SY_DEVICE_CPU, 0, 0, 0, 0, 0};
  EXPECT_HAS(error_of([&] { OptionValues::validate(ce.options, {}, ce.label()); }), "required option 'capacity_tokens'");
  PluginCacheManager cache(ce, cfg, OptionValues::validate(ce.options, {{"capacity_tokens", {"10", "t"}}}, ce.label()), &h.ctx);
  EXPECT_TRUE(cache.allocate(1, 6));
  EXPECT_FALSE(cache.allocate(2, 5));  // full: reported, not thrown
  EXPECT_EQ(cache.stats().free_blocks, 4);
  cache.release(1);
  EXPECT_TRUE(cache.allocate(2, 5));
  EXPECT_HAS(error_of([&] { cache.release(99); }), "plugin 'test-kernels': cache release failed");
  sy_cache_config bad = cfg;
  bad.num_layers = 0;
  EXPECT_HAS(error_of([&] {
               PluginCacheManager c2(ce, bad, OptionValues::validate(ce.options, {{"capacity_tokens", {"1", "t"}}}, ce.label()), &h.ctx);
             }),
             "num_layers must be positive");

  const auto& de = h.components.get(ComponentKind::Drafter, "test-repeat", "t");
  PluginDrafter drafter(de, OptionValues::validate(de.options, {}, de.label()), &h.ctx);
  sy_draft_sampling greedy{sizeof(sy_draft_sampling), 0.f, 0, 1.f, 0};
  DraftProposal p = drafter.propose(1, {5, 6, 7}, 3, greedy, 512);
  EXPECT_EQ(p.tokens, (std::vector<int32_t>{7, 7, 7}));
  EXPECT_TRUE(p.probs.empty()) << "a drafter without propose_sampled proposes point masses";
}

TEST(PluginAbi, CacheManagerWithoutAFunctionTheEngineCallsIsRefusedAtLoad) {
  // The step engine asks every cache manager for block tables; a descriptor
  // without block_table would crash the first step, so loading refuses it.
  Host h;
  std::string msg = error_of([&] { h.host.load(SY_TEST_PLUGIN_INCOMPLETE_CACHE); });
  EXPECT_HAS(msg, "cache manager 'test-no-tables' lacks the required function block_table");
  EXPECT_HAS(msg, SY_TEST_PLUGIN_INCOMPLETE_CACHE);
  EXPECT_TRUE(h.components.list(ComponentKind::Cache).empty());
}

TEST(PluginAbi, ErrorsCarryTheirKind) {
  // C callers get distinct codes from the kinds: a missing file is not a
  // plugin failure, and a plugin's own status is kept.
  Host h;
  try {
    h.host.load("/nonexistent/libplugin.so");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::NotFound) << e.what();
  }
  h.host.load(SY_TEST_PLUGIN_GOOD);
  try {
    h.components.get(ComponentKind::Cache, "no-such-cache", "t");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::NotFound) << e.what();
  }
  const auto& ce = h.components.get(ComponentKind::Cache, "test-counter", "t");
  sy_cache_config cfg{sizeof(sy_cache_config), 1, 1, 1, SY_DTYPE_FLOAT32, SY_DEVICE_CPU, 0, 0, 0, 0, 0};
  PluginCacheManager cache(ce, cfg, OptionValues::validate(ce.options, {{"capacity_tokens", {"8", "t"}}}, ce.label()), &h.ctx);
  try {
    cache.release(42);  // the plugin answers SY_NOT_FOUND with a message
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::NotFound) << e.what();
    EXPECT_HAS(std::string(e.what()), "unknown sequence");
  }
  try {
    Session::create(config_with({SY_TEST_PLUGIN_THROWING}, {"test-throw"}));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::PluginFailure) << e.what();
    EXPECT_HAS(std::string(e.what()), "threw a C++ exception across the ABI");
  }
}

TEST(PluginAbi, WrongMajorVersionIsRefusedNamingBothVersions) {
  Host h;
  std::string msg = error_of([&] { h.host.load(SY_TEST_PLUGIN_WRONG_MAJOR); });
  EXPECT_HAS(msg, "was built for Switchyard plugin ABI 2.0");
  EXPECT_HAS(msg, "this host implements ABI 1." + std::to_string(SY_PLUGIN_ABI_MINOR));
  EXPECT_HAS(msg, SY_TEST_PLUGIN_WRONG_MAJOR);
  EXPECT_TRUE(h.host.libraries().empty());
}

TEST(PluginAbi, CppPluginInAHostOfAnotherMajorAnswersWithItsVersionsSoTheHostNamesBoth) {
  // The C++ path (plugin.hpp's SY_PLUGIN): given a host table of major 2, a
  // plugin reads nothing but the versions and answers with a description
  // holding only its own, which a host turns into "built for 1.x, this host
  // implements 2.y" (the C path above). Its init is called directly here,
  // as a host of another major would.
  void* lib = dlopen(SY_TEST_PLUGIN_GOOD, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  using Init = const sy_plugin_info* (*)(const sy_host_api*);
  auto init = reinterpret_cast<Init>(dlsym(lib, "switchyard_plugin_init"));
  ASSERT_NE(init, nullptr);
  sy_host_api future{};  // every function pointer NULL: calling one would crash
  future.struct_size = sizeof(future);
  future.abi_major = SY_PLUGIN_ABI_MAJOR + 1;
  const sy_plugin_info* info = init(&future);
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->abi_major, SY_PLUGIN_ABI_MAJOR);
  EXPECT_EQ(info->abi_minor, SY_PLUGIN_ABI_MINOR);
  EXPECT_EQ(info->struct_size, offsetof(sy_plugin_info, abi_minor) + sizeof(info->abi_minor));
  dlclose(lib);
}

TEST(PluginAbi, NewerMinorWithLargerDescriptorsLoadsAndRuns) {
  Host h;
  const PluginLibrary& lib = h.host.load(SY_TEST_PLUGIN_NEWER_MINOR);
  EXPECT_EQ(lib.abi_minor(), SY_PLUGIN_ABI_MINOR + 99);
  EXPECT_GT(lib.info().struct_size, sizeof(sy_plugin_info));
  EXPECT_GT(lib.info().kernels[0]->struct_size, sizeof(sy_kernel_desc));
  // Its Neg kernel (priority 50) runs a one-node graph.
  Graph g;
  Value x;
  x.name = "x";
  x.dtype = DType::F32;
  x.is_graph_input = true;
  ValueId xi = g.add_value(x);
  g.inputs.push_back(xi);
  Value y;
  y.name = "y";
  ValueId yi = g.add_value(y);
  Node n;
  n.op_type = "Neg";
  n.inputs = {xi};
  n.outputs = {yi};
  g.add_node(n);
  g.outputs.push_back({"y", yi});
  Executor ex(std::make_shared<Graph>(g), h.kernels, &h.threads);
  EXPECT_EQ(ex.placements()[0].provider, "newer-minor");
  auto out = ex.run(std::vector<Tensor>{Tensor::from<float>(Shape{3}, {1.f, -2.f, 0.5f})});
  EXPECT_EQ(out[0].data<float>()[1], 2.f);
}

TEST(PluginAbi, MissingEntryPointIsNamed) {
  Host h;
  std::string msg = error_of([&] { h.host.load(SY_TEST_PLUGIN_NO_ENTRY); });
  EXPECT_HAS(msg, "no exported entry point 'switchyard_plugin_init'");
  EXPECT_HAS(msg, SY_TEST_PLUGIN_NO_ENTRY);
  msg = error_of([&] { h.host.load("/nonexistent/libnothing.so"); });
  EXPECT_HAS(msg, "no such file");
}

TEST(PluginAbi, Sha256IsChecked) {
  Host h;
  std::string msg = error_of([&] { h.host.load(SY_TEST_PLUGIN_GOOD, std::string(64, '0')); });
  EXPECT_HAS(msg, "sha256 mismatch");
  EXPECT_HAS(msg, sha256_file(SY_TEST_PLUGIN_GOOD));
  std::string upper = sha256_file(SY_TEST_PLUGIN_GOOD);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  EXPECT_EQ(h.host.load(SY_TEST_PLUGIN_GOOD, upper).name(), "test-kernels");
}

TEST(PluginAbi, FailingPassReportsThePluginAndItsMessage) {
  std::string msg = error_of([] { Session::create(config_with({SY_TEST_PLUGIN_FAILING_PASS}, {"test-fail"})); });
  EXPECT_HAS(msg, "pass 'test-fail' failed");
  EXPECT_HAS(msg, "plugin 'test-failing'");
  EXPECT_HAS(msg, "refusing to rewrite this graph (test)");
}

TEST(PluginAbi, ThrowingPluginCodeIsAnErrorNotACrash) {
  std::string msg = error_of([] { Session::create(config_with({SY_TEST_PLUGIN_THROWING}, {"test-throw"})); });
  EXPECT_HAS(msg, "plugin 'test-throwing'");
  EXPECT_HAS(msg, "pass exploded");
  // Its Softmax kernel (priority 100) is chosen and throws at run time: the
  // request fails with the plugin's name, the session keeps working.
  auto s = Session::create(config_with({SY_TEST_PLUGIN_THROWING}, {}));
  BaselineGenerator gen(s->model());
  msg = error_of([&] { gen.last_logits({1, 403}); });
  EXPECT_HAS(msg, "plugin 'test-throwing'");
  EXPECT_HAS(msg, "kernel exploded");
  EXPECT_HAS(error_of([&] { gen.last_logits({1, 403}); }), "kernel exploded");
}

TEST(PluginAbi, DuplicateNamesAreRefused) {
  Host h;
  h.host.load(SY_TEST_PLUGIN_GOOD);
  std::string msg = error_of([&] { h.host.load(SY_TEST_PLUGIN_DUPLICATE); });
  EXPECT_HAS(msg, "two providers register pass 'test-noop'");
  EXPECT_HAS(msg, "plugin test-kernels");
  EXPECT_HAS(msg, "plugin test-duplicate");
  EXPECT_EQ(h.host.libraries().size(), 1u);  // nothing of the refused plugin stays
  msg = error_of([&] { h.host.load(SY_TEST_PLUGIN_GOOD); });
  EXPECT_HAS(msg, "a plugin named 'test-kernels' is already loaded");
}

TEST(PluginAbi, UnknownComponentListsTheKnownOnes) {
  std::string msg = error_of([] { Session::create(config_with({SY_TEST_PLUGIN_GOOD}, {"test-nope"})); });
  EXPECT_HAS(msg, "unknown pass 'test-nope'");
  EXPECT_HAS(msg, "test-noop (plugin test-kernels)");
  EXPECT_HAS(msg, "cse (built in)");
  auto cfg = config_with({SY_TEST_PLUGIN_GOOD}, {});
  cfg.scheduler = ComponentSelection{"round-robin", {}, "m.yaml:3: scheduler"};
  msg = error_of([&] { Session::create(cfg); });
  EXPECT_HAS(msg, "m.yaml:3: scheduler: unknown scheduler 'round-robin'; known: test-fcfs (plugin test-kernels)");
}

TEST(PluginAbi, LoadAndUnloadAThousandTimes) {
  for (int i = 0; i < 1000; ++i) {
    Host h;
    h.host.load(SY_TEST_PLUGIN_GOOD);
    const auto& se = h.components.get(ComponentKind::Scheduler, "test-fcfs", "t");
    PluginScheduler sched(se, OptionValues::validate(se.options, {}, se.label()), &h.ctx);
    sy_sched_input in{sizeof(sy_sched_input), nullptr, 0, nullptr, 0, 0, 16, 8, 8, 0.0, sizeof(sy_sched_seq)};
    ASSERT_TRUE(sched.plan(in).empty());
  }
}

TEST(PluginAbi, TwoProfilesUseDifferentKernelsWithEqualOutputs) {
  test::TempDir dir;
  std::ofstream(dir.path / "ab.yaml") << "model: " << test::model_path("stories260K.onnx") << "\n"
                                      << "threads: 1\n"
                                      << "plugins: [" << SY_TEST_PLUGIN_GOOD << "]\n"
                                      << "profiles:\n"
                                      << "  builtin:\n"
                                      << "    kernels: {forbid: [test-kernels]}\n"
                                      << "  plugin:\n"
                                      << "    kernels: {pin: {Sigmoid: test-kernels}}\n";
  Manifest m = Manifest::load((dir.path / "ab.yaml").string());
  auto a = Session::create(m.resolve("builtin"));
  auto b = Session::create(m.resolve("plugin"));
  auto count = [](Session& s, const std::string& provider) {
    int n = 0;
    for (const auto& p : s.model().executor().placements()) n += p.provider == provider;
    return n;
  };
  EXPECT_EQ(count(*a, "test-kernels"), 0);
  EXPECT_EQ(count(*b, "test-kernels"), 5);  // one Sigmoid per layer
  BaselineGenerator ga(a->model()), gb(b->model());
  GenerationRequest req;
  req.prompt = {1, 403, 407, 261, 378};
  req.max_tokens = 24;
  EXPECT_EQ(ga.generate({req})[0].tokens, gb.generate({req})[0].tokens);
  auto la = ga.last_logits(req.prompt), lb = gb.last_logits(req.prompt);
  for (size_t i = 0; i < la.size(); ++i) ASSERT_NEAR(la[i], lb[i], 1e-6);
}

}  // namespace
}  // namespace sy
