// Contexts longer than one split-K segment (plugins/attention/attend.h,
// kSegmentKeys): the paged engine attends them segment by segment, the
// segments spread over the threads and merged in a fixed order. The result
// must stay the export's (logits within tolerance of the graph as exported)
// and keep the step engine's exactness: a sequence decoded alone, in a
// batch, with drafts verified, or on one thread gives the same tokens.
#include <gtest/gtest.h>

#include <cmath>

#include "step_support.h"
#include "synth/synth_model.h"

namespace sy {
namespace {

GenerationRequest greedy(std::vector<int> prompt, int n) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = n;
  r.stop_at_eos = false;
  return r;
}

// A prompt of n tokens that repeats itself every `period` (prompt lookup
// then finds drafts to propose).
std::vector<int> prompt_of(int n, int period, int vocab) {
  std::vector<int> p;
  for (int i = 0; i < n; ++i) p.push_back(1 + (i % period) * 37 % (vocab - 1));
  return p;
}

EngineConfig config_for(const std::string& model, const std::string& cache, int threads) {
  EngineConfig c = test::paged_config("stories260K", cache, {{"block_size", "16"}, {"budget_mb", "64"}});
  c.model = model;
  c.threads = threads;
  return c;
}

TEST(LongContext, SegmentsAcrossThreadsKeepTheExportsLogitsAndTheEnginesExactness) {
  test::TempDir dir;
  const std::string model = (dir.path / "tiny.onnx").string();
  SynthConfig sc = synth_preset("tiny");  // 2048 positions, 2 KV heads
  write_synth_model(sc, model, 7);
  const std::vector<int> a = prompt_of(1500, 97, static_cast<int>(sc.vocab)), b = prompt_of(1200, 61, static_cast<int>(sc.vocab));

  // 1. Against the graph as exported (plain attention over the whole context).
  auto base = Session::create(config_for(model, "", 2));
  auto paged = Session::create(config_for(model, "paged", 2));
  const std::vector<float> expect = base->last_logits(a), got = paged->last_logits(a);
  ASSERT_EQ(expect.size(), got.size());
  double worst = 0, scale = 1;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(got[i]) - expect[i]));
    scale = std::max(scale, std::abs(static_cast<double>(expect[i])));
  }
  EXPECT_LE(worst, 1e-4 * scale) << "1500 tokens: two segments of the context, merged";

  // 2. The engine's exactness over segments: alone, batched, on one thread,
  //    with drafts verified (prompt lookup on the repeating prompt).
  const auto alone = paged->generate({greedy(a, 12)})[0].tokens;
  const auto together = paged->generate({greedy(a, 12), greedy(b, 12)});
  EXPECT_EQ(together[0].tokens, alone) << "batched with another long sequence";
  EXPECT_EQ(together[1].tokens, paged->generate({greedy(b, 12)})[0].tokens);
  auto one_thread = Session::create(config_for(model, "paged", 1));
  EXPECT_EQ(one_thread->generate({greedy(a, 12)})[0].tokens, alone) << "the segments' share-out must not change a bit";
  EngineConfig spec = config_for(model, "paged", 2);
  test::set_drafter(spec, "prompt-lookup", {{"k", "4"}});
  auto drafted = Session::create(spec);
  EXPECT_EQ(drafted->generate({greedy(a, 12)})[0].tokens, alone) << "verified drafts over a split context";
  // (Random weights rarely continue the repetition: the drafts are verified
  // in (k + 1)-row tiles across the segments, mostly rejected.)
  EXPECT_GT(drafted->step_engine()->metrics().spec_draft_tokens, 0) << "the test needs verified drafts";
}

}  // namespace
}  // namespace sy
