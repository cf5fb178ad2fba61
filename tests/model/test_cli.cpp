// The CLI as users script it: the real binary, its JSON shapes and errors.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>

#include "test_support.h"

namespace {

sy::test::ShellResult run(const std::string& args) { return sy::test::shell(std::string(SWITCHYARD_CLI) + " " + args); }

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

}  // namespace
