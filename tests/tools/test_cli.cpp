// The CLI as users script it: the real binary, its JSON shapes and errors.
#include <gtest/gtest.h>

#include <map>

#include <array>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "test_support.h"

namespace {

sy::test::ShellResult run(const std::string& args, bool merge_stderr = true) {
  return sy::test::shell(std::string(SWITCHYARD_CLI) + " " + args, merge_stderr);
}

std::string model() { return sy::test::model_path("stories260K.onnx"); }

TEST(Cli, GenerateJson) {
  sy::test::ShellResult r = run("generate --model " + model() + " --prompt 'Once upon a time' --max-tokens 8 --json");
  ASSERT_EQ(r.status, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt_ids"], nlohmann::json({1, 403, 407, 261, 378}));
  EXPECT_EQ(j["ids"], nlohmann::json({432, 383, 286, 261, 376, 298, 315, 421}));
  EXPECT_EQ(j["text"], ", there was a little girl");
  for (const char* k : {"ttft_ms", "tpot_ms", "tokens_per_s"}) EXPECT_TRUE(j["metrics"].contains(k)) << k;
}

TEST(Cli, LogitsJson) {
  sy::test::ShellResult r = run("logits --model " + model() + " --prompt-ids 1,403,407 --json");
  ASSERT_EQ(r.status, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["last_logits"].size(), 512u);
}

TEST(Cli, InspectShowsInterfaceAndCounts) {
  sy::test::ShellResult r = run("inspect --model " + model());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("past_key_values.4.value"), std::string::npos);
  // 260,032 parameters on the model card plus the tied classifier's stored
  // transposed copy (512 x 64) = 292,800 stored values.
  EXPECT_NE(r.out.find("parameters  292800 (1171200 bytes)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1060 imported"), std::string::npos) << r.out;
}

// The KV memory report: stories260K's 5 layers x 4 KV heads x head size 8
// in the seed's formula, and each strategy's bytes per token.
TEST(Cli, InspectReportsKvMemoryPerStrategy) {
  sy::test::ShellResult r = run("inspect --model " + model() + " --json --kv-tokens 256 --kv-memory-mb 1");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto kv = nlohmann::json::parse(r.out)["kv_memory"];
  EXPECT_EQ(kv["layers"], 5);
  EXPECT_EQ(kv["kv_heads"], 4);
  EXPECT_EQ(kv["key_size"], 8);
  EXPECT_EQ(kv["value_size"], 8);
  EXPECT_EQ(kv["seed_formula"], "2 · B · S · L · H · M = 2 · 1 · 256 · 5 · 32 · 4 = 327680 bytes per sequence");
  std::map<std::string, nlohmann::json> rows;
  for (const auto& row : kv["strategies"]) rows[row["strategy"].get<std::string>()] = row;
  ASSERT_TRUE(rows.count("as exported (float32)")) << kv.dump(1);
  EXPECT_EQ(rows["as exported (float32)"]["bytes_per_token"], 5 * 4 * 16 * 4);
  EXPECT_EQ(rows["as exported (float32)"]["sequences"], 1048576 / (256 * 1280));
  EXPECT_EQ(rows["paged fp16 / bf16"]["bytes_per_token"], 5 * 4 * 16 * 2);
  // int8: 8 codes + a 2-byte scale per row, keys and values.
  EXPECT_EQ(rows["paged int8, a scale per token and head"]["bytes_per_token"], 5 * 4 * 2 * (8 + 2));
  EXPECT_EQ(rows["paged fp16, KV heads pooled to 1 (MQA)"]["bytes_per_token"], 5 * 16 * 2);
  // A latent-attention export (DeepSeek-V3, tests/models/real): the cache
  // holds one latent "head" of kv_lora_rank 16 + rope 8; the expanded row
  // counts 4 heads x (24 + 16) values, fp16, over 2 layers.
  r = run("inspect --model " + sy::test::source_dir() + "/tests/models/real/deepseekv3-dynamo --json");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto mla = nlohmann::json::parse(r.out)["kv_memory"];
  EXPECT_EQ(mla["key_size"], 16);
  EXPECT_EQ(mla["value_size"], 8);
  bool expanded = false;
  for (const auto& row : mla["strategies"])
    if (row["strategy"].get<std::string>().starts_with("latent attention's heads expanded")) {
      expanded = true;
      EXPECT_EQ(row["bytes_per_token"], 2 * 4 * (24 + 16) * 2);
    }
  EXPECT_TRUE(expanded) << mla.dump(1);
  // The default top level runs it fused over that cache (the up-projections
  // absorbed): 2 layers x (16 + 8) float32 values a token in use, against
  // the 640 bytes of the expanded heads in fp16.
  const auto all = nlohmann::json::parse(r.out);
  ASSERT_TRUE(mla.contains("in_use")) << mla.dump(1);
  EXPECT_EQ(mla["in_use"]["bytes_per_token"], 2 * (16 + 8) * 4);
  ASSERT_EQ(all["attention"].size(), 2u);
  for (const auto& a : all["attention"]) {
    EXPECT_EQ(a["layout"], "latent");
    EXPECT_EQ(a["latent_dim"], 16);
    EXPECT_EQ(a["head_dim"], 16);
    EXPECT_EQ(a["value_head_dim"], 8);
  }
  r = run("inspect --model " + model() + " --kv-tokens 0");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("--kv-tokens and --kv-memory-mb must be positive"), std::string::npos) << r.out;
}

TEST(Cli, ErrorsAreMessagesNotCrashes) {
  sy::test::ShellResult r = run("generate --model /nonexistent.onnx --prompt hi");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("switchyard: error: /nonexistent.onnx: cannot open the model file"), std::string::npos) << r.out;
  r = run("generate --model " + model() + " --prompt ''");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("the prompt is empty"), std::string::npos) << r.out;
  r = run("logits --model " + model() + " --prompt-ids 1,x");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("'x' is not a token id"), std::string::npos) << r.out;
  r = run("frobnicate");
  EXPECT_EQ(r.status, 2);
}

TEST(Cli, DevicesJsonListsTheCpuAndSaysWhyThereIsNoGpu) {
  sy::test::ShellResult r = run("devices --json");
  ASSERT_EQ(r.status, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["cpu"], "available");
  ASSERT_TRUE(j["cuda_devices"].is_number_integer()) << r.out;
  if (j["cuda_devices"] == 0) {
    EXPECT_TRUE(j["devices"].empty());
    EXPECT_FALSE(j["cuda_unavailable"].get<std::string>().empty()) << "no GPU must come with the reason";
  } else {
    EXPECT_EQ(j["devices"].size(), j["cuda_devices"].get<size_t>());
    EXPECT_EQ(j["devices"][0]["device"], "cuda:0");
  }
  EXPECT_EQ(run("devices --help").status, 0);
  r = run("devices --frobnicate");
  EXPECT_EQ(r.status, 1);
  EXPECT_HAS(r.out, "frobnicate");
}

TEST(Cli, EvalPerplexityEqualsTheOneComputedFromLogitsOneByOne) {
  // eval's perplexity against an independent computation: the log-softmax
  // of `logits` (baseline mode, one prompt prefix at a time) at each next
  // token of the same text.
  sy::test::TempDir dir;
  const std::string text = (dir.path / "story.txt").string();
  std::ofstream(text) << "Once upon a time, there was a little girl named Lily. She loved to play.";
  const std::string manifest = sy::test::source_dir() + "/examples/manifests/stories.yaml";
  const std::string out = (dir.path / "eval.json").string();
  // The manifest finds the plugins through SWITCHYARD_PLUGIN_DIR: the ones
  // built beside this CLI, whatever the build folder is called.
  const std::string plugins = (std::filesystem::path(SWITCHYARD_CLI).parent_path() / "plugins").string();
  sy::test::ShellResult r = sy::test::shell("SWITCHYARD_PLUGIN_DIR=" + plugins + " " + std::string(SWITCHYARD_CLI) + " eval --manifest " +
                                            manifest + " --profile prefix --baseline paged --text " + text + " --max-tokens 14 --out " + out);
  ASSERT_EQ(r.status, 0) << r.out;
  auto e = sy::test::read_json(out);
  ASSERT_EQ(e["tokens"], 14);
  EXPECT_EQ(e["top1_agreement"], 1.0);  // prefix caching is exact
  EXPECT_EQ(e["kl_max"], 0.0);

  r = run("tokenize --tokenizer " + sy::test::model_path("tok512.bin") + " --text-file " + text + " --add-special-tokens --json");
  ASSERT_EQ(r.status, 0) << r.out;
  std::vector<int> ids = nlohmann::json::parse(r.out)["ids"].get<std::vector<int>>();
  ASSERT_GE(ids.size(), 14u);
  ids.resize(14);
  double nll = 0;
  for (size_t t = 0; t + 1 < ids.size(); ++t) {
    std::string prefix;
    for (size_t i = 0; i <= t; ++i) {
      if (i) prefix += ',';
      prefix += std::to_string(ids[i]);
    }
    sy::test::ShellResult l = run("logits --model " + model() + " --prompt-ids " + prefix + " --json", false);
    ASSERT_EQ(l.status, 0) << l.out;
    std::vector<double> row = nlohmann::json::parse(l.out)["last_logits"].get<std::vector<double>>();
    double m = *std::max_element(row.begin(), row.end()), s = 0;
    for (double v : row) s += std::exp(v - m);
    nll -= row[static_cast<size_t>(ids[t + 1])] - m - std::log(s);
  }
  const double ppl = std::exp(nll / 13.0);
  std::printf("[ eval ] perplexity %.6f, from logits one by one %.6f\n", e["perplexity_baseline"].get<double>(), ppl);
  EXPECT_NEAR(e["perplexity_baseline"].get<double>(), ppl, 1e-4 * ppl);
  EXPECT_NEAR(e["perplexity_profile"].get<double>(), ppl, 1e-4 * ppl);

  // --ctx 6: llama-perplexity's windows (tokens 0-5 and 6-11, each scored
  // on its second half: positions 3 and 4 predict 4 and 5): the same
  // perplexity from the baseline's logits of each window alone.
  r = sy::test::shell("SWITCHYARD_PLUGIN_DIR=" + plugins + " " + std::string(SWITCHYARD_CLI) + " eval --manifest " + manifest +
                      " --profile prefix --baseline paged --text " + text + " --max-tokens 14 --ctx 6 --out " + out);
  ASSERT_EQ(r.status, 0) << r.out;
  e = sy::test::read_json(out);
  EXPECT_EQ(e["predicted_tokens"], 4);
  double window_nll = 0;
  for (size_t w = 0; w < 2; ++w)
    for (size_t t = 3; t < 5; ++t) {
      std::string prefix;
      for (size_t i = 6 * w; i <= 6 * w + t; ++i) prefix += (prefix.empty() ? "" : ",") + std::to_string(ids[i]);
      sy::test::ShellResult l = run("logits --model " + model() + " --prompt-ids " + prefix + " --json", false);
      ASSERT_EQ(l.status, 0) << l.out;
      std::vector<double> row = nlohmann::json::parse(l.out)["last_logits"].get<std::vector<double>>();
      double m = *std::max_element(row.begin(), row.end()), s = 0;
      for (double v : row) s += std::exp(v - m);
      window_nll -= row[static_cast<size_t>(ids[6 * w + t + 1])] - m - std::log(s);
    }
  EXPECT_NEAR(e["perplexity_baseline"].get<double>(), std::exp(window_nll / 4.0), 1e-4 * std::exp(window_nll / 4.0));
}

}  // namespace
