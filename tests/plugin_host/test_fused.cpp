// The fused-ops plugin on the CPU (its kernels are the reference for the
// CUDA ones): every RMSNorm, SiLU*up and rotary chain of the shared models
// and of the real exports of each family is found, and the fused graph's
// logits are bit-identical to the export's (the kernels round where the
// graph rounds), so greedy continuations are identical, also under the
// paged engine.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "engine/session.h"
#include "manifest/manifest.h"
#include "onnx_edit.h"
#include "plugin_host/plugin_library.h"
#include "test_support.h"

namespace sy {
namespace {

std::string manifest(const test::TempDir& dir, const std::string& stem) {
  std::string path = (dir.path / "fused.yaml").string();
  std::ofstream(path) << "model: " << test::model_path(stem + ".onnx") << "\nthreads: 2\nplugins:\n"
                      << "  - " << SY_FUSED_PLUGIN << "\n  - " << SY_ATTENTION_PLUGIN << "\n  - " << SY_CACHE_PLUGIN << "\n"
                      << "profiles:\n  base: {}\n  fused:\n    passes: [fuse-pointwise]\n"
                      << "  fused-paged:\n    passes: [fuse-pointwise, attention-fusion]\n    cache: {name: paged, options: {block_size: 16}}\n"
                      << "  norms-only:\n    passes: [{name: fuse-pointwise, options: {silu_mul: false}}]\n";
  return path;
}

int count_op(Session& s, const std::string& op) {
  int n = 0;
  for (const auto& p : s.model().executor().placements()) n += p.op == op;
  return n;
}

class FusedModel : public ::testing::TestWithParam<std::string> {};

TEST_P(FusedModel, EveryChainFusedAndOutputsUnchanged) {
  test::TempDir dir;
  Manifest m = Manifest::load(manifest(dir, GetParam()));
  auto base = Session::create(m.resolve("base"));
  auto fused = Session::create(m.resolve("fused"));
  const int norms = count_op(*base, "Pow"), mlps = count_op(*base, "Sigmoid");
  EXPECT_GT(norms, 0);
  EXPECT_EQ(count_op(*fused, "switchyard::RMSNorm"), norms);
  EXPECT_EQ(count_op(*fused, "switchyard::SiluMul"), mlps);
  EXPECT_EQ(count_op(*fused, "switchyard::Rotary"), 2 * base->model().num_layers());  // q and k, interleaved pairs
  EXPECT_EQ(count_op(*fused, "Pow") + count_op(*fused, "Sqrt") + count_op(*fused, "Sigmoid"), 0);
  auto norms_only = Session::create(m.resolve("norms-only"));
  EXPECT_EQ(count_op(*norms_only, "switchyard::SiluMul"), 0);
  EXPECT_EQ(count_op(*norms_only, "Sigmoid"), mlps);

  nlohmann::json ref = test::read_json(test::model_path(GetParam() + ".ref.json"));
  for (const auto& c : ref["cases"]) {
    std::vector<int> prompt = c["prompt_ids"].get<std::vector<int>>();
    std::vector<float> a = base->last_logits(prompt), b = fused->last_logits(prompt);
    EXPECT_EQ(a, b) << GetParam() << ", " << prompt.size() << " tokens: the fused graph must compute the export's bits";
    double vs_ref = 0;
    for (size_t i = 0; i < b.size(); ++i) vs_ref = std::max(vs_ref, std::abs(static_cast<double>(b[i]) - c["last_logits"][i].get<double>()));
    EXPECT_LE(vs_ref, 1e-4);
    GenerationRequest r = test::greedy(prompt, static_cast<int>(c["greedy_ids"].size()));
    EXPECT_EQ(fused->generate({r})[0].tokens, c["greedy_ids"].get<std::vector<int>>());
  }
}

TEST_P(FusedModel, PagedEngineWithFusedOpsMatchesTheReference) {
  test::TempDir dir;
  Manifest m = Manifest::load(manifest(dir, GetParam()));
  auto s = Session::create(m.resolve("fused-paged"));
  nlohmann::json ref = test::read_json(test::model_path(GetParam() + ".ref.json"));
  std::vector<GenerationRequest> batch;
  for (const auto& c : ref["cases"]) {
    GenerationRequest r = test::greedy(c["prompt_ids"].get<std::vector<int>>(), static_cast<int>(c["greedy_ids"].size()));
    batch.push_back(r);
  }
  auto res = s->generate(batch);
  for (size_t i = 0; i < res.size(); ++i) EXPECT_EQ(res[i].tokens, ref["cases"][i]["greedy_ids"].get<std::vector<int>>());
}

INSTANTIATE_TEST_SUITE_P(Shared, FusedModel, ::testing::Values("stories260K", "llama_mha_tiny_random", "llama_mqa_tiny_random"));

// Real exports (tests/models/real): what each exporter's graph fuses into,
// per family and exporter, and bit-identical logits against the export on
// the reference prompt and each row of its batch. Shapes in the optimum and
// TorchScript exports are unknown to static inference (slice bounds come from
// Shape nodes), so these also cover the pass's evaluated shape checks.
struct RealCase {
  const char* model;
  int rmsnorm, silu_mul, rotary;
  friend void PrintTo(const RealCase& c, std::ostream* os) { *os << c.model; }
};

class FusedRealExport : public ::testing::TestWithParam<RealCase> {};

TEST_P(FusedRealExport, EveryChainFusedBitExactly) {
  const RealCase& rc = GetParam();
  test::TempDir dir;
  const std::string path = (dir.path / "real.yaml").string();
  std::ofstream(path) << "model: " << test::source_dir() << "/tests/models/real/" << rc.model << "\nthreads: 2\nplugins:\n"
                      << "  - " << SY_FUSED_PLUGIN << "\n  - " << SY_CONTRIB_PLUGIN << "\n"
                      << "profiles:\n  base: {}\n  fused:\n    passes: [fuse-pointwise]\n";
  Manifest m = Manifest::load(path);
  auto base = Session::create(m.resolve("base"));
  auto fused = Session::create(m.resolve("fused"));
  EXPECT_EQ(count_op(*fused, "switchyard::RMSNorm"), rc.rmsnorm);
  EXPECT_EQ(count_op(*fused, "switchyard::SiluMul"), rc.silu_mul);
  EXPECT_EQ(count_op(*fused, "switchyard::Rotary"), rc.rotary);
  ASSERT_EQ(fused->report().probes.size(), 1u);
  EXPECT_EQ(fused->report().probes[0].max_deviation, 0.0);
  const auto ref = test::read_json(test::source_dir() + "/tests/models/real/" + rc.model + "/ref.json");
  std::vector<std::vector<int>> prompts{ref["prompt"].get<std::vector<int>>()};
  for (const auto& row : ref["batch"]) prompts.push_back(row.get<std::vector<int>>());
  for (const auto& p : prompts) EXPECT_EQ(base->last_logits(p), fused->last_logits(p)) << rc.model << ", " << p.size() << " tokens";
}

// Two layers each (gemma2: 4, with pre- and post-norms); GPT-NeoX rotates a
// quarter of each head (partial rotary), Phi-3 slices gate and up from one
// projection, Gemma2's MLP is GELU, the genai builder's norms are already
// single ops (SkipSimplifiedLayerNormalization), opset 23 exports use RMSNormalization.
INSTANTIATE_TEST_SUITE_P(Real, FusedRealExport,
                         ::testing::Values(RealCase{"llama3-optimum", 5, 2, 4}, RealCase{"llama3-dynamo", 5, 2, 4},
                                           RealCase{"mistral-torchscript", 5, 2, 4}, RealCase{"qwen2-optimum", 5, 2, 4},
                                           RealCase{"qwen2-fp16", 5, 2, 4}, RealCase{"phi3-optimum", 5, 2, 4},
                                           RealCase{"phi3-dynamo", 5, 2, 4}, RealCase{"gemma2-torchscript", 17, 0, 8},
                                           RealCase{"gemma2-dynamo", 17, 0, 8}, RealCase{"gptneox-optimum", 0, 0, 4},
                                           RealCase{"gptneox-dynamo", 0, 0, 4}, RealCase{"llama3-genai", 0, 2, 0},
                                           RealCase{"qwen2-dynamo23", 0, 2, 0}),
                         [](const ::testing::TestParamInfo<RealCase>& i) {
                           std::string n = i.param.model;
                           for (char& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

// The refusal: one RMSNorm's mean of squares is also a graph output, so
// fusing that chain would not remove it. The pass leaves it as exported,
// names it at load, fuses every other chain, and the logits keep their bits.
TEST(FusedRealExport, AChainWhoseIntermediateIsReadElsewhereIsLeftAsExportedAndNamed) {
  test::TempDir dir;
  const std::string real = test::source_dir() + "/tests/models/real/llama3-torchscript";
  const std::string mean = test::expose_intermediate(
      real, dir, [](const onnx::NodeProto& n) { return n.op_type() == "ReduceMean"; }, 3);
  ASSERT_FALSE(mean.empty());
  const std::string path = (dir.path / "edited.yaml").string();
  std::ofstream(path) << "model: " << (dir.path / "model.onnx").string() << "\nthreads: 2\nplugins:\n  - " << SY_FUSED_PLUGIN
                      << "\nprofiles:\n  base: {}\n  fused:\n    passes: [fuse-pointwise]\n";
  Manifest m = Manifest::load(path);
  auto base = Session::create(m.resolve("base"));
  testing::internal::CaptureStderr();
  auto fused = Session::create(m.resolve("fused"));
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("fuse-pointwise: 1 chains left as exported"), std::string::npos) << log;
  EXPECT_NE(log.find("RMSNorm-like '"), std::string::npos) << log;
  EXPECT_EQ(count_op(*fused, "switchyard::RMSNorm"), 4);  // 5 in the export (FusedRealExport below)
  EXPECT_EQ(count_op(*fused, "ReduceMean"), 1);
  const auto ref = test::read_json(real + "/ref.json");
  const std::vector<int> prompt = ref["prompt"].get<std::vector<int>>();
  EXPECT_EQ(base->last_logits(prompt), fused->last_logits(prompt));
}

// Whether the loader still has the library at `path` mapped.
bool mapped(const std::string& path) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (h) dlclose(h);
  return h != nullptr;
}

// The CUDA runtime unregisters a library's kernels when it is closed, and a
// library opened again then cannot launch them (the first GPU run: a CPU
// session closed the fused plugin, the CUDA session after it hung). A library
// that links the runtime therefore stays mapped once opened, and its init
// runs again at the next load; one without CUDA closes as before.
TEST(FusedPlugin, ALibraryLinkingTheCudaRuntimeStaysMappedAndInitsAgain) {
  {
    auto contrib = PluginLibrary::load(SY_CONTRIB_PLUGIN, std::nullopt);
    EXPECT_FALSE(contrib->pinned());
  }
  EXPECT_FALSE(mapped(SY_CONTRIB_PLUGIN)) << "a plugin without CUDA is closed by its last holder";
  test::TempDir dir;
  Manifest m = Manifest::load(manifest(dir, "stories260K"));
  const std::vector<int> prompt{1, 403, 407, 261, 324};
  std::vector<float> first;
  {
    auto s = Session::create(m.resolve("fused"));
    first = s->last_logits(prompt);
  }
#ifdef SWITCHYARD_HAS_CUDA
  EXPECT_TRUE(PluginLibrary::load(SY_FUSED_PLUGIN, std::nullopt)->pinned());
  EXPECT_TRUE(mapped(SY_FUSED_PLUGIN)) << "the fused plugin links the CUDA runtime: it must stay mapped";
#else
  EXPECT_FALSE(mapped(SY_FUSED_PLUGIN));
#endif
  auto again = Session::create(m.resolve("fused"));
  EXPECT_EQ(again->last_logits(prompt), first) << "a second session over the reopened library computes the same logits";
}

}  // namespace
}  // namespace sy
