// Structured output through the logits-processor plugin kind, with the
// xgrammar plugin on stories260K: what comes out matches the constraint in
// every engine mode, greedy outputs are the same in every mode and with
// speculative decoding on, and refused constraints name the problem.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>
#include <set>

#include "engine/session.h"
#include "step_support.h"
#include "test_support.h"
#include "model/model_folder.h"

#ifdef SY_GRAMMAR_PLUGIN
namespace sy {
namespace {

using test::paged_config;

const char* kSchema = R"({"type": "object", "properties": {
    "name": {"type": "string", "enum": ["Lily", "Tom", "Sue"]},
    "age": {"type": "integer", "minimum": 1, "maximum": 99},
    "happy": {"type": "boolean"}},
  "required": ["name", "age", "happy"]})";

EngineConfig with_grammar(EngineConfig c) {
  c.plugins.push_back(PluginSpec{SY_GRAMMAR_PLUGIN, std::nullopt, "test"});
  c.logits_processor = ComponentSelection{"xgrammar", {}, "test: logits_processor"};
  return c;
}

std::unique_ptr<Tokenizer> stories_tokenizer() { return ModelFolder::load_tokenizer_file(ModelFolder::open(test::model_path("stories260K.onnx")).tokenizer_file()); }

GenerationRequest constrained(const Tokenizer& tok, const std::string& prompt, OutputConstraint c, float temperature = 0,
                              uint64_t seed = 0) {
  GenerationRequest r;
  r.prompt = tok.encode(prompt, true);
  r.max_tokens = 200;
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  r.constraint = std::move(c);
  return r;
}

std::string text_of(const Tokenizer& tok, const GenerationResult& r) { return tok.decode(r.tokens, true); }

// text is one of the prefixes, then min..max lowercase letters, then the
// suffix (std::regex trips GCC 12's -Wmaybe-uninitialized under ASan).
bool matches(const std::string& text, const std::vector<std::string>& prefixes, size_t min, size_t max, const std::string& suffix) {
  for (const auto& p : prefixes) {
    if (text.rfind(p, 0) != 0 || text.size() < p.size() + suffix.size()) continue;
    const std::string middle = text.substr(p.size(), text.size() - p.size() - suffix.size());
    if (text.compare(text.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    if (middle.size() < min || middle.size() > max) continue;
    if (std::all_of(middle.begin(), middle.end(), [](char c) { return c >= 'a' && c <= 'z'; })) return true;
  }
  return false;
}

void expect_schema_holds(const std::string& text) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  ASSERT_TRUE(j.is_object()) << text;
  ASSERT_TRUE(j.contains("name") && j.contains("age") && j.contains("happy")) << text;
  EXPECT_EQ(j.size(), 3u) << text;
  EXPECT_TRUE(j["name"] == "Lily" || j["name"] == "Tom" || j["name"] == "Sue") << text;
  ASSERT_TRUE(j["age"].is_number_integer()) << text;
  EXPECT_GE(j["age"].get<int>(), 1) << text;
  EXPECT_LE(j["age"].get<int>(), 99) << text;
  EXPECT_TRUE(j["happy"].is_boolean()) << text;
}

std::vector<EngineConfig> every_mode() {
  std::vector<EngineConfig> modes = {with_grammar(paged_config("stories260K", "")),
                                     with_grammar(paged_config("stories260K", "paged", {{"block_size", "4"}}))};
  EngineConfig continuous = with_grammar(paged_config("stories260K", "paged", {{"block_size", "4"}}));
  test::set_scheduler(continuous, "continuous", {{"chunk_size", "3"}});
  modes.push_back(continuous);
  return modes;
}

TEST(StructuredOutput, JsonSchemaHoldsAndGreedyOutputsAgreeInEveryMode) {
  auto tok = stories_tokenizer();
  std::vector<GenerationRequest> batch;
  for (const char* p : {"Once upon a time", "Lily and Tom went to the park.", "The cat"})
    batch.push_back(constrained(*tok, p, {"json_schema", kSchema}));
  std::vector<std::vector<int>> first;
  for (const EngineConfig& mode : every_mode()) {
    auto s = Session::create(mode);
    auto out = s->generate(batch);
    for (size_t i = 0; i < out.size(); ++i) {
      EXPECT_EQ(out[i].finish_reason, FinishReason::Stop) << text_of(*tok, out[i]);
      expect_schema_holds(text_of(*tok, out[i]));
      if (first.size() < out.size()) {
        first.push_back(out[i].tokens);
      } else {
        EXPECT_EQ(out[i].tokens, first[i]) << "request " << i << " differs between modes";
      }
    }
  }
}

TEST(StructuredOutput, SampledOutputsHoldForManySeeds) {
  auto tok = stories_tokenizer();
  auto s = Session::create(with_grammar(paged_config("stories260K", "paged", {{"block_size", "4"}})));
  std::vector<GenerationRequest> batch;
  for (uint64_t seed = 1; seed <= 24; ++seed) batch.push_back(constrained(*tok, "Once upon a time", {"json_schema", kSchema}, 1.f, seed));
  std::set<std::string> distinct;
  for (const auto& r : s->generate(batch)) {
    EXPECT_EQ(r.finish_reason, FinishReason::Stop);
    expect_schema_holds(text_of(*tok, r));
    distinct.insert(text_of(*tok, r));
  }
  EXPECT_GT(distinct.size(), 3u) << "sampling at temperature 1 should vary the output";
  const ConstraintMetrics m = s->token_masker()->metrics();
  EXPECT_EQ(m.requests, 24);
  EXPECT_GT(m.mask_rows, 24 * 5);
}

TEST(StructuredOutput, RegexGrammarAndJsonObject) {
  auto tok = stories_tokenizer();
  auto s = Session::create(with_grammar(paged_config("stories260K", "paged", {{"block_size", "4"}})));
  const std::string grammar = R"(root ::= "Once upon a time, " name " had a " thing "."
name ::= "Lily" | "Tom"
thing ::= [a-z]+)";
  std::vector<GenerationRequest> batch = {constrained(*tok, "Once", {"regex", "(yes|no), [a-z]{2,8}\\."}, 1.f, 3),
                                          constrained(*tok, "Once", {"grammar", grammar}, 1.f, 4),
                                          constrained(*tok, "Once", {"json_object", ""}, 0.f)};
  batch[2].max_tokens = 60;
  auto out = s->generate(batch);
  EXPECT_TRUE(matches(text_of(*tok, out[0]), {"yes, ", "no, "}, 2, 8, ".")) << text_of(*tok, out[0]);
  EXPECT_TRUE(matches(text_of(*tok, out[1]), {"Once upon a time, Lily had a ", "Once upon a time, Tom had a "}, 1, 1000, "."))
      << text_of(*tok, out[1]);
  // json_object: a JSON object, or (cut off by max_tokens) the start of one.
  const std::string obj = text_of(*tok, out[2]);
  ASSERT_FALSE(obj.empty());
  EXPECT_EQ(obj[0], '{') << obj;
  if (out[2].finish_reason == FinishReason::Stop) {
    EXPECT_TRUE(nlohmann::json::parse(obj, nullptr, false).is_object()) << obj;
  }
}

TEST(StructuredOutput, SpeculationKeepsConstrainedGreedyOutputs) {
  auto tok = stories_tokenizer();
  // Prompts that contain JSON the constrained output repeats: the lookup
  // drafter proposes from them.
  std::vector<GenerationRequest> batch;
  for (const char* p : {R"({"name":"Lily","age":5,"happy":true} {"name":"Lily","age":5,"happy":true})",
                        R"(Tom said {"name":"Tom","age":7,"happy":false} and {"name":"Tom","age":7,"happy":false})",
                        "Once upon a time"})
    batch.push_back(constrained(*tok, p, {"json_schema", kSchema}));
  auto plain = Session::create(with_grammar(paged_config("stories260K", "paged", {{"block_size", "4"}})));
  EngineConfig lookup = with_grammar(paged_config("stories260K", "paged", {{"block_size", "4"}}));
  test::set_drafter(lookup, "prompt-lookup", {{"k", "4"}, {"ngram_max", "3"}});
  auto spec = Session::create(lookup);
  auto expected = plain->generate(batch);
  auto got = spec->generate(batch);
  // A draft model (random weights, the same vocabulary): its drafts break
  // the constraint often, so the cut at the first refused draft is exercised.
  EngineConfig draft = with_grammar(paged_config("stories260K", "paged", {{"block_size", "4"}}));
  test::set_drafter(draft, "draft-model", {{"model", test::model_path("llama_mqa_tiny_random.onnx")}, {"k", "3"}});
  auto drafted = Session::create(draft)->generate(batch);
  for (size_t i = 0; i < batch.size(); ++i) EXPECT_EQ(drafted[i].tokens, expected[i].tokens) << "draft model, request " << i;
  for (size_t i = 0; i < batch.size(); ++i) {
    EXPECT_EQ(got[i].tokens, expected[i].tokens) << "request " << i << ": " << text_of(*tok, got[i]) << " vs " << text_of(*tok, expected[i]);
    expect_schema_holds(text_of(*tok, got[i]));
  }
  const auto m = spec->step_engine()->metrics();
  EXPECT_GT(m.spec_draft_tokens, 0) << "the drafter should have proposed";
  EXPECT_GT(m.spec_accepted_tokens, 0) << "drafts copied from the prompt's JSON should be accepted";
}

TEST(StructuredOutput, RefusedConstraintsNameTheProblem) {
  auto tok = stories_tokenizer();
  auto s = Session::create(with_grammar(paged_config("stories260K", "paged", {{"block_size", "4"}})));
  auto bad = [&](OutputConstraint c) {
    return test::error_of([&] { s->generate({constrained(*tok, "Once", c)}); });
  };
  EXPECT_HAS(bad({"json_schema", "{\"type\": \"object\", \"properties\": "}), "json_schema");
  EXPECT_HAS(bad({"regex", "(unclosed"}), "regex");
  EXPECT_HAS(bad({"grammar", "root ::= undefined_rule"}), "grammar");
  EXPECT_HAS(bad({"yaml", "x"}), "unknown constraint kind 'yaml'");
  // The engine serves on.
  auto ok = s->generate({constrained(*tok, "Once", {"json_schema", kSchema})});
  expect_schema_holds(text_of(*tok, ok[0]));
  EXPECT_EQ(s->token_masker()->metrics().refused, 4);

  auto none = Session::create(paged_config("stories260K", "paged", {{"block_size", "4"}}));
  EXPECT_HAS(test::error_of([&] { none->generate({constrained(*tok, "Once", {"json_object", ""})}); }), "has no logits processor");
}

// The same on real exports with a byte-level BPE tokenizer.json (not only
// stories260K's llama2.c pieces): the graph as exported and fused over paged
// blocks, a JSON schema and a regex, greedy outputs equal across the modes.
TEST(StructuredOutput, HoldsOnRealExportsWithTokenizerJson) {
  for (const char* m : {"qwen2-torchscript", "mistral-torchscript"}) {
    const std::string dir = test::source_dir() + "/tests/models/real/" + m;
    auto tok = ModelFolder::load_tokenizer_file(dir + "/tokenizer.json");
    std::vector<GenerationRequest> batch = {constrained(*tok, "Once upon a time", {"json_schema", kSchema}),
                                            constrained(*tok, "Hello", {"regex", "(yes|no), [a-z]{2,8}\\."})};
    std::vector<std::vector<int>> first;
    for (const char* cache : {"", "paged"}) {
      EngineConfig c = with_grammar(paged_config("stories260K", cache, {{"block_size", "4"}}));
      c.model = dir;
      auto out = Session::create(c)->generate(batch);
      expect_schema_holds(text_of(*tok, out[0]));
      EXPECT_TRUE(matches(text_of(*tok, out[1]), {"yes, ", "no, "}, 2, 8, ".")) << m << ": " << text_of(*tok, out[1]);
      if (first.empty()) {
        for (const auto& r : out) first.push_back(r.tokens);
      } else {
        for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i].tokens, first[i]) << m << " request " << i;
      }
    }
  }
}

TEST(StructuredOutput, AModelWithoutATokenizerRunsAndRefusesOnlyConstrainedRequests) {
  // The default manifest selects the processor for every model; one without
  // a tokenizer must still load and serve plain requests.
  test::TempDir dir;
  const auto bare = dir.path / "model.onnx";
  std::filesystem::copy_file(test::model_path("stories260K.onnx"), bare);
  EngineConfig c = with_grammar(paged_config("stories260K", "paged", {{"block_size", "4"}}));
  c.model = bare.string();
  auto s = Session::create(c);
  GenerationRequest plain;
  plain.prompt = {1, 403, 407, 261, 378};
  plain.max_tokens = 8;
  EXPECT_EQ(s->generate({plain})[0].tokens.size(), 8u);
  GenerationRequest constrained_req = plain;
  constrained_req.constraint = {"json_object", ""};
  EXPECT_HAS(test::error_of([&] { s->generate({constrained_req}); }), "needs the model's tokenizer: none beside");
}

}  // namespace
}  // namespace sy
#endif
