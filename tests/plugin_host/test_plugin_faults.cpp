// A failing plugin never hangs the engine: every plugin kind the step calls
// (scheduler plan; cache allocate for admission and growth, match_prefix,
// commit, release; drafter propose and accepted), failing by an error status
// or by an exception thrown across the ABI, through every entry point
// (generate here; bench and ab through the CLI; serve in
// tests/server/test_plugin_faults.py). The profiles are in
// tests/plugin_host/fixtures/faults.yaml; the plugin is tests/plugin_host/fixtures/fault_plugin.cpp.
//
// What each test demands: every request finishes in bounded time; a request
// the failure concerns fails with the plugin's name and message; every
// other request's tokens equal a healthy engine's; another session running
// at the same time is untouched.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <thread>

#include "engine/session.h"
#include "test_support.h"

namespace sy {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<Session> open(const std::string& profile) {
  ::setenv("SWITCHYARD_PLUGIN_DIR", SY_PLUGIN_DIR, 1);
  ::setenv("SY_FAULT_PLUGIN", SY_FAULT_PLUGIN, 1);
  return Session::create(Manifest::load(SY_FAULTS_MANIFEST).resolve(profile));
}

std::vector<GenerationRequest> workload() {
  const std::vector<std::vector<int>> prompts = {
      {1, 403, 407, 261, 378}, {1, 365, 372, 267, 429, 297}, {1, 403, 407, 261, 378, 300, 280}, {1, 290, 311, 276}};
  std::vector<GenerationRequest> out;
  for (const auto& p : prompts) out.push_back(test::greedy(p, 40));
  return out;
}

// Submits all and waits for each with a bound far above the normal time
// (well under a second here): a hang fails the test instead of stalling it.
// The engine thread may put a failing scheduler out of service before the
// last submit (a slow sanitizer build lets it run several steps between
// two submits): submit() then refuses at once naming the plugin, which
// counts as that request failing with the plugin's message.
std::vector<GenerationResult> run_bounded(Session& s, const std::vector<GenerationRequest>& requests) {
  std::vector<std::future<GenerationResult>> futures(requests.size());
  std::vector<GenerationResult> out(requests.size());
  std::vector<bool> refused(requests.size(), false);
  for (size_t i = 0; i < requests.size(); ++i) {
    try {
      s.step_engine()->submit(requests[i], {}, &futures[i]);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::PluginFailure) << e.what();
      out[i].finish_reason = FinishReason::Error;
      out[i].error = e.what();
      refused[i] = true;
    }
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    if (refused[i]) continue;
    if (futures[i].wait_for(60s) != std::future_status::ready) {
      ADD_FAILURE() << "a request did not finish within 60 s: the engine hangs";
      std::abort();  // the engine thread cannot be joined; nothing else to do
    }
    out[i] = futures[i].get();
  }
  return out;
}

const std::vector<GenerationResult>& healthy_results() {
  static const std::vector<GenerationResult> r = [] {
    auto s = open("healthy");
    return run_bounded(*s, workload());
  }();
  return r;
}

bool names_the_plugin(const std::string& error) {
  return error.find("fault-injection") != std::string::npos && error.find("injected failure") != std::string::npos;
}

struct FaultCase {
  const char* profile;
  bool some_fail;  // false: the engine absorbs the failure, every output exact
};

void PrintTo(const FaultCase& c, std::ostream* os) { *os << c.profile; }

class PluginFaults : public testing::TestWithParam<FaultCase> {};

TEST_P(PluginFaults, AffectedRequestsFailNamingThePluginTheOthersFinishExactly) {
  const FaultCase c = GetParam();
  const auto& healthy = healthy_results();
  // Another session, healthy, at the same time on another thread.
  std::vector<GenerationResult> bystander;
  std::thread other([&] {
    auto s = open("healthy");
    bystander = run_bounded(*s, workload());
  });
  auto s = open(c.profile);
  const auto results = run_bounded(*s, workload());
  other.join();

  int failed = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    const GenerationResult& r = results[i];
    if (r.finish_reason == FinishReason::Error) {
      ++failed;
      EXPECT_TRUE(names_the_plugin(r.error)) << c.profile << " request " << i << ": " << r.error;
    } else {
      EXPECT_EQ(r.tokens, healthy[i].tokens) << c.profile << " request " << i;
    }
    EXPECT_EQ(bystander[i].tokens, healthy[i].tokens) << "the other session's request " << i;
  }
  if (c.some_fail) EXPECT_GT(failed, 0) << c.profile << ": the fault never fired";
  else EXPECT_EQ(failed, 0) << c.profile;
  const auto m = s->step_engine()->metrics();
  std::printf("[ faults ] %-16s %d of %zu requests failed; plugin failures absorbed %lld%s%s\n", c.profile, failed, results.size(),
              static_cast<long long>(m.plugin_failures), m.last_plugin_failure.empty() ? "" : "; last: ",
              m.last_plugin_failure.substr(0, 160).c_str());

  // The engine still serves (or, with its scheduler out of service, refuses
  // at once naming the plugin): nothing waits for ever.
  std::future<GenerationResult> next;
  try {
    s->step_engine()->submit(test::greedy({1, 403, 407}, 4), {}, &next);
    ASSERT_EQ(next.wait_for(60s), std::future_status::ready) << c.profile << ": a request after the failures hangs";
    GenerationResult r = next.get();
    if (r.finish_reason == FinishReason::Error) {
      EXPECT_TRUE(names_the_plugin(r.error)) << r.error;
    }
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::PluginFailure) << e.what();
    EXPECT_TRUE(names_the_plugin(e.what())) << e.what();
    EXPECT_NE(std::string(e.what()).find("out of service"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(EveryKindAndEntryPoint, PluginFaults,
                         testing::Values(FaultCase{"plan-status", true}, FaultCase{"plan-throw", true},
                                         FaultCase{"plan-transient", false}, FaultCase{"plan-fallback", false},
                                         FaultCase{"allocate-status", true}, FaultCase{"allocate-throw", true},
                                         FaultCase{"extend-status", true}, FaultCase{"extend-throw", true},
                                         FaultCase{"match-status", true}, FaultCase{"commit-throw", true},
                                         FaultCase{"release-status", true}, FaultCase{"release-throw", true},
                                         FaultCase{"propose-status", true}, FaultCase{"propose-throw", true},
                                         FaultCase{"accepted-status", true}),
                         [](const testing::TestParamInfo<FaultCase>& i) {
                           std::string n = i.param.profile;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

TEST(PluginFaults, AnOutOfServiceSchedulerRefusesNewRequestsNamingIt) {
  auto s = open("plan-status");
  const auto results = run_bounded(*s, workload());
  for (const auto& r : results) {
    EXPECT_EQ(r.finish_reason, FinishReason::Error);
    EXPECT_NE(r.error.find("scheduler 'fault-scheduler'"), std::string::npos) << r.error;
    EXPECT_NE(r.error.find("failed 3 steps in a row: the scheduler is out of service"), std::string::npos) << r.error;
  }
  const std::string e = test::error_of([&] { s->step_engine()->submit(test::greedy({1, 403}, 4), {}); });
  EXPECT_NE(e.find("out of service"), std::string::npos) << e;
}

TEST(PluginFaults, ATransientPlanFailureCostsNothingAndIsCounted) {
  auto s = open("plan-transient");
  const auto results = run_bounded(*s, workload());
  for (size_t i = 0; i < results.size(); ++i) EXPECT_EQ(results[i].tokens, healthy_results()[i].tokens);
  const auto m = s->step_engine()->metrics();
  EXPECT_EQ(m.plugin_failures, 2);
  EXPECT_TRUE(names_the_plugin(m.last_plugin_failure)) << m.last_plugin_failure;
}

// bench and ab (the CLI) end with the plugin's error and a non-zero exit,
// never a hang: each run is bounded by `timeout` far above its normal time.
struct CliCase {
  const char* command;
  const char* profile;
};
void PrintTo(const CliCase& c, std::ostream* os) { *os << c.command << " " << c.profile; }

class PluginFaultsCli : public testing::TestWithParam<CliCase> {};

TEST_P(PluginFaultsCli, ExitsWithThePluginsErrorInsteadOfHanging) {
  const CliCase c = GetParam();
  ::setenv("SWITCHYARD_PLUGIN_DIR", SY_PLUGIN_DIR, 1);
  ::setenv("SY_FAULT_PLUGIN", SY_FAULT_PLUGIN, 1);
  test::TempDir dir;
  const std::string profile = std::string(c.command) == "ab" ? std::string("--profiles healthy,") + c.profile : std::string("--profile ") + c.profile;
  const std::string cmd = std::string("cd ") + dir.path.string() + " && timeout 300 " + SWITCHYARD_CLI + " " + c.command + " --manifest " +
                          SY_FAULTS_MANIFEST + " " + profile + " --quiet --requests 12 --arrival burst --input-len 8:48 --output-len 8:40";
  const auto t0 = std::chrono::steady_clock::now();
  auto [status, out] = test::shell(cmd);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ faults ] switchyard %s %s: exit %d in %.1f s\n", c.command, c.profile, status, seconds);
  ASSERT_NE(status, 124) << "timed out (a hang):\n" << out;
  EXPECT_EQ(status, 4) << out;
  EXPECT_TRUE(names_the_plugin(out)) << out;
  EXPECT_NE(out.find("requests failed; the first error:"), std::string::npos) << out;
}

INSTANTIATE_TEST_SUITE_P(BenchAndAb, PluginFaultsCli,
                         testing::Values(CliCase{"bench", "plan-status"}, CliCase{"bench", "plan-throw"}, CliCase{"ab", "plan-status"},
                                         CliCase{"ab", "plan-throw"}, CliCase{"bench", "allocate-status"},
                                         CliCase{"ab", "allocate-throw"}, CliCase{"bench", "extend-throw"},
                                         CliCase{"bench", "commit-throw"}, CliCase{"bench", "propose-status"},
                                         CliCase{"ab", "propose-throw"}),
                         [](const testing::TestParamInfo<CliCase>& i) {
                           std::string n = std::string(i.param.command) + "_" + i.param.profile;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

TEST(PluginFaultsCli, AFallbackSchedulerFinishesTheBenchmark) {
  ::setenv("SWITCHYARD_PLUGIN_DIR", SY_PLUGIN_DIR, 1);
  ::setenv("SY_FAULT_PLUGIN", SY_FAULT_PLUGIN, 1);
  test::TempDir dir;
  auto [status, out] = test::shell(std::string("cd ") + dir.path.string() + " && timeout 300 " + SWITCHYARD_CLI + " ab --manifest " +
                                   SY_FAULTS_MANIFEST + " --profiles healthy,plan-fallback --quiet --requests 12 --arrival burst " +
                                   "--input-len 8:48 --output-len 8:40");
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("greedy outputs agree: yes"), std::string::npos) << out;
}

}  // namespace
}  // namespace sy
