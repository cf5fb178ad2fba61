// `switchyard synth` models: valid ONNX that ONNX Runtime runs to the same
// logits as the engine, in the shared models' export structure (the attention
// pass fuses them; every mode gives the same greedy tokens).
#include <gtest/gtest.h>

#include <cstdio>

#include "step_support.h"
#include "manifest/manifest.h"
#include "synth/synth_model.h"

namespace sy {
namespace {

// stdout only: the reference prints JSON there.
std::string run(const std::string& cmd) {
  auto r = test::shell(cmd, false);
  EXPECT_EQ(r.status, 0) << cmd << "\n" << r.out;
  return r.out;
}

// ONNX Runtime's last logits for the synth model at `path` against the
// engine's, the graph as exported; returns the baseline session.
std::unique_ptr<Session> expect_onnx_runtime_agrees(const std::string& path, const std::vector<int>& prompt) {
  EngineConfig base;
  base.model = path;
  auto baseline = Session::create(base);
  auto ours = baseline->last_logits(prompt);
  std::string ids;
  for (int t : prompt) {
    if (!ids.empty()) ids.push_back(',');
    ids += std::to_string(t);
  }
  auto ort = nlohmann::json::parse(run(std::string(SWITCHYARD_PYTHON) + " " + SWITCHYARD_GENERATORS_DIR + "/ort_last_logits.py " + path + " " +
                                       ids))["last_logits"].get<std::vector<float>>();
  EXPECT_EQ(ours.size(), ort.size());
  for (size_t i = 0; i < ours.size() && i < ort.size(); ++i) EXPECT_NEAR(ours[i], ort[i], 1e-4) << i;
  return baseline;
}

TEST(Synth, OnnxRuntimeAgreesAndEveryModeRunsIt) {
  test::TempDir dir;
  std::string path = (dir.path / "tiny.onnx").string();
  write_synth_model(synth_preset("tiny"), path, 7);
  std::vector<int> prompt = {1, 2, 3, 400, 17, 99, 250};
  auto baseline = expect_onnx_runtime_agrees(path, prompt);

  auto cfg = test::paged_config("stories260K", "paged", {{"block_size", "4"}});
  cfg.model = path;
  auto paged = Session::create(cfg);
  EXPECT_EQ(paged->model().kv_heads(), 2);  // GQA: 4 query heads on 2 KV heads
  GenerationRequest r;
  r.prompt = prompt;
  r.max_tokens = 20;
  r.stop_at_eos = false;
  EXPECT_EQ(paged->generate({r})[0].tokens, baseline->generate({r})[0].tokens);
}

// The mixture-of-experts presets: ONNX Runtime agrees with the graph as
// exported, and the default manifest's paged mode (experts fused by
// fuse-experts) gives the same greedy tokens.
TEST(Synth, MixtureOfExpertsPresetRunsAsExportedAndFused) {
  test::TempDir dir;
  std::string path = (dir.path / "moe.onnx").string();
  write_synth_model(synth_preset("moe-tiny"), path, 3);
  std::vector<int> prompt = {1, 2, 3, 400, 17, 99, 250};
  auto baseline = expect_onnx_runtime_agrees(path, prompt);
  ::setenv("SWITCHYARD_PLUGIN_DIR", SY_PLUGIN_DIR, 1);
  EngineConfig cfg = Manifest::load(SY_DEFAULT_MANIFEST).resolve("paged");
  cfg.model = path;
  auto paged = Session::create(cfg);
  int fused = 0;
  for (const auto& p : paged->model().executor().placements()) fused += p.op == "switchyard::ExpertMatMul";
  EXPECT_EQ(fused, 6);  // gate, up and down in each of the 2 layers
  GenerationRequest r;
  r.prompt = prompt;
  r.max_tokens = 20;
  r.stop_at_eos = false;
  EXPECT_EQ(paged->generate({r})[0].tokens, baseline->generate({r})[0].tokens);
  const SynthConfig& small = synth_preset("moe-small");
  EXPECT_EQ(synth_parameter_count(small) - synth_active_parameter_count(small), small.layers * 14 * 3 * small.dim * small.hidden);
}

TEST(Synth, PresetsAndErrors) {
  EXPECT_EQ(synth_preset("tinyllama-1.1b").kv_heads, 4);
  EXPECT_NEAR(static_cast<double>(synth_parameter_count(synth_preset("tinyllama-1.1b"))), 1.1e9, 0.05e9);
  EXPECT_NEAR(static_cast<double>(synth_parameter_count(synth_preset("llama3-8b"))), 8.0e9, 0.1e9);
  try {
    synth_preset("gpt-9");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("presets: tiny 15m 42m 110m tinyllama-1.1b llama3-8b"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace sy
