// The shared reference models end to end: last-position logits within 1e-4
// of the reference JSON, greedy continuations identical, batching with left
// padding identical to running each prompt alone, and run.c's 256-token
// stories reproduced through the tokenizer.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/generator.h"
#include "test_support.h"
#include "text/llama2c_tokenizer.h"

namespace sy {
namespace {

constexpr double kLogitTolerance = 1e-4;

struct Loaded {
  ThreadPool threads{2};
  KernelRegistry registry = KernelRegistry::with_builtins();
  std::unique_ptr<DecoderModel> model;
  explicit Loaded(const std::string& stem, ModelOptions opts = {}) {
    model = DecoderModel::load(test::model_path(stem + ".onnx"), registry, &threads, opts);
  }
};

std::vector<int> ints(const nlohmann::json& j) { return j.get<std::vector<int>>(); }

double max_abs_diff(const std::vector<float>& a, const nlohmann::json& ref) {
  EXPECT_EQ(a.size(), ref.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < ref.size(); ++i) m = std::max(m, std::abs(static_cast<double>(a[i]) - ref[i].get<double>()));
  return m;
}

class ReferenceModel : public ::testing::TestWithParam<std::string> {
 protected:
  nlohmann::json ref() const { return test::read_json(test::model_path(GetParam() + ".ref.json")); }
};

TEST_P(ReferenceModel, LastLogitsWithinTolerance) {
  Loaded m(GetParam());
  BaselineGenerator gen(*m.model);
  const auto cases = ref()["cases"];
  for (const auto& c : cases) {
    double diff = max_abs_diff(gen.last_logits(ints(c["prompt_ids"])), c["last_logits"]);
    EXPECT_LE(diff, kLogitTolerance) << "prompt of " << c["prompt_ids"].size() << " tokens";
    std::printf("[ %s ] prompt of %zu tokens: max |logit - ref| = %.3g\n", GetParam().c_str(), c["prompt_ids"].size(), diff);
  }
}

TEST_P(ReferenceModel, GreedyContinuationIdentical) {
  Loaded m(GetParam());
  BaselineGenerator gen(*m.model);
  const auto cases = ref()["cases"];
  for (const auto& c : cases) {
    GenerationRequest req;
    req.prompt = ints(c["prompt_ids"]);
    req.max_tokens = static_cast<int>(c["greedy_ids"].size());
    req.stop_at_eos = false;  // the references are plain argmax runs
    auto res = gen.generate({req});
    EXPECT_EQ(res[0].tokens, ints(c["greedy_ids"]));
  }
}

TEST_P(ReferenceModel, LeftPaddedBatchMatchesReference) {
  Loaded m(GetParam());
  BaselineGenerator gen(*m.model);
  auto b = ref()["batch"];
  std::vector<GenerationRequest> batch;
  for (size_t r = 0; r < b["input_ids"].size(); ++r) {
    GenerationRequest req;
    for (size_t j = 0; j < b["input_ids"][r].size(); ++j)
      if (b["attention_mask"][r][j].get<int>() == 1) req.prompt.push_back(b["input_ids"][r][j].get<int>());
    req.max_tokens = static_cast<int>(b["greedy_ids"][r].size());
    req.stop_at_eos = false;
    batch.push_back(req);
  }
  auto res = gen.generate(batch);
  for (size_t r = 0; r < batch.size(); ++r) EXPECT_EQ(res[r].tokens, ints(b["greedy_ids"][r])) << "row " << r;
}

TEST_P(ReferenceModel, BatchOfDifferentLengthsEqualsEachAlone) {
  Loaded m(GetParam());
  BaselineGenerator gen(*m.model);
  std::vector<GenerationRequest> batch;
  const auto cases = ref()["cases"];
  for (const auto& c : cases) {
    GenerationRequest req;
    req.prompt = ints(c["prompt_ids"]);
    req.max_tokens = 20;
    req.stop_at_eos = false;
    batch.push_back(req);
  }
  ASSERT_GE(batch.size(), 3u);
  ASSERT_NE(batch[0].prompt.size(), batch[2].prompt.size());
  auto together = gen.generate(batch);
  for (size_t r = 0; r < batch.size(); ++r) {
    auto alone = gen.generate({batch[r]});
    EXPECT_EQ(together[r].tokens, alone[0].tokens) << "prompt " << r;
  }
}

TEST_P(ReferenceModel, SimplificationKeepsLogits) {
  ModelOptions raw;
  raw.simplify = false;
  Loaded plain(GetParam(), raw), simplified(GetParam());
  EXPECT_LT(simplified.model->graph().live_node_count(), plain.model->graph().live_node_count());
  BaselineGenerator a(*plain.model), b(*simplified.model);
  const auto cases = ref()["cases"];
  for (const auto& c : cases) {
    auto la = a.last_logits(ints(c["prompt_ids"]));
    auto lb = b.last_logits(ints(c["prompt_ids"]));
    for (size_t i = 0; i < la.size(); ++i) ASSERT_NEAR(la[i], lb[i], 1e-6);
  }
}

INSTANTIATE_TEST_SUITE_P(Shared, ReferenceModel,
                         ::testing::Values("stories260K", "llama_mha_tiny_random", "llama_mqa_tiny_random"));

TEST(Stories260K, ReproducesRunCThroughTheTokenizer) {
  Loaded m("stories260K");
  auto tok = Llama2cTokenizer::load(test::model_path("tok512.bin"));
  BaselineGenerator gen(*m.model);
  auto runc = test::read_json(test::model_path("stories260K.runc.json"));
  for (const auto& run : runc["runs"]) {
    std::vector<int> prompt = ints(run["prompt_ids"]);
    std::string text = run["prompt"];
    if (!text.empty()) {
      EXPECT_EQ(tok.encode(text, true, false), prompt);
    }
    std::vector<int> ids = ints(run["ids"]);  // prompt tokens after BOS, then generated ones
    GenerationRequest req;
    req.prompt = prompt;
    req.max_tokens = static_cast<int>(ids.size() - (prompt.size() - 1));
    req.stop_at_eos = false;
    auto res = gen.generate({req});
    std::vector<int> got(prompt.begin() + 1, prompt.end());
    got.insert(got.end(), res[0].tokens.begin(), res[0].tokens.end());
    EXPECT_EQ(got, ids) << run["command"];
    EXPECT_EQ(tok.decode(got, Llama2cTokenizer::kBos) + "\n", run["text"].get<std::string>());
  }
}

TEST(Stories260K, StopsAtEosAndRespectsContext) {
  ModelOptions opts;
  opts.max_context = 12;
  Loaded m("stories260K", opts);
  BaselineGenerator gen(*m.model);
  GenerationRequest req;
  req.prompt = {1, 403, 407, 261, 378};
  req.max_tokens = 100;
  auto res = gen.generate({req});
  EXPECT_EQ(res[0].finish_reason, FinishReason::Context);
  EXPECT_EQ(res[0].tokens.size(), 12u - 5u);
}

}  // namespace
}  // namespace sy
