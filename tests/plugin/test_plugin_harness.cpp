// The SDK's plugin test harness (sdk/include/switchyard/plugin_testing.hpp)
// over the shipped schedulers, cache managers and drafters, plugins built
// against the frozen 1.0 header, and misbehaving plugins it must catch.
// This program links no part of the engine: only the SDK headers, gtest and
// the plugin libraries, as a third-party author's test would.
#include <gtest/gtest.h>

#include <switchyard/plugin_testing.hpp>

namespace {

namespace pt = sy::plugin::testing;

pt::Report scheduler(const char* lib, const char* name, std::map<std::string, std::string> options = {}, pt::SchedulerWorkload w = {}) {
  pt::MockHost host;
  host.load(lib);
  pt::Report r = pt::check_scheduler(host, name, std::move(options), w);
  std::printf("[ harness ] %s", r.summary().c_str());
  return r;
}

TEST(PluginHarness, ShippedSchedulersKeepTheContractUnderPreemption) {
  auto c = scheduler(SY_SCHEDULER_PLUGIN, "continuous");
  EXPECT_TRUE(c.ok()) << c.summary();
  EXPECT_GT(c.preemptions, 0) << "the workload is meant to fill the cache";
  auto chunked = scheduler(SY_SCHEDULER_PLUGIN, "continuous", {{"chunk_size", "32"}, {"priorities", "true"}});
  EXPECT_TRUE(chunked.ok()) << chunked.summary();
  auto st = scheduler(SY_SCHEDULER_PLUGIN, "static", {{"batch_size", "4"}, {"max_wait_ms", "0"}});
  EXPECT_TRUE(st.ok()) << st.summary();
  auto dyn = scheduler(SY_SCHEDULER_PLUGIN, "dynamic", {{"max_batch", "8"}, {"window_ms", "0"}});
  EXPECT_TRUE(dyn.ok()) << dyn.summary();
}

TEST(PluginHarness, SchedulerBuiltAgainstThe10HeaderIsDrivenAtIts10Stride) {
  auto r = scheduler(SY_ABI_1_0_PLUGIN, "fcfs-1.0");
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(PluginHarness, CatchesASchedulerOverItsBudgetAndOneThatFails) {
  auto over = scheduler(SY_FAULT_PLUGIN, "fault-scheduler", {{"fail_in", "none"}, {"ignore_budget", "true"}});
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.violations[0].find("over the budget of 256"), std::string::npos) << over.summary();
  auto failing = scheduler(SY_FAULT_PLUGIN, "fault-scheduler", {{"after", "5"}});
  ASSERT_FALSE(failing.ok());
  EXPECT_NE(failing.violations[0].find("step 5: plan failed: fault-scheduler plan: injected failure 1"), std::string::npos) << failing.summary();
  auto healthy = scheduler(SY_FAULT_PLUGIN, "fault-scheduler", {{"fail_in", "none"}});
  EXPECT_TRUE(healthy.ok()) << healthy.summary();
}

pt::Report cache(const char* lib, const char* name, std::map<std::string, std::string> options) {
  pt::MockHost host;
  host.load(lib);
  pt::Report r = pt::check_cache(host, name, std::move(options));
  std::printf("[ harness ] %s", r.summary().c_str());
  return r;
}

TEST(PluginHarness, ShippedCacheManagersKeepTheirBlockAccounting) {
  for (const char* name : {"paged", "prefix-caching"}) {
    auto r = cache(SY_CACHE_PLUGIN, name, {{"block_size", "16"}, {"num_blocks", "48"}});
    EXPECT_TRUE(r.ok()) << r.summary();
  }
  auto contiguous = cache(SY_CACHE_PLUGIN, "contiguous", {{"max_seq_len", "256"}, {"budget_mb", "1"}});
  EXPECT_TRUE(contiguous.ok()) << contiguous.summary();
  auto faulty = cache(SY_FAULT_PLUGIN, "fault-cache", {{"fail_in", "none"}, {"num_blocks", "48"}});
  EXPECT_TRUE(faulty.ok()) << faulty.summary();
}

TEST(PluginHarness, CatchesACacheManagerThatFails) {
  auto r = cache(SY_FAULT_PLUGIN, "fault-cache", {{"fail_in", "commit"}, {"after", "10"}, {"num_blocks", "48"}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.summary().find("commit failed: fault-cache commit: injected failure 1"), std::string::npos) << r.summary();
}

pt::Report drafter(const char* lib, const char* name, std::map<std::string, std::string> options = {}) {
  pt::MockHost host;
  host.load(lib);
  pt::Report r = pt::check_drafter(host, name, std::move(options));
  std::printf("[ harness ] %s", r.summary().c_str());
  return r;
}

TEST(PluginHarness, ShippedAndSamplingDraftersProposeValidDrafts) {
  auto lookup = drafter(SY_SPECULATIVE_PLUGIN, "prompt-lookup");
  EXPECT_TRUE(lookup.ok()) << lookup.summary();
  auto sampling = drafter(SY_SAMPLING_DRAFTER_PLUGIN, "sampled-lookup");
  EXPECT_TRUE(sampling.ok()) << sampling.summary();
  auto old = drafter(SY_ABI_1_0_PLUGIN, "bigram-1.0");
  EXPECT_TRUE(old.ok()) << old.summary();
}

TEST(PluginHarness, CatchesADrafterOutsideTheVocabulary) {
  auto r = drafter(SY_FAULT_PLUGIN, "bad-drafter");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.violations[0].find("outside the vocabulary of 512"), std::string::npos) << r.summary();
}

TEST(PluginHarness, RequiredOptionsAndUnknownComponentsAreNamed) {
  pt::MockHost host;
  host.load(SY_SCHEDULER_PLUGIN);
  try {
    pt::check_scheduler(host, "no-such-scheduler");
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("the plugin has no scheduler 'no-such-scheduler'"), std::string::npos) << e.what();
  }
}

}  // namespace
