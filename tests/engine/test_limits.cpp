// Resource limits from the manifest (`limits:`), each refused with an error
// naming the limit, quickly and before the resource is taken; and the hostile
// inputs of the hardening issue: a manifest pointing at itself or at
// /dev/zero, a model claiming a 100 GB initializer (test_bad_inputs.cpp).
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>

#include "step_support.h"

namespace sy {
namespace {

using test::error_of;

EngineConfig from_manifest(const test::TempDir& dir, const std::string& limits, bool paged = true) {
  std::ofstream(dir.path / "m.yaml") << "model: " << test::model_path("stories260K.onnx") << "\n"
                                     << "plugins: [" << SY_ATTENTION_PLUGIN << ", " << SY_CACHE_PLUGIN << "]\n"
                                     << (paged ? "passes: [attention-fusion]\ncache: {name: paged, options: {block_size: 16}}\n" : "")
                                     << "limits: " << limits << "\n";
  return Manifest::load((dir.path / "m.yaml").string()).resolve("");
}

TEST(Limits, ModelSizeTensorCountAndDepthAreRefusedAtLoad) {
  test::TempDir dir;
  EXPECT_HAS(error_of([&] { Session::create(from_manifest(dir, "{max_model_bytes: 100000}")); }), "over the limit of 100000");
  std::string msg = error_of([&] { Session::create(from_manifest(dir, "{max_tensors: 500}")); });
  EXPECT_HAS(msg, "over the limit of 500 (limits.max_tensors)");
  msg = error_of([&] { Session::create(from_manifest(dir, "{max_graph_depth: 50}")); });
  EXPECT_HAS(msg, "over the limit of 50 (limits.max_graph_depth)");
  // Generous limits load the same model.
  EXPECT_NO_THROW(Session::create(from_manifest(dir, "{max_tensors: 5000, max_graph_depth: 2000, max_model_bytes: 10000000}")));
}

TEST(Limits, KvMemoryPromptLengthAndQueueLength) {
  test::TempDir dir;
  // stories260K's paged cache at the default 64 MiB budget.
  EXPECT_HAS(error_of([&] { Session::create(from_manifest(dir, "{max_kv_mb: 16}")); }), "over the limit of 16 MiB (limits.max_kv_mb)");
  auto s = Session::create(from_manifest(dir, "{max_prompt_tokens: 8, max_queue: 2}"));
  GenerationRequest r;
  r.prompt = std::vector<int>(9, 300);
  r.prompt[0] = 1;
  EXPECT_HAS(error_of([&] { s->step_engine()->submit(r, {}); }), "over the limit of 8 (limits.max_prompt_tokens)");
  // Two long requests occupy the queue; the third is refused; after they
  // end, requests are accepted again.
  r.prompt.resize(4);
  r.max_tokens = 400;
  r.stop_at_eos = false;
  std::future<GenerationResult> a, b;
  uint64_t ia = s->step_engine()->submit(r, {}, &a);
  uint64_t ib = s->step_engine()->submit(r, {}, &b);
  EXPECT_HAS(error_of([&] { s->step_engine()->submit(r, {}); }), "the limit (limits.max_queue) is 2");
  s->step_engine()->cancel(ia);
  s->step_engine()->cancel(ib);
  a.get();
  b.get();
  r.max_tokens = 4;
  EXPECT_EQ(s->generate({r})[0].tokens.size(), 4u);
}

TEST(Limits, BadLimitValuesNameTheKey) {
  test::TempDir dir;
  EXPECT_HAS(error_of([&] { from_manifest(dir, "{max_queue: -1}"); }), "limits.max_queue: must be >= 0");
  EXPECT_HAS(error_of([&] { from_manifest(dir, "{max_ram: 5}"); }), "limits.max_ram: unknown key");
  EXPECT_HAS(error_of([&] { from_manifest(dir, "[1, 2]"); }), "limits: expected a map");
}

TEST(Limits, ManifestPointingAtItselfOrADeviceFailsFastAndClearly) {
  test::TempDir dir;
  const auto self = dir.path / "self.yaml";
  // The manifest as its own model and its own plugin.
  std::ofstream(self) << "model: self.yaml\n";
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_HAS(error_of([&] { Session::create(Manifest::load(self.string()).resolve("")); }), "not a valid ONNX model");
  std::ofstream(self) << "model: " << test::model_path("stories260K.onnx") << "\nplugins: [self.yaml]\n";
  EXPECT_HAS(error_of([&] { Session::create(Manifest::load(self.string()).resolve("")); }), "self.yaml");
  // /dev/zero as the model, as a plugin, as the manifest.
  std::ofstream(self) << "model: /dev/zero\n";
  EXPECT_HAS(error_of([&] { Session::create(Manifest::load(self.string()).resolve("")); }), "not a regular file");
  std::ofstream(self) << "model: " << test::model_path("stories260K.onnx") << "\nplugins: [/dev/zero]\n";
  EXPECT_HAS(error_of([&] { Session::create(Manifest::load(self.string()).resolve("")); }), "/dev/zero");
  EXPECT_HAS(error_of([&] { Manifest::load("/dev/zero"); }), "not a regular file");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
}

}  // namespace
}  // namespace sy
