// The pass host's equivalence probe, with real plugins: the attention
// fusion is proven on real exports (per-layer regions and logits), a
// deliberately wrong rewrite is refused naming its node and the deviation,
// and a pass that declares itself approximate is exempt.
#include <gtest/gtest.h>

#include "engine/session.h"
#include "manifest/manifest.h"
#include "test_support.h"

namespace sy {
namespace {

EngineConfig config_with(const std::string& model, const std::string& profile) {
  ::setenv("SWITCHYARD_PLUGIN_DIR", SY_PLUGIN_DIR, 1);
  EngineConfig c = Manifest::load(SY_DEFAULT_MANIFEST).resolve(profile);
  c.model = model;
  c.threads = 2;
  return c;
}

EngineConfig skewed(const std::string& model, const std::string& factor, bool approximate) {
  EngineConfig c = config_with(model, "baseline");
  c.plugins.push_back(PluginSpec{SY_WRONG_REWRITE_PLUGIN, std::nullopt, "test"});
  ComponentSelection pass{"skew-softmax", {}, "test: passes[0]"};
  pass.options["factor"] = RawOption{factor, "test"};
  pass.options["approximate"] = RawOption{approximate ? "true" : "false", "test"};
  c.passes.push_back(pass);
  return c;
}

TEST(EquivalenceProbe, AWrongRewriteIsRefusedNamingItsNodeAndTheDeviation) {
  std::string msg = test::error_of([] { Session::create(skewed(test::model_path("stories260K.onnx"), "1.05", false)); });
  EXPECT_HAS(msg, "pass 'skew-softmax' refused");
  EXPECT_HAS(msg, "deviates from the original by");
  EXPECT_HAS(msg, "Softmax");
  EXPECT_HAS(msg, "probe case 'prefill of");
}

TEST(EquivalenceProbe, AnExactRewriteAndAnApproximateOneAreAccepted) {
  // Factor 1 changes nothing: proven and accepted; a skewed rewrite declared
  // approximate is not held to exactness.
  auto exact = Session::create(skewed(test::model_path("stories260K.onnx"), "1.0", false));
  ASSERT_EQ(exact->report().probes.size(), 1u);
  EXPECT_TRUE(exact->report().probes[0].skipped.empty());
  EXPECT_EQ(exact->report().probes[0].cases, 4);
  EXPECT_GT(exact->report().probes[0].regions, 0);
  EXPECT_LE(exact->report().probes[0].max_deviation, 1e-5);
  auto approx = Session::create(skewed(test::model_path("stories260K.onnx"), "1.05", true));
  ASSERT_EQ(approx->report().probes.size(), 1u);
  EXPECT_HAS(approx->report().probes[0].skipped, "approximate");
}

TEST(EquivalenceProbe, LogitsOutsideTheStrictBoundAreHeldToTheMeasuredSensitivity) {
  // A softmax skewed by less than the regions' tolerance passes every
  // region check; through the layers its logits move by more than the
  // strict bound, so the probe measures how far the original's own logits
  // move under last-bit nudges (far less) and refuses the rewrite there.
  std::string msg = test::error_of([] { Session::create(skewed(test::model_path("stories260K.onnx"), "1.00009", false)); });
  EXPECT_HAS(msg, "pass 'skew-softmax' refused: the rewritten graph's logits deviate from the original's by");
  // An exact rewrite never needs it: reported as not measured.
  auto exact = Session::create(skewed(test::model_path("stories260K.onnx"), "1.0", false));
  EXPECT_LT(exact->report().probes[0].logit_sensitivity, 0);
}

TEST(EquivalenceProbe, AttentionFusionIsProvenPerLayerOnRealExports) {
  for (const char* m : {"qwen2-torchscript", "mistral-dynamo", "gemma2-torchscript", "phi3-genai"}) {
    auto s = Session::create(config_with(test::source_dir() + "/tests/models/real/" + m, "paged"));
    // The default manifest's paged profile: the pointwise fusions (exact:
    // no deviation at all), then attention.
    ASSERT_EQ(s->report().probes.size(), 2u) << m;
    const ProbeReport& pointwise = s->report().probes[0];
    EXPECT_EQ(pointwise.pass, "fuse-pointwise");
    EXPECT_EQ(pointwise.max_deviation, 0.0) << m;
    const ProbeReport& p = s->report().probes[1];
    EXPECT_EQ(p.pass, "attention-fusion");
    EXPECT_TRUE(p.skipped.empty()) << m << ": " << p.skipped;
    EXPECT_EQ(p.cases, 4) << m;
    EXPECT_EQ(p.regions, s->model().num_layers()) << m;  // one replaced region per layer
    EXPECT_LE(p.max_deviation, 1e-4) << m;
  }
}

TEST(EquivalenceProbe, AnAlibiBiasIsRefusedNamingTheLayerAndTheConstruct) {
  std::string msg = test::error_of([] { Session::create(config_with(test::source_dir() + "/tests/models/real/llama3-alibi", "paged")); });
  EXPECT_HAS(msg, "layer 0 cannot be fused");
  EXPECT_HAS(msg, "ALiBi or relative-position bias");
}

}  // namespace
}  // namespace sy
