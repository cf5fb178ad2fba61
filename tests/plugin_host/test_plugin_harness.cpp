// The SDK's plugin test harness (sdk/include/switchyard/plugin_testing.hpp)
// over the shipped schedulers, cache managers and drafters, plugins built
// against the frozen 1.0 header, and misbehaving plugins it must catch.
// This program links no part of the engine: only the SDK headers, gtest and
// the plugin libraries, as a third-party author's test would.
#include <gtest/gtest.h>

#include <switchyard/plugin_testing.hpp>

#include <algorithm>
#include <random>
#include <vector>

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
  for (const char* tpot : {"0.001", "50"}) {  // a target no step meets, and a loose one
    auto slo = scheduler(SY_SCHEDULER_PLUGIN, "slo", {{"tpot_ms", tpot}});
    EXPECT_TRUE(slo.ok()) << slo.summary();
  }
}

TEST(PluginHarness, SloSchedulerWithDeadlinesKeepsTheContractAndStarvesNobody) {
  // A 30 ms first-token target at 10 ms a simulated step: most requests
  // miss it and are served after the ones that can still make it; none may
  // starve (starve_ms default, and off).
  pt::SchedulerWorkload w;
  w.arrivals_per_step = 2;
  for (const char* starve : {"-1", "0"}) {
    auto r = scheduler(SY_SCHEDULER_PLUGIN, "slo", {{"tpot_ms", "10"}, {"ttft_ms", "30"}, {"starve_ms", starve}}, w);
    EXPECT_TRUE(r.ok()) << r.summary();
  }
}

// The slo scheduler's prompt order, from its plans on a simulated engine
// whose step takes 2 ms + 0.1 ms per token: under a 10 ms TPOT target a step
// has room for about 80 tokens, so of two 64-token prompts the first in
// line is run whole and the other gets the rest.
struct SloProbe {
  pt::MockHost host;
  const sy_scheduler_desc* d = nullptr;
  void* state = nullptr;
  double now = 0;
  explicit SloProbe(std::map<std::string, std::string> options) {
    host.load(SY_SCHEDULER_PLUGIN);
    d = host.scheduler("slo");
    EXPECT_EQ(d->create(nullptr, host.options(d->options, d->num_options, std::move(options)), &state), SY_OK) << pt::MockHost::error();
  }
  ~SloProbe() { d->destroy(state); }
  // One plan over these sequences; the simulated step time follows.
  std::map<uint64_t, int32_t> plan(const std::vector<sy_sched_seq>& waiting, const std::vector<sy_sched_seq>& running) {
    sy_sched_input in{};
    in.struct_size = sizeof in;
    in.waiting = waiting.data();
    in.num_waiting = static_cast<int32_t>(waiting.size());
    in.running = running.data();
    in.num_running = static_cast<int32_t>(running.size());
    in.free_blocks = 1000;
    in.block_size = 16;
    in.token_budget = 512;
    in.max_seqs = 64;
    in.now = now;
    in.seq_size = sizeof(sy_sched_seq);
    std::vector<sy_sched_decision> out(128);
    int32_t count = 0;
    EXPECT_EQ(d->plan(state, &in, out.data(), 128, &count), SY_OK) << pt::MockHost::error();
    std::map<uint64_t, int32_t> tokens;
    int32_t total = 0;
    for (int32_t i = 0; i < count; ++i)
      if (out[static_cast<size_t>(i)].action == SY_SCHED_RUN) {
        tokens[out[static_cast<size_t>(i)].seq_id] = out[static_cast<size_t>(i)].num_tokens;
        total += out[static_cast<size_t>(i)].num_tokens;
      }
    now += 0.002 + 0.0001 * total;
    return tokens;
  }
  static sy_sched_seq waiting(uint64_t id, int32_t prompt, double arrival) {
    sy_sched_seq s{};
    s.id = id;
    s.state = SY_SEQ_WAITING;
    s.prompt_len = prompt;
    s.max_tokens = 8;
    s.arrival_time = arrival;
    s.remaining_tokens = prompt;
    return s;
  }
  // Steps of varied sizes, so the cost model is fitted.
  void warm_up() {
    for (int i = 0; i < 12; ++i) plan({waiting(900 + static_cast<uint64_t>(i), 8 + 40 * (i % 4), now)}, {});
  }
};

TEST(SloScheduler, ServesThePromptThatCanStillMakeItsDeadlineBeforeOneAlreadyLate) {
  SloProbe probe({{"tpot_ms", "10"}, {"ttft_ms", "100"}, {"warmup_tokens", "64"}});
  probe.warm_up();
  const double now = probe.now;
  auto late = SloProbe::waiting(1, 64, now - 0.2), fresh = SloProbe::waiting(2, 64, now);  // not yet starved (400 ms)
  auto got = probe.plan({late, fresh}, {});
  std::printf("[ slo ] late request %d tokens, fresh request %d tokens\n", got[1], got[2]);
  EXPECT_EQ(got[2], 64) << "the request that can still meet 100 ms goes first";
  EXPECT_LT(got[1], 64);
  // Without a first-token target: arrival order.
  SloProbe fcfs({{"tpot_ms", "10"}, {"warmup_tokens", "64"}});
  fcfs.warm_up();
  auto order = fcfs.plan({SloProbe::waiting(1, 64, fcfs.now - 0.5), SloProbe::waiting(2, 64, fcfs.now)}, {});
  EXPECT_EQ(order[1], 64);
  EXPECT_LT(order[2], 64);
}

TEST(SloScheduler, ANegativeStarveTimeOtherThanTheDefaultIsRefused) {
  pt::MockHost host;
  host.load(SY_SCHEDULER_PLUGIN);
  const sy_scheduler_desc* d = host.scheduler("slo");
  void* state = nullptr;
  ASSERT_NE(d->create(nullptr, host.options(d->options, d->num_options, {{"tpot_ms", "10"}, {"starve_ms", "-5"}}), &state), SY_OK);
  EXPECT_NE(pt::MockHost::error().find("starve_ms must be >= 0"), std::string::npos) << pt::MockHost::error();
}

TEST(SloScheduler, AStarvedPromptGoesFirstEvenWhenLate) {
  SloProbe probe({{"tpot_ms", "10"}, {"ttft_ms", "100"}, {"starve_ms", "400"}, {"warmup_tokens", "64"}});
  probe.warm_up();
  const double now = probe.now;
  auto got = probe.plan({SloProbe::waiting(1, 64, now - 0.5), SloProbe::waiting(2, 64, now)}, {});
  EXPECT_EQ(got[1], 64) << "waited 500 ms, past starve_ms";
  EXPECT_LT(got[2], 64);
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

// The prompt-lookup drafter keeps an n-gram index per sequence; its
// proposals must be exactly those of the plain rescan it replaced (the
// latest earlier occurrence of the last g tokens, longest g first; the k
// tokens that followed it, a copy reaching the end going on from its own
// proposals).
std::vector<int32_t> rescan(const std::vector<int32_t>& t, int32_t gmin, int32_t gmax, int32_t k) {
  const auto n = static_cast<int32_t>(t.size());
  for (int32_t g = std::min(gmax, n - 1); g >= gmin; --g)
    for (int32_t start = n - g - 1; start >= 0; --start)
      if (std::equal(t.end() - g, t.end(), t.begin() + start)) {
        std::vector<int32_t> text = t;
        for (int32_t i = 0; i < k; ++i) text.push_back(text[static_cast<size_t>(start + g + i)]);
        return std::vector<int32_t>(text.end() - k, text.end());
      }
  return {};
}

// A repetition (a loop in the output, a list, a table) is proposed k deep,
// not just up to the end of the text.
TEST(PluginHarness, PromptLookupProposesARepetitionKDeep) {
  pt::MockHost host;
  host.load(SY_SPECULATIVE_PLUGIN);
  const sy_drafter_desc* d = host.drafter("prompt-lookup");
  void* state = nullptr;
  ASSERT_EQ(d->create(nullptr, host.options(d->options, d->num_options, {{"k", "6"}}), &state), SY_OK);
  const std::vector<int32_t> t{9, 1, 2, 3, 1, 2, 3, 1, 2};
  int32_t out[6], count = -1;
  ASSERT_EQ(d->propose(state, 1, t.data(), static_cast<int32_t>(t.size()), 6, out, &count), SY_OK);
  EXPECT_EQ(std::vector<int32_t>(out, out + count), (std::vector<int32_t>{3, 1, 2, 3, 1, 2}));
  const std::vector<int32_t> same{5, 7, 7};  // one token repeated
  ASSERT_EQ(d->propose(state, 2, same.data(), 3, 4, out, &count), SY_OK);
  EXPECT_EQ(std::vector<int32_t>(out, out + count), (std::vector<int32_t>{7, 7, 7, 7}));
  d->destroy(state);
}

TEST(PluginHarness, PromptLookupsIndexProposesWhatARescanWould) {
  pt::MockHost host;
  host.load(SY_SPECULATIVE_PLUGIN);
  const sy_drafter_desc* d = host.drafter("prompt-lookup");
  void* state = nullptr;
  ASSERT_EQ(d->create(nullptr, host.options(d->options, d->num_options, {{"ngram_min", "1"}, {"ngram_max", "4"}, {"k", "5"}}), &state), SY_OK);
  std::mt19937 rng(3);
  int64_t proposals = 0, nonempty = 0;
  for (uint64_t seq = 1; seq <= 6; ++seq) {
    std::vector<int32_t> t;
    for (int step = 0; step < 400; ++step) {
      // Append 1-3 tokens from a small alphabet (repeats are common), as accepted drafts would.
      for (int a = 1 + static_cast<int>(rng() % 3); a > 0; --a) t.push_back(static_cast<int32_t>(rng() % (seq + 3)));
      int32_t out[5], count = -1;
      ASSERT_EQ(d->propose(state, seq, t.data(), static_cast<int32_t>(t.size()), 5, out, &count), SY_OK);
      const auto expected = rescan(t, 1, 4, 5);
      ASSERT_EQ(std::vector<int32_t>(out, out + count), expected) << "sequence " << seq << " at " << t.size() << " tokens";
      ++proposals;
      nonempty += count > 0;
    }
    if (seq == 3) {  // a sequence that changed under the drafter is re-indexed
      t.resize(t.size() / 2);
      t.back() = 999;
      int32_t out[5], count = -1;
      ASSERT_EQ(d->propose(state, seq, t.data(), static_cast<int32_t>(t.size()), 5, out, &count), SY_OK);
      EXPECT_EQ(std::vector<int32_t>(out, out + count), rescan(t, 1, 4, 5));
    }
    ASSERT_EQ(d->release(state, seq), SY_OK);
  }
  d->destroy(state);
  std::printf("[ harness ] prompt-lookup: %lld proposals equal to the rescan's (%lld non-empty)\n", static_cast<long long>(proposals),
              static_cast<long long>(nonempty));
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
