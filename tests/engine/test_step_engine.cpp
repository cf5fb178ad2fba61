// Fused attention over each cache manager against the references and the
// baseline mode: logits, greedy ids, ragged batches, prefix caching, paging
// waste, cache exhaustion, KV-size strategies.
#include <gtest/gtest.h>

#include <cmath>

#include "step_support.h"

namespace sy {
namespace {

using test::paged_config;

std::vector<int> ints(const nlohmann::json& j) { return j.get<std::vector<int>>(); }

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, static_cast<double>(std::abs(a[i] - b[i])));
  return m;
}

using test::greedy;

struct Combo {
  std::string model, cache;
  std::map<std::string, std::string> options;
};

void PrintTo(const Combo& c, std::ostream* os) { *os << c.model << "/" << c.cache; }

class FusedMatchesReference : public ::testing::TestWithParam<Combo> {};

TEST_P(FusedMatchesReference, LogitsAndGreedyIds) {
  const Combo& c = GetParam();
  auto session = Session::create(paged_config(c.model, c.cache, c.options));
  ASSERT_NE(session->step_engine(), nullptr);
  auto base = Session::create(paged_config(c.model, ""));
  auto ref = test::read_json(test::model_path(c.model + ".ref.json"));
  const auto cases = ref["cases"];
  for (const auto& rc : cases) {
    auto prompt = ints(rc["prompt_ids"]);
    std::vector<float> ref_logits = rc["last_logits"].get<std::vector<float>>();
    auto fused = session->last_logits(prompt);
    double vs_ref = max_abs_diff(fused, ref_logits), vs_base = max_abs_diff(fused, base->last_logits(prompt));
    EXPECT_LE(vs_ref, 1e-4);
    EXPECT_LE(vs_base, 1e-4);
    std::printf("[ %s/%s ] %zu-token prompt: max |fused - ref| %.2g, |fused - baseline| %.2g\n", c.model.c_str(), c.cache.c_str(),
                prompt.size(), vs_ref, vs_base);
    EXPECT_EQ(session->generate({greedy(prompt, 32)})[0].tokens, ints(rc["greedy_ids"]));
  }
  // The reference batch: two prompts of different lengths together.
  auto b = ref["batch"];
  std::vector<GenerationRequest> batch;
  for (size_t r = 0; r < b["input_ids"].size(); ++r) {
    std::vector<int> p;
    for (size_t j = 0; j < b["input_ids"][r].size(); ++j)
      if (b["attention_mask"][r][j].get<int>() == 1) p.push_back(b["input_ids"][r][j].get<int>());
    batch.push_back(greedy(p, 16));
  }
  auto res = session->generate(batch);
  for (size_t r = 0; r < batch.size(); ++r) EXPECT_EQ(res[r].tokens, ints(b["greedy_ids"][r]));
}

std::vector<Combo> combos() {
  std::vector<Combo> out;
  for (const char* m : {"stories260K", "llama_mha_tiny_random", "llama_mqa_tiny_random"}) {
    out.push_back({m, "contiguous", {{"max_seq_len", "64"}}});
    out.push_back({m, "paged", {{"block_size", "4"}}});
    out.push_back({m, "prefix-caching", {{"block_size", "4"}}});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllModelsAllCaches, FusedMatchesReference, ::testing::ValuesIn(combos()),
                         [](const ::testing::TestParamInfo<Combo>& combo) {
                           std::string n = combo.param.model + "_" + combo.param.cache;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

// Six prompts of different lengths; a small token budget forces chunked
// prefill to share steps with other sequences' decode tokens.
std::vector<GenerationRequest> six_requests() {
  std::vector<std::vector<int>> prompts = {{1},
                                           {1, 403, 407, 261, 378},
                                           {1, 360, 317, 455, 386, 370, 264, 334, 281, 422, 415, 46, 436, 472, 258, 360, 261, 331, 433},
                                           {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298},
                                           {1, 300, 301},
                                           {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337, 410, 408}};
  std::vector<GenerationRequest> out;
  for (size_t i = 0; i < prompts.size(); ++i) out.push_back(greedy(prompts[i], 12 + static_cast<int>(i)));
  return out;
}

TEST(StepEngine, RaggedBatchEqualsEachSequenceAlone) {
  auto session = Session::create(paged_config("stories260K", "paged", {{"block_size", "4"}}));
  auto cfg = paged_config("stories260K", "paged", {{"block_size", "4"}});
  cfg.max_batch_tokens = 8;
  auto small_steps = Session::create(cfg);
  StepEngine& engine = *small_steps->step_engine();
  auto reqs = six_requests();
  auto together = engine.generate(reqs);
  EXPECT_GT(engine.metrics().mixed_steps, 0) << "no step mixed prefill chunks with decode tokens";
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto alone = session->generate({reqs[i]});
    EXPECT_EQ(together[i].tokens, alone[0].tokens) << "request " << i;
  }
}

TEST(StepEngine, FusedEqualsBaselineOnMixedBatch) {
  auto fused = Session::create(paged_config("llama_mqa_tiny_random", "prefix-caching", {{"block_size", "4"}}));
  auto base = Session::create(paged_config("llama_mqa_tiny_random", ""));
  auto reqs = six_requests();
  auto a = fused->generate(reqs), b = base->generate(reqs);
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(a[i].tokens, b[i].tokens) << "request " << i;
}

TEST(PrefixCache, SharedPrefixIsReusedAndOutputsAreUnchanged) {
  std::vector<int> prefix = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396,
                             267, 337, 410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385, 328, 432, 358};
  std::vector<GenerationRequest> reqs;
  for (int s = 0; s < 4; ++s) {
    auto p = prefix;
    p.push_back(300 + s);
    p.push_back(310 + s);
    reqs.push_back(greedy(p, 10));
  }
  auto cached = Session::create(paged_config("stories260K", "prefix-caching", {{"block_size", "4"}}));
  auto plain = Session::create(paged_config("stories260K", "paged", {{"block_size", "4"}}));
  for (const auto& r : reqs) {  // one after another: each finds the earlier ones' blocks
    auto a = cached->generate({r}), b = plain->generate({r});
    EXPECT_EQ(a[0].tokens, b[0].tokens);
  }
  const auto& m = cached->step_engine()->metrics();
  EXPECT_GT(m.cached_tokens, 0);
  // Requests 2..4 reuse all 9 full blocks of the 36-token shared prefix.
  EXPECT_EQ(m.cached_tokens, 3 * 36);
  EXPECT_NEAR(m.prefix_hit_rate(), 108.0 / (4 * 38), 1e-9);
  EXPECT_EQ(plain->step_engine()->metrics().cached_tokens, 0);
  // Together in one batch too (the first admitted fills the cache only after its prefill).
  auto together = cached->generate(reqs);
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(together[i].tokens, plain->generate({reqs[i]})[0].tokens);
}

TEST(PagedCache, WasteBelowOneBlockPerSequence) {
  auto session = Session::create(paged_config("stories260K", "paged", {{"block_size", "16"}}));
  auto reqs = six_requests();
  for (size_t i = 0; i < reqs.size(); ++i) reqs[i].max_tokens = 5 + 7 * static_cast<int>(i);
  session->generate(reqs);
  const auto& m = session->step_engine()->metrics();
  std::printf("[ paged ] block 16: worst single-sequence waste %lld tokens, worst step mean %.2f tokens per sequence\n",
              static_cast<long long>(m.max_waste_tokens), m.max_mean_waste_tokens);
  EXPECT_LT(m.max_waste_tokens, 16);
  EXPECT_LT(m.max_mean_waste_tokens, 16.0);
}

TEST(PagedCache, ExhaustionPreemptsWithoutLoss) {
  // 12 blocks of 4 tokens: the six requests cannot all hold their KV at once.
  auto tight = Session::create(paged_config("stories260K", "paged", {{"block_size", "4"}, {"num_blocks", "12"}}));
  auto roomy = Session::create(paged_config("stories260K", "paged", {{"block_size", "4"}}));
  auto reqs = six_requests();
  auto a = tight->generate(reqs), b = roomy->generate(reqs);
  EXPECT_GT(tight->step_engine()->metrics().preemptions, 0);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << "request " << i;
    EXPECT_EQ(a[i].finish_reason, FinishReason::Length);
  }
  // A request that cannot fit even alone is an error, not a hang.
  auto tiny = Session::create(paged_config("stories260K", "paged", {{"block_size", "4"}, {"num_blocks", "2"}}));
  try {
    tiny->generate({greedy(std::vector<int>(20, 300), 4)});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs more than the whole KV cache"), std::string::npos) << e.what();
  }
}

TEST(KvStrategies, OwnHeadCountAndLongWindowAreExact) {
  for (const auto& [model, heads] : std::vector<std::pair<std::string, std::string>>{{"llama_mha_tiny_random", "6"}, {"stories260K", "4"}}) {
    auto plain = Session::create(paged_config(model, "paged", {{"block_size", "4"}}));
    auto same_heads = Session::create(paged_config(model, "paged", {{"block_size", "4"}}, {{"kv_heads", heads}}));
    auto long_window = Session::create(paged_config(model, "paged", {{"block_size", "4"}, {"window", "4096"}}, {{"window", "4096"}}));
    std::vector<int> prompt = {1, 403, 407, 261, 378, 432, 383, 286};
    auto l0 = plain->last_logits(prompt);
    EXPECT_EQ(l0, same_heads->last_logits(prompt)) << model;
    EXPECT_EQ(l0, long_window->last_logits(prompt)) << model;
    auto r = greedy(prompt, 40);
    auto t0 = plain->generate({r})[0].tokens;
    EXPECT_EQ(t0, same_heads->generate({r})[0].tokens) << model;
    EXPECT_EQ(t0, long_window->generate({r})[0].tokens) << model;
  }
}

TEST(KvStrategies, FewerHeadsAndWindowShrinkTheCache) {
  auto mqa = Session::create(paged_config("llama_mha_tiny_random", "paged", {{"block_size", "4"}}, {{"kv_heads", "1"}}));
  EXPECT_EQ(mqa->model().kv_heads(), 1);
  EXPECT_EQ(mqa->generate({greedy({1, 403, 407}, 8)})[0].tokens.size(), 8u);
  auto windowed = Session::create(paged_config("stories260K", "paged", {{"block_size", "4"}, {"window", "8"}}, {{"window", "8"}}));
  windowed->generate({greedy({1, 403, 407}, 60)});
  // With a window of 8 a sequence holds at most 4 blocks of 4 (window + block slack), not 16.
  EXPECT_LE(windowed->step_engine()->metrics().peak_used_blocks, 4);
  EXPECT_THROW(Session::create(paged_config("llama_mha_tiny_random", "paged", {}, {{"kv_heads", "4"}})), Error);
}

TEST(KvStrategies, WindowAndPooledHeadsComputeWhatTheyPromise) {
  // Against ONNX Runtime on the exported graph (tests/generators/kv_strategy_reference.py):
  // a window of W is a decode that keeps only the last W-1 keys as the past;
  // pooled KV heads are the model with its K and V projections averaged
  // over each group of heads.
  const std::vector<int> prompt = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 300};
  std::string ids;
  for (int t : prompt) {
    if (!ids.empty()) ids += ',';
    ids += std::to_string(t);
  }
  auto reference = [&](const std::string& mode) {
    test::ShellResult r = test::shell(std::string(SWITCHYARD_PYTHON) + " " + SWITCHYARD_GENERATORS_DIR + "/kv_strategy_reference.py " +
                                          test::model_path("stories260K.onnx") + " " + ids + " " + mode,
                                      false);
    EXPECT_EQ(r.status, 0) << r.out;
    return nlohmann::json::parse(r.out)["last_logits"].get<std::vector<float>>();
  };
  auto compare = [&](const char* what, const std::vector<float>& ours, const std::vector<float>& ref, const std::vector<float>& plain) {
    ASSERT_EQ(ours.size(), ref.size());
    double worst = 0, moved = 0;
    for (size_t i = 0; i < ours.size(); ++i) {
      worst = std::max(worst, std::abs(static_cast<double>(ours[i]) - ref[i]));
      moved = std::max(moved, std::abs(static_cast<double>(plain[i]) - ref[i]));
    }
    std::printf("[ %s ] max |logit - reference| %.2e (the plain model differs from the reference by %.2e)\n", what, worst, moved);
    EXPECT_LT(worst, 1e-4) << what;
    EXPECT_GT(moved, 1e-2) << what << ": the strategy must change the logits for the comparison to mean anything";
  };
  auto plain = Session::create(paged_config("stories260K", "paged", {{"block_size", "4"}}))->last_logits(prompt);
  auto windowed = Session::create(paged_config("stories260K", "paged", {{"block_size", "4"}, {"window", "8"}}, {{"window", "8"}}));
  compare("window 8", windowed->last_logits(prompt), reference("--window 8"), plain);
  for (const char* heads : {"2", "1"}) {
    auto pooled = Session::create(paged_config("stories260K", "paged", {{"block_size", "4"}}, {{"kv_heads", heads}}));
    compare((std::string("kv_heads ") + heads).c_str(), pooled->last_logits(prompt), reference(std::string("--kv-heads ") + heads), plain);
  }
}

TEST(Modes, SwappingIsAManifestChange) {
  // examples/manifests/stories.yaml: one manifest, four profiles, one binary.
  ::setenv("SWITCHYARD_PLUGIN_DIR", SY_PLUGIN_DIR, 1);
  Manifest m = Manifest::load(SY_STORIES_MANIFEST);
  std::vector<int> first;
  for (const char* profile : {"baseline", "contiguous", "paged", "prefix"}) {
    auto s = Session::create(m.resolve(profile));
    EXPECT_EQ(s->step_engine() != nullptr, std::string(profile) != "baseline");
    auto r = s->generate(six_requests());
    std::vector<int> all;
    for (const auto& x : r) all.insert(all.end(), x.tokens.begin(), x.tokens.end());
    if (first.empty()) first = all;
    EXPECT_EQ(all, first) << profile;
  }
}

TEST(Modes, CacheWithoutFusionAndFusionWithoutCacheAreErrors) {
  auto c = paged_config("stories260K", "paged");
  c.passes.clear();
  try {
    Session::create(c);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("add the 'attention-fusion' pass"), std::string::npos) << e.what();
  }
  c = paged_config("stories260K", "paged");
  c.cache.reset();
  try {
    Session::create(c);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no cache manager is selected"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace sy
