// The example third-party plugin (examples/silu_plugin), built out of tree
// against the installed SDK by the sdk_install_and_build_example_plugin
// fixture, loaded from its .so through its manifest.
#include <gtest/gtest.h>

#include <cstdlib>

#include "engine/generator.h"
#include "engine/session.h"
#include "test_support.h"

namespace sy {
namespace {

std::unique_ptr<Session> open(const std::string& profile) {
  ::setenv("SILU_PLUGIN", SILU_PLUGIN_PATH, 1);
  return Session::create(Manifest::load(SILU_MANIFEST).resolve(profile));
}

int count(const std::map<std::string, int>& ops, const std::string& op) {
  auto it = ops.find(op);
  return it == ops.end() ? 0 : it->second;
}

TEST(ExamplePlugin, FusionFiresAndLogitsStayWithin1e5) {
  auto base = open("baseline");
  auto fused = open("fused");
  const auto& stages = fused->report().op_counts_after;
  auto it = std::find_if(stages.begin(), stages.end(), [](const auto& s) { return s.first == "silu-fusion"; });
  ASSERT_NE(it, stages.end());
  EXPECT_EQ(count(it->second, "com.example::SiLU"), 5);  // one per layer
  EXPECT_EQ(count(it->second, "Sigmoid"), 0);
  EXPECT_EQ(count(base->model().graph().op_counts(), "Sigmoid"), 5);
  int silu_kernels = 0;
  for (const auto& p : fused->model().executor().placements()) silu_kernels += p.provider == "silu-example";
  EXPECT_EQ(silu_kernels, 5);

  BaselineGenerator gb(base->model()), gf(fused->model());
  auto ref = test::read_json(test::model_path("stories260K.ref.json"));
  const auto cases = ref["cases"];
  for (const auto& c : cases) {
    auto prompt = c["prompt_ids"].get<std::vector<int>>();
    auto lb = gb.last_logits(prompt), lf = gf.last_logits(prompt);
    double worst = 0;
    for (size_t i = 0; i < lb.size(); ++i) worst = std::max(worst, static_cast<double>(std::abs(lb[i] - lf[i])));
    EXPECT_LE(worst, 1e-5);
    std::printf("[ silu-example ] prompt of %zu tokens: max |fused - baseline| = %.3g\n", prompt.size(), worst);
    GenerationRequest req;
    req.prompt = prompt;
    req.max_tokens = 32;
    req.stop_at_eos = false;
    EXPECT_EQ(gf.generate({req})[0].tokens, c["greedy_ids"].get<std::vector<int>>());
  }
}

TEST(ExamplePlugin, InspectShowsThePluginAndTheOpCounts) {
  ::setenv("SILU_PLUGIN", SILU_PLUGIN_PATH, 1);
  auto [status, out] = test::shell(std::string(SWITCHYARD_CLI) + " inspect --manifest " + SILU_MANIFEST + " --profile fused");
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("silu-example 1.0.0 (ABI 1." + std::to_string(SY_PLUGIN_ABI_MINOR) + ")"), std::string::npos) << out;
  EXPECT_NE(out.find("kernel     silu_f32 1.0.0: com.example::SiLU on cpu, priority 0"), std::string::npos) << out;
  EXPECT_NE(out.find("silu-fusion (silu-example) keep_names=true"), std::string::npos) << out;
  EXPECT_NE(out.find("com.example::SiLU"), std::string::npos) << out;
}

}  // namespace
}  // namespace sy
