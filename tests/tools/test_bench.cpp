// switchyard bench and ab, as users run them: the real binary on a synth
// model through a manifest; the HTML report rendered by headless Chromium.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "bench/bench_runner.h"
#include "bench/workload.h"
#include "test_support.h"

namespace sy {
namespace {

test::ShellResult sh(const std::string& cmd) { return test::shell(cmd); }

struct SynthFixture : ::testing::Test {
  test::TempDir dir;
  std::string model, env;
  void SetUp() override {
    model = (dir.path / "tiny.onnx").string();
    ASSERT_EQ(sh(std::string(SWITCHYARD_CLI) + " synth --preset tiny --out " + model).status, 0);
    env = "SYNTH_MODEL=" + model + " SWITCHYARD_PLUGIN_DIR=" + SY_PLUGIN_DIR + " ";
  }
  // `switchyard COMMAND --manifest <the synth manifest> ARGS` on the tiny model.
  test::ShellResult cli(const std::string& command, const std::string& args) {
    return sh(env + SWITCHYARD_CLI + " " + command + " --manifest " + SY_SYNTH_MANIFEST + " " + args);
  }
};

TEST(Workload, GeneratedIsDeterministicAndSharesPrefixes) {
  WorkloadSpec s;
  s.requests = 20;
  s.input_min = 40;
  s.input_max = 80;
  s.shared_prefix = 0.5;
  s.seed = 3;
  Workload a = generate_workload(s, 512), b = generate_workload(s, 512);
  ASSERT_EQ(a.requests.size(), 20u);
  for (size_t i = 0; i < 20; ++i) {
    EXPECT_EQ(a.requests[i].request.prompt, b.requests[i].request.prompt);
    EXPECT_EQ(a.requests[i].arrival_s, b.requests[i].arrival_s);
    EXPECT_GE(a.requests[i].request.prompt.size(), 40u);
    EXPECT_LE(a.requests[i].request.prompt.size(), 80u);
    // At least 20 leading tokens (half of the shortest prompt) are common.
    EXPECT_TRUE(std::equal(a.requests[i].request.prompt.begin(), a.requests[i].request.prompt.begin() + 20, a.requests[0].request.prompt.begin()));
  }
  for (size_t i = 1; i < 20; ++i) EXPECT_GE(a.requests[i].arrival_s, a.requests[i - 1].arrival_s);
  EXPECT_EQ(percentiles({1, 2, 3, 4}).p50, 2.5);
}

TEST_F(SynthFixture, BenchReplaysATraceAndWritesJson) {
  std::ofstream(dir.path / "trace.jsonl") << "{\"arrival_s\": 0.0, \"input_len\": 20, \"output_len\": 5}\n"
                                          << "{\"arrival_s\": 0.05, \"prompt_ids\": [1, 5, 6, 7], \"output_len\": 8}\n"
                                          << "\n{\"arrival_s\": 0.01, \"input_len\": 64, \"output_len\": 3}\n";
  std::string out = (dir.path / "bench.json").string();
  auto r = cli("bench", "--profile continuous --workload " + (dir.path / "trace.jsonl").string() + " --out " + out + " --quiet");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("TTFT ms p99"), std::string::npos) << r.out;
  auto j = test::read_json(out);
  const auto& m = j["profiles"][0]["metrics"];
  EXPECT_EQ(m["completed requests"], 3);
  EXPECT_GT(m["output throughput tok/s"].get<double>(), 0);
  EXPECT_GT(m["MBU"].get<double>(), 0);
  EXPECT_EQ(j["profiles"][0]["requests"][1]["output_tokens"], 3);  // sorted by arrival
  auto bad = cli("bench", "--profile continuous --workload /nonexistent.jsonl");
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.out.find("cannot open the workload"), std::string::npos) << bad.out;
}

TEST_F(SynthFixture, AbComparesProfilesAndTheReportRendersInChromium) {
  std::string out = (dir.path / "ab.json").string(), html = (dir.path / "ab.html").string();
  auto r = cli("ab", "--profiles static,continuous --requests 16 --arrival burst --input-len 8:96 --output-len 4:24 --quiet --out " + out +
                         " --html " + html);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("greedy outputs agree: yes (16 of 16 requests identical)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ratio B/A"), std::string::npos);
  auto j = test::read_json(out);
  EXPECT_TRUE(j["outputs_agree"].get<bool>());
  ASSERT_EQ(j["profiles"].size(), 2u);
  // Headless Chromium renders the report: a screenshot, and no console
  // message from the page (it has no script and loads nothing).
  std::string png = (dir.path / "ab.png").string();
  auto c = sh("timeout 90 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1240,1500 --enable-logging=stderr "
              "--v=0 --screenshot=" + png + " file://" + html);
  ASSERT_EQ(c.status, 0) << c.out;
  EXPECT_EQ(c.out.find("CONSOLE"), std::string::npos) << c.out;
  EXPECT_EQ(c.out.find("Uncaught"), std::string::npos) << c.out;
  std::ifstream shot(png, std::ios::binary | std::ios::ate);
  ASSERT_TRUE(shot.good());
  EXPECT_GT(static_cast<long>(shot.tellg()), 20000);  // a real page, not a blank one
}

TEST_F(SynthFixture, AbRoundsAlternateAndReportMedians) {
  std::string out = (dir.path / "ab.json").string(), html = (dir.path / "ab.html").string();
  auto r = cli("ab", "--profiles static,continuous --rounds 3 --requests 8 --arrival burst --input-len 8:48 --output-len 4:12 --quiet --out " +
                         out + " --html " + html);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("greedy outputs agree: yes (8 of 8 requests identical)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("3 rounds, medians"), std::string::npos) << r.out;
  auto j = test::read_json(out);
  ASSERT_EQ(j["rounds"]["rounds"], 3);
  const auto& d = j["rounds"]["metrics"]["duration s"];
  ASSERT_EQ(d["a"].size(), 3u);
  ASSERT_EQ(d["b"].size(), 3u);
  // The median ratio is one of the rounds' ratios (3 rounds), within their range.
  const double ratio = d["median_ratio"].get<double>();
  EXPECT_LE(d["ratio_min"].get<double>(), ratio);
  EXPECT_GE(d["ratio_max"].get<double>(), ratio);
  bool one_of_them = false;
  for (size_t i = 0; i < 3; ++i)
    one_of_them = one_of_them || std::abs(d["b"][i].get<double>() / d["a"][i].get<double>() - ratio) < 1e-12;
  EXPECT_TRUE(one_of_them) << d.dump();
  EXPECT_EQ(j["rounds"]["metrics"]["completed requests"]["median_b"], 8);
  auto bad = cli("ab", "--profiles static,continuous --rounds 0 --requests 2");
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.out.find("--rounds"), std::string::npos) << bad.out;
}

}  // namespace
}  // namespace sy
