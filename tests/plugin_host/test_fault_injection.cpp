// Fault injection through a real plugin library (tests/plugin_host/fixtures/fault_plugin.cpp):
// a kernel that fails on its Nth call, a pass that fails after rewriting, a
// cache manager that refuses allocation, a drafter that proposes invalid ids,
// a slow kernel. The affected requests fail (or degrade) with a clear reason;
// the others complete with the same tokens as a healthy engine; the engine
// keeps serving. Under the CI's ASan build, LeakSanitizer checks nothing leaks.
#include <gtest/gtest.h>

#include <future>

#include "step_support.h"

namespace sy {
namespace {

EngineConfig with_faults(std::map<std::string, std::string> wrap_options, const std::string& cache = "paged",
                         std::map<std::string, std::string> cache_options = {{"block_size", "16"}}) {
  EngineConfig c = test::paged_config("stories260K", cache, cache_options);
  c.plugins.push_back(PluginSpec{SY_FAULT_PLUGIN, std::nullopt, "test"});
  ComponentSelection wrap{"fault-wrap", {}, "test: passes[1]"};
  for (const auto& [k, v] : wrap_options) wrap.options[k] = RawOption{v, "test: fault-wrap " + k};
  c.passes.push_back(wrap);
  if (cache == "refusing-paged") c.cache->options["block_size"] = RawOption{"16", "test"};
  return c;
}

using test::greedy;

const std::vector<int> kPromptA{1, 403, 407, 261, 378};
const std::vector<int> kPromptB{1, 365, 372, 267, 429, 297};

// Submits all, waits for all (StepEngine::generate throws on a failed request).
std::vector<GenerationResult> run_all(StepEngine& engine, const std::vector<GenerationRequest>& requests) {
  std::vector<std::future<GenerationResult>> futures(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) engine.submit(requests[i], {}, &futures[i]);
  std::vector<GenerationResult> out;
  for (auto& f : futures) out.push_back(f.get());
  return out;
}

std::vector<int> healthy(const std::vector<int>& prompt, int max_tokens) {
  auto s = Session::create(test::paged_config("stories260K", "paged", {{"block_size", "16"}}));
  return s->generate({greedy(prompt, max_tokens)})[0].tokens;
}

TEST(FaultInjection, KernelFailingOnItsNthCallFailsThatStepOnlyAndTheEngineServesOn) {
  auto s = Session::create(with_faults({{"fail_on_call", "3"}}));  // prefill, decode, then failure
  auto* engine = s->step_engine();
  auto failed = run_all(*engine, {greedy(kPromptA, 10)})[0];
  EXPECT_EQ(failed.finish_reason, FinishReason::Error);
  EXPECT_NE(failed.error.find("fault::Sigmoid failed on call 3"), std::string::npos) << failed.error;
  EXPECT_NE(failed.error.find("fault-injection"), std::string::npos) << "the error names the plugin: " << failed.error;
  EXPECT_EQ(failed.tokens.size(), 2u);  // what the two good steps produced
  // The same engine, after the failure: two requests together, exact outputs.
  auto after = run_all(*engine, {greedy(kPromptA, 12), greedy(kPromptB, 12)});
  EXPECT_EQ(after[0].finish_reason, FinishReason::Length);
  EXPECT_EQ(after[0].tokens, healthy(kPromptA, 12));
  EXPECT_EQ(after[1].tokens, healthy(kPromptB, 12));
  EXPECT_EQ(engine->metrics().used_blocks, 0) << "the failed request's KV blocks were not returned";
}

TEST(FaultInjection, PassFailingAfterRewritingIsRefusedWithItsReason) {
  try {
    Session::create(with_faults({{"fail", "true"}}));
    FAIL() << "a session was created although a pass failed";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("fault-wrap: failing after rewriting 5 nodes"), std::string::npos) << msg;
    EXPECT_NE(msg.find("fault-injection"), std::string::npos) << msg;
  }
  // The plugin stays loadable and the same pass without the fault works.
  auto s = Session::create(with_faults({}));
  EXPECT_EQ(s->generate({greedy(kPromptA, 8)})[0].tokens, healthy(kPromptA, 8));
}

TEST(FaultInjection, CacheRefusingAllocationFailsTheLongRequestAndServesTheShortOnes) {
  EngineConfig c = test::paged_config("stories260K", "refusing-paged", {{"max_tokens_per_seq", "24"}, {"num_blocks", "64"}});
  c.plugins.push_back(PluginSpec{SY_FAULT_PLUGIN, std::nullopt, "test"});
  auto s = Session::create(c);
  auto results = run_all(*s->step_engine(), {greedy(kPromptA, 40), greedy(kPromptB, 12), greedy(kPromptA, 10)});
  EXPECT_EQ(results[0].finish_reason, FinishReason::Error);
  EXPECT_NE(results[0].error.find("does not fit the KV cache"), std::string::npos) << results[0].error;
  EXPECT_NE(results[0].error.find("refusing-paged: sequence would hold 25 tokens, over the configured 24"), std::string::npos) << results[0].error;
  EXPECT_EQ(results[1].tokens, healthy(kPromptB, 12));
  EXPECT_EQ(results[2].tokens, healthy(kPromptA, 10));
  EXPECT_EQ(s->step_engine()->metrics().used_blocks, 0);
}

TEST(FaultInjection, DrafterProposingInvalidIdsIsIgnoredAndOutputsAreExact) {
  EngineConfig c = test::paged_config("stories260K", "paged", {{"block_size", "16"}});
  c.plugins.push_back(PluginSpec{SY_FAULT_PLUGIN, std::nullopt, "test"});
  test::set_drafter(c, "bad-drafter");
  auto s = Session::create(c);
  auto results = s->generate({greedy(kPromptA, 16), greedy(kPromptB, 16)});
  EXPECT_EQ(results[0].tokens, healthy(kPromptA, 16));
  EXPECT_EQ(results[1].tokens, healthy(kPromptB, 16));
  auto m = s->step_engine()->metrics();
  EXPECT_GT(m.spec_invalid_drafts, 10);
  EXPECT_NE(m.spec_last_invalid.find("outside the vocabulary of 512"), std::string::npos) << m.spec_last_invalid;
}

// Malformed trees of drafts (ABI 1.9) are dropped for the step, named, and
// the sequence decodes as it would without them.
TEST(FaultInjection, MalformedDraftTreesAreDroppedNamingTheFault) {
  for (const auto& [fault, message] : std::vector<std::pair<std::string, std::string>>{
           {"parent", "tree node 3 follows node 3, not an earlier node"},
           {"token", "tree node 3 proposes token id 1073741824, outside the vocabulary of 512"},
           {"count", "nodes, more than the"}}) {
    EngineConfig c = test::paged_config("stories260K", "paged", {{"block_size", "16"}});
    c.plugins.push_back(PluginSpec{SY_FAULT_PLUGIN, std::nullopt, "test"});
    test::set_drafter(c, "bad-tree-drafter", {{"fault", fault}});
    auto s = Session::create(c);
    auto results = s->generate({greedy(kPromptA, 16), greedy(kPromptB, 16)});
    EXPECT_EQ(results[0].tokens, healthy(kPromptA, 16)) << fault;
    EXPECT_EQ(results[1].tokens, healthy(kPromptB, 16)) << fault;
    auto m = s->step_engine()->metrics();
    EXPECT_GT(m.spec_invalid_drafts, 10) << fault;
    EXPECT_NE(m.spec_last_invalid.find("drafter 'bad-tree-drafter'"), std::string::npos) << m.spec_last_invalid;
    EXPECT_NE(m.spec_last_invalid.find(message), std::string::npos) << m.spec_last_invalid;
  }
}

// A drafter that reads hidden states (ABI 1.10) gets the target's, of the
// model's hidden size (stories260K: 64), before it proposes; a failing or
// mismatched hidden_state fails that drafter's sequences with its message.
TEST(FaultInjection, AHiddenStateDrafterGetsTheTargetsAndItsFailuresNameIt) {
  const std::vector<std::pair<std::map<std::string, std::string>, std::string>> cases{
      {{}, ""},
      {{{"hidden", "65"}}, "hidden-drafter: a hidden state of 64 values, expected 65"},
      {{{"fail_in", "hidden_state"}, {"after", "3"}}, "hidden-drafter hidden_state: injected failure 1"}};
  for (const auto& [options, message] : cases) {
    EngineConfig c = test::paged_config("stories260K", "paged", {{"block_size", "16"}});
    c.plugins.push_back(PluginSpec{SY_FAULT_PLUGIN, std::nullopt, "test"});
    test::set_drafter(c, "hidden-drafter", options);
    auto s = Session::create(c);
    std::future<GenerationResult> f;
    s->step_engine()->submit(greedy(kPromptA, 16), {}, &f);
    const GenerationResult r = f.get();
    if (message.empty()) {
      EXPECT_EQ(r.tokens, healthy(kPromptA, 16));
      EXPECT_GT(s->step_engine()->metrics().spec_draft_tokens, 0);
    } else {
      EXPECT_EQ(r.finish_reason, FinishReason::Error) << message;
      EXPECT_NE(r.error.find(message), std::string::npos) << r.error;
    }
  }
}

TEST(FaultInjection, SlowKernelTimesOutTheImpatientRequestAndTheOthersFinishExactly) {
  auto s = Session::create(with_faults({{"delay_ms", "5"}}));  // >= 5 ms per step
  auto* engine = s->step_engine();
  GenerationRequest impatient = greedy(kPromptA, 200);
  impatient.timeout_ms = 60;
  std::future<GenerationResult> f1, f2;
  engine->submit(impatient, {}, &f1);
  engine->submit(greedy(kPromptB, 20), {}, &f2);
  GenerationResult r1 = f1.get(), r2 = f2.get();
  EXPECT_EQ(r1.finish_reason, FinishReason::Timeout);
  EXPECT_LT(r1.tokens.size(), 200u);
  EXPECT_EQ(r2.finish_reason, FinishReason::Length);
  EXPECT_EQ(r2.tokens, healthy(kPromptB, 20));
}

}  // namespace
}  // namespace sy
