// The C++ facade (facade/engine.h) as the CLI and the bench runner use it,
// on the real stories260K export with the real attention and cache plugins:
// its answers must be the engine's own.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "facade/engine.h"
#include "test_support.h"

namespace sy {
namespace {

EngineOptions stories(const std::string& profile) {
  ::setenv("SWITCHYARD_PLUGIN_DIR", SY_PLUGIN_DIR, 1);
  EngineOptions o;
  o.manifest = SY_STORIES_MANIFEST;
  o.profile = profile;
  o.threads = 2;
  return o;
}

GenerationRequest greedy(std::vector<int> prompt, int max_tokens) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  return r;
}

TEST(Facade, SubmitGenerateAndTheBaselineAgree) {
  const std::vector<int> prompt = {1, 403, 407, 261, 378, 262};
  std::vector<int> baseline_tokens;
  {
    auto baseline = Engine::open(stories("baseline"));
    EXPECT_FALSE(baseline->has_step_engine());
    EXPECT_HAS(test::error_of([&] { baseline->submit(greedy(prompt, 4)); }), "runs on the step engine");
    baseline_tokens = baseline->generate({greedy(prompt, 24)})[0].tokens;
  }
  auto engine = Engine::open(stories("paged"));
  ASSERT_TRUE(engine->has_step_engine());
  EXPECT_EQ(engine->vocab_size(), 512);
  EXPECT_NE(engine->tokenizer_path().find("tok512.bin"), std::string::npos);
  EXPECT_EQ(engine->generate({greedy(prompt, 24)})[0].tokens, baseline_tokens);

  int finished = 0;
  std::future<GenerationResult> f = engine->submit(greedy(prompt, 24), [&](const GenerationResult&) { ++finished; });
  const GenerationResult r = f.get();
  EXPECT_EQ(r.tokens, baseline_tokens);
  EXPECT_EQ(finished, 1);
  const StepEngineMetrics m = engine->metrics();
  EXPECT_EQ(m.finished, 2);
  EXPECT_EQ(m.generated_tokens, 48);

  const EngineFootprint fp = engine->footprint();
  EXPECT_EQ(fp.threads, 2);
  EXPECT_GT(fp.weight_bytes, 0);
  EXPECT_EQ(fp.kv_bytes_per_token, 2 * 5 * 4 * 8 * 4);  // K and V, 5 layers, 4 KV heads of 8, fp32
}

TEST(Facade, PromptLogitsRowsAreTheLastLogitsOfEachPrefix) {
  auto engine = Engine::open(stories("paged"));
  const std::vector<int> prompt = {1, 403, 407, 261, 378};
  const std::vector<float> all = engine->prompt_logits(prompt);
  ASSERT_EQ(all.size(), prompt.size() * 512);
  for (size_t t = 1; t <= prompt.size(); ++t) {
    const std::vector<float> last = engine->last_logits(std::vector<int>(prompt.begin(), prompt.begin() + static_cast<long>(t)));
    ASSERT_EQ(last.size(), 512u);
    for (size_t v = 0; v < 512; ++v) ASSERT_NEAR(all[(t - 1) * 512 + v], last[v], 1e-4) << "position " << t - 1 << ", token " << v;
  }
}

TEST(Facade, DescribeSaysWhatTheEngineMadeOfTheModel) {
  auto engine = Engine::open(stories("paged"));
  const nlohmann::json j = engine->describe();
  EXPECT_EQ(j["cache"]["name"], "paged");
  EXPECT_TRUE(j["step_engine"].get<bool>());
  ASSERT_EQ(j["attention"].size(), 5u);  // one PagedAttention per layer
  EXPECT_EQ(j["attention"][0]["kv_heads"], 4);
  EXPECT_EQ(j["plugins"].size(), 2u);
  EXPECT_EQ(j["passes"][0]["name"], "attention-fusion");
  EXPECT_EQ(j["weight_bytes"], engine->footprint().weight_bytes);
}

TEST(Facade, OptionsNameWhatIsWrong) {
  EngineOptions o = stories("paged");
  o.without_passes = {"quantize"};
  EXPECT_HAS(test::error_of([&] { Engine::open(o); }), "profile 'paged' has no 'quantize' pass to leave out");
  o = stories("");
  o.manifest.clear();
  o.profile = "paged";
  EXPECT_HAS(test::error_of([&] { Engine::open(o); }), "profile 'paged' given without a manifest");
  EXPECT_HAS(test::error_of([] { check_device_spec("tpu:0"); }), "tpu:0");
}

}  // namespace
}  // namespace sy
