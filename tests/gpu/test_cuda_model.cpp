// The shared models on a real GPU against the CPU reference: last logits
// within 1e-2 (bf16 weights and activations in the GEMMs, fp32 accumulate),
// greedy continuations identical, in the baseline and the paged step engine.
// Skipped where there is no CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "cuda_test_support.h"
#include "engine/generator.h"
#include "engine/session.h"
#include "manifest/manifest.h"
#include "test_support.h"

namespace sy {
namespace {

constexpr double kBf16LogitTolerance = 1e-2;

std::unique_ptr<DecoderModel> load(const std::string& stem, ThreadPool* threads, bool cuda) {
  KernelRegistry reg = KernelRegistry::with_builtins();
  ModelOptions mo;
  if (cuda) {
    register_device_kernels(reg, Device::CUDA);
    mo.executor.device = Device::CUDA;
    mo.executor.backend = open_device(DeviceSpec{Device::CUDA, 0, false});
  }
  return DecoderModel::load(test::model_path(stem + ".onnx"), reg, threads, mo);
}

class CudaModel : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaModel, DeviceBackendCopiesRoundTrip) {
  SY_REQUIRE_CUDA();
  auto dev = open_device(DeviceSpec{Device::CUDA, 0, false});
  std::printf("%s\n", dev->description().c_str());
  Tensor h = Tensor::from<float>(Shape{3, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15});
  Tensor d = dev->to_device(h);
  EXPECT_EQ(d.device(), Device::CUDA);
  Tensor back = dev->to_host(d);
  EXPECT_EQ(std::memcmp(back.raw(), h.raw(), h.bytes()), 0);
}

TEST_P(CudaModel, LogitsWithinBf16ToleranceAndGreedyIdentical) {
  SY_REQUIRE_CUDA();
  ThreadPool threads{2};
  auto cpu = load(GetParam(), &threads, false);
  auto gpu = load(GetParam(), &threads, true);
  int on_device = 0;
  for (const auto& p : gpu->executor().placements()) on_device += p.device == Device::CUDA;
  EXPECT_GT(on_device, 0);
  BaselineGenerator a(*cpu), b(*gpu);
  nlohmann::json ref = test::read_json(test::model_path(GetParam() + ".ref.json"));
  for (const auto& c : ref["cases"]) {
    std::vector<int> prompt = c["prompt_ids"].get<std::vector<int>>();
    std::vector<float> la = a.last_logits(prompt), lb = b.last_logits(prompt);
    ASSERT_EQ(la.size(), lb.size());
    double diff = 0;
    for (size_t i = 0; i < la.size(); ++i) diff = std::max(diff, std::abs(static_cast<double>(la[i]) - lb[i]));
    std::printf("[ %s ] %zu-token prompt: max |gpu - cpu| = %.3g over %d device nodes\n", GetParam().c_str(), prompt.size(),
                diff, on_device);
    EXPECT_LE(diff, kBf16LogitTolerance);
    GenerationRequest req = test::greedy(prompt, static_cast<int>(c["greedy_ids"].size()));
    EXPECT_EQ(b.generate({req})[0].tokens, c["greedy_ids"].get<std::vector<int>>());
  }
}

INSTANTIATE_TEST_SUITE_P(Shared, CudaModel,
                         ::testing::Values("stories260K", "llama_mha_tiny_random", "llama_mqa_tiny_random"));

// examples/manifests/gpu.yaml: fused ops, paged attention and the KV cache on
// the GPU (prefix caching's copy-on-write included), against its CPU profile.
TEST(CudaSession, PagedStepEngineOnTheGpuMatchesTheCpu) {
  SY_REQUIRE_CUDA();
  const std::string manifest = test::source_dir() + "/examples/manifests/gpu.yaml";
  auto run = [&](const std::string& profile, bool expect_gpu_attention) {
    auto s = Session::create(Manifest::load(manifest).resolve(profile));
    int attention = 0, norms = 0;
    for (const auto& p : s->model().executor().placements()) {
      attention += p.op == "switchyard::PagedAttention" && p.device == Device::CUDA;
      norms += p.op == "switchyard::RMSNorm" && p.device == Device::CUDA;
    }
    EXPECT_EQ(attention > 0, expect_gpu_attention) << profile;
    EXPECT_EQ(norms > 0, expect_gpu_attention) << profile;
    std::vector<GenerationRequest> batch;
    for (int i = 0; i < 4; ++i) {
      GenerationRequest r;
      r.prompt = {1, 403, 407, 261, 378, 290, 300 + i};  // a shared prefix, different last tokens
      r.max_tokens = 64;
      r.stop_at_eos = false;
      batch.push_back(r);
    }
    std::vector<std::vector<int>> out;
    for (const auto& res : s->generate(batch)) out.push_back(res.tokens);
    return out;
  };
  const auto cpu = run("cpu-paged", false);
  EXPECT_EQ(run("paged", true), cpu);
  EXPECT_EQ(run("prefix", true), cpu);
}

// int8 and int4 weights on the GPU (the quantize plugin's CUDA kernels)
// against the same quantized model on the CPU's fp32-activation path: the
// dequantized weights are identical, so only summation order differs.
TEST(CudaSession, QuantizedMatmulsOnTheGpuMatchTheCpu) {
  SY_REQUIRE_CUDA();
  setenv("SWITCHYARD_QUANT_ISA", "avx2", 1);  // fp32 activations on the CPU too (VNNI rounds them to int8)
  for (const char* profile : {"int8", "int4", "int4-asym"}) {
    std::vector<std::vector<float>> logits;
    std::vector<std::vector<int>> tokens;
    for (const char* device : {"cpu", "cuda"}) {
      EngineConfig cfg = Manifest::load(test::source_dir() + "/examples/manifests/quantize.yaml").resolve(profile);
      cfg.device = device;
      auto s = Session::create(cfg);
      if (std::string(device) == "cuda") {
        int quantized_on_gpu = 0;
        for (const auto& p : s->model().executor().placements())
          quantized_on_gpu += p.device == Device::CUDA && p.provider == "switchyard-quantize";
        EXPECT_GT(quantized_on_gpu, 30) << profile;
      }
      logits.push_back(s->last_logits({1, 403, 407, 261, 378, 290}));
      GenerationRequest r = test::greedy({1, 403, 407}, 48);
      tokens.push_back(s->generate({r})[0].tokens);
    }
    double diff = 0;
    for (size_t i = 0; i < logits[0].size(); ++i) diff = std::max(diff, std::abs(static_cast<double>(logits[0][i]) - logits[1][i]));
    std::printf("[ %s ] max |gpu - cpu| = %.3g\n", profile, diff);
    EXPECT_LE(diff, 1e-3) << profile;
    EXPECT_EQ(tokens[0], tokens[1]) << profile;
  }
  unsetenv("SWITCHYARD_QUANT_ISA");
}

// Mixtures of experts on the GPU: fuse-experts' ExpertMatMul runs on CUDA
// (rows and columns forms: Mixtral's and gpt-oss's exports) next to the
// built-in kernels; logits within the bf16 tolerance of the CPU's, greedy
// tokens identical.
TEST(CudaSession, ExpertMatMulOnTheGpuMatchesTheCpu) {
  SY_REQUIRE_CUDA();
  for (const char* model : {"mixtral-torchscript", "gptoss-dynamo"}) {
    const std::string dir = test::source_dir() + "/tests/models/real/" + model;
    setenv("QUANT_MODEL", (dir + "/model.onnx").c_str(), 1);
    setenv("QUANT_TOKENIZER", (dir + "/tokenizer.json").c_str(), 1);
    std::vector<std::vector<float>> logits;
    std::vector<std::vector<int>> tokens;
    for (const char* device : {"cpu", "cuda"}) {
      EngineConfig cfg = Manifest::load(test::source_dir() + "/examples/manifests/quantize.yaml").resolve("fp32");
      cfg.device = device;
      auto s = Session::create(cfg);
      if (std::string(device) == "cuda") {
        int experts_on_gpu = 0;
        for (const auto& p : s->model().executor().placements())
          experts_on_gpu += p.device == Device::CUDA && p.op == "switchyard::ExpertMatMul";
        EXPECT_EQ(experts_on_gpu, 4) << model;
      }
      logits.push_back(s->last_logits({1, 5, 9, 13, 17, 21}));
      tokens.push_back(s->generate({test::greedy({1, 5, 9}, 16)})[0].tokens);
    }
    double diff = 0;
    for (size_t i = 0; i < logits[0].size(); ++i) diff = std::max(diff, std::abs(static_cast<double>(logits[0][i]) - logits[1][i]));
    std::printf("[ %s ] max |gpu - cpu| = %.3g\n", model, diff);
    EXPECT_LE(diff, kBf16LogitTolerance) << model;
    EXPECT_EQ(tokens[0], tokens[1]) << model;
  }
  unsetenv("QUANT_MODEL");
  unsetenv("QUANT_TOKENIZER");
}

}  // namespace
}  // namespace sy
