// The speculation policy against step costs and acceptance rates it is fed
// (no model, no timing): it drafts where drafting raises tokens per
// millisecond (batch 1 on a memory-bound model), declines where it would
// not (a compute-bound batch, a low acceptance rate), learns each
// sequence's acceptance, and does not trust a size's first (warm-up) time.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>

#include "engine/speculation_policy.h"

namespace sy {
namespace {

// Feeds every size from 1 to max_tokens twice (a size is trusted from its second sample).
void learn(SpeculationPolicy& p, const std::function<double(int32_t)>& ms, int32_t max_tokens = 128) {
  for (int round = 0; round < 2; ++round)
    for (int32_t t = 1; t <= max_tokens; ++t) p.record_step(t, ms(t));
}

// Memory-bound at small batches (a pass over the weights, 25 ms, dominates),
// compute-bound beyond: the shape of a 110M-parameter model on two cores.
double memory_bound(int32_t t) { return std::max(25.0 + 0.2 * t, 1.1 * t); }

int32_t total(const std::vector<int32_t>& k) { return std::accumulate(k.begin(), k.end(), 0); }

void accept_all(SpeculationPolicy& p, uint64_t seq, int times) {
  for (int i = 0; i < times; ++i) p.record_verification(seq, 4, 4);
}

TEST(SpeculationPolicy, MeasuresAStepWithoutDraftsBeforeDrafting) {
  // Steps with drafts measured, the step without them not: the policy cannot
  // tell what drafting costs, so it runs (and measures) one without.
  SpeculationPolicy p(4, true);
  for (int i = 0; i < 2; ++i) p.record_step(80, 190);
  accept_all(p, 1, 3);
  EXPECT_EQ(total(p.draft_lengths({1}, 16, 500)), 0);
  for (int i = 0; i < 2; ++i) p.record_step(16, 90);
  // The step is measured; a plain decode step of this batch (one sequence) is not.
  EXPECT_EQ(total(p.draft_lengths({1}, 16, 500)), 0);
  for (int i = 0; i < 2; ++i) p.record_step(1, 20);
  EXPECT_GT(total(p.draft_lengths({1}, 16, 500)), 0);
}

TEST(SpeculationPolicy, DraftsNothingUntilTheStepCostIsMeasured) {
  SpeculationPolicy p(6, true);
  EXPECT_EQ(total(p.draft_lengths({1}, 1, 100)), 0);
  p.record_step(1, 25);  // one sample: possibly warm-up, not trusted yet
  EXPECT_EQ(total(p.draft_lengths({1}, 1, 100)), 0);
  p.record_step(1, 25);
  EXPECT_EQ(p.draft_lengths({1}, 1, 100), std::vector<int32_t>{6});  // larger sizes unmeasured: tried (optimistically)
}

TEST(SpeculationPolicy, SpeculatesFullyAtBatchOneOnAMemoryBoundModel) {
  SpeculationPolicy p(6, true);
  learn(p, memory_bound);
  accept_all(p, 1, 3);
  EXPECT_EQ(p.draft_lengths({1}, 1, 500), std::vector<int32_t>{6});
  // Even at a low acceptance rate: drafts are nearly free here.
  SpeculationPolicy q(6, true);
  learn(q, memory_bound);
  for (int i = 0; i < 10; ++i) q.record_verification(2, 4, 0);
  EXPECT_LT(q.acceptance(2), 0.2);
  EXPECT_GE(q.draft_lengths({2}, 1, 500)[0], 1);
}

TEST(SpeculationPolicy, DeclinesWhenTheBatchIsComputeBoundAndAcceptanceIsLow) {
  SpeculationPolicy p(6, true);
  learn(p, memory_bound, 256);
  std::vector<uint64_t> seqs(32);
  std::iota(seqs.begin(), seqs.end(), 1);
  for (uint64_t s : seqs)
    for (int i = 0; i < 10; ++i) p.record_verification(s, 4, 1);  // one accepted, then rejected: about one in two per token
  EXPECT_EQ(total(p.draft_lengths(seqs, 32, 500)), 0);
  // At batch 1 the same acceptance still pays.
  EXPECT_GE(total(p.draft_lengths({seqs[0]}, 1, 500)), 1);
}

TEST(SpeculationPolicy, GivesDraftTokensToTheSequencesMostLikelyToKeepThem) {
  SpeculationPolicy p(4, true);
  // Mildly compute-bound: a draft token costs a fifth of a decode step.
  learn(p, [](int32_t t) { return 10.0 + 2.0 * t; }, 64);
  accept_all(p, 1, 10);
  for (int i = 0; i < 10; ++i) p.record_verification(2, 4, 0);
  const auto k = p.draft_lengths({1, 2}, 2, 500);
  EXPECT_GT(k[0], 0);
  EXPECT_EQ(k[1], 0);
  EXPECT_GT(p.acceptance(1), 0.9);
  EXPECT_LT(p.acceptance(2), 0.25);
  // A sequence never verified starts from the engine-wide estimate.
  EXPECT_NEAR(p.acceptance(99), p.engine_acceptance(), 1e-12);
}

// A draft model's time per token counts: at batch 16 (figures measured on
// the 110m synth model with a one-layer draft) it makes drafting a loss even
// at full acceptance; at batch 1 drafting still pays.
TEST(SpeculationPolicy, CountsTheDrafterTime) {
  SpeculationPolicy p(4, true);
  for (int i = 0; i < 2; ++i) {
    p.record_step(1, 20);
    p.record_step(5, 24);
    p.record_step(16, 90);
    p.record_step(80, 190);
    p.record_step(300, 800);
    p.record_step(512, 1300);
  }
  std::vector<uint64_t> seqs(16);
  std::iota(seqs.begin(), seqs.end(), 1);
  for (uint64_t s : seqs) accept_all(p, s, 5);
  // Drafting looks free until its time is known, but only one sequence
  // tries it: a first proposal catches a draft model up on the whole context.
  const auto first = p.draft_lengths(seqs, 16, 500);
  EXPECT_EQ(total(first), 4);
  EXPECT_EQ(std::count(first.begin(), first.end(), 0), 15);
  p.record_drafting(4, 17.6);  // 4.4 ms per draft token
  EXPECT_EQ(total(p.draft_lengths(seqs, 16, 500)), 0);
  // Nor in a step slowed by a prefill chunk: its drafts would still take
  // time the batch could decode in.
  EXPECT_EQ(total(p.draft_lengths(seqs, 300, 500)), 0);
  EXPECT_EQ(p.draft_lengths({1}, 1, 500), std::vector<int32_t>{4});
}

// A lookup drafter that found nothing measured its (near-zero) time all the
// same: every sequence may draft from the next step on.
TEST(SpeculationPolicy, AnEmptyProposalMeasuresTheDrafter) {
  SpeculationPolicy p(4, true);
  learn(p, memory_bound);
  std::vector<uint64_t> seqs{1, 2, 3};
  const auto before = p.draft_lengths(seqs, 3, 500);
  EXPECT_EQ(std::count(before.begin(), before.end(), 0), 2);  // one sequence tries
  p.record_drafting(0, 0.01);
  const auto k = p.draft_lengths(seqs, 3, 500);
  EXPECT_EQ(std::count(k.begin(), k.end(), 0), 0);
}

// A tree drafter verifies every node: a draft length of j costs the rows of
// its tree (here four nodes per depth), not j. What pays as a chain on a
// mildly compute-bound step stops paying as a tree of the same depth.
TEST(SpeculationPolicy, CountsEveryNodeOfATree) {
  SpeculationPolicy p(4, true);
  learn(p, [](int32_t t) { return 10.0 + 2.0 * t; }, 64);
  for (int i = 0; i < 10; ++i) p.record_verification(1, 4, 1);  // about one in two per token
  EXPECT_EQ(p.draft_lengths({1}, 1, 500, {true}), std::vector<int32_t>{2});
  for (int i = 0; i < 20; ++i) p.record_tree(3, 12);
  EXPECT_NEAR(p.rows_per_draft_token(), 4.0, 0.05);
  EXPECT_EQ(total(p.draft_lengths({1}, 1, 500, {true})), 0);
  // A sequence whose drafts stay a chain (structured output) is priced as one.
  EXPECT_EQ(p.draft_lengths({1}, 1, 500, {false}), std::vector<int32_t>{2});
  // A tree drafter proposing chains again is costed as chains again.
  for (int i = 0; i < 20; ++i) p.record_tree(3, 3);
  EXPECT_EQ(p.draft_lengths({1}, 1, 500, {true}), std::vector<int32_t>{2});
}

TEST(SpeculationPolicy, StaysWithinTheBudgetAndMaxK) {
  SpeculationPolicy p(6, true);
  learn(p, memory_bound);
  std::vector<uint64_t> seqs{1, 2, 3, 4};
  for (uint64_t s : seqs) accept_all(p, s, 5);
  const auto k = p.draft_lengths(seqs, 4, 5);
  EXPECT_LE(total(k), 5);
  for (int32_t x : k) EXPECT_LE(x, 6);
  SpeculationPolicy fixed(3, false);
  EXPECT_EQ(fixed.draft_lengths(seqs, 4, 7), (std::vector<int32_t>{3, 3, 1, 0}));  // fixed k, budget permitting
}

TEST(SpeculationPolicy, ExploresOneTokenBeyondItsEstimateNowAndThen) {
  SpeculationPolicy p(6, true);
  learn(p, [](int32_t t) { return 1.0 * t; }, 64);  // every token costs the same: drafting never pays
  for (int i = 0; i < 10; ++i) p.record_verification(1, 4, 0);
  int drafted = 0, decisions = 64;
  for (int i = 0; i < decisions; ++i) {
    const auto k = p.draft_lengths({1, 2, 3, 4}, 4, 100);
    drafted += total(k);
    EXPECT_EQ(total(k), k[0]);  // to the sequence that drafted before (its drafter is caught up)
  }
  EXPECT_EQ(drafted, 2);  // one token every 32 decisions
  // No sequence of the step has drafted: nothing to explore with cheaply.
  drafted = 0;
  for (int i = 0; i < decisions; ++i) drafted += total(p.draft_lengths({7, 8, 9}, 3, 100));
  EXPECT_EQ(drafted, 0);
}

TEST(SpeculationPolicy, TheCostModelDistrustsWarmUpAndInterpolates) {
  StepCostModel m;
  EXPECT_LT(m.estimate(4), 0);
  m.record(4, 100);  // warm-up
  EXPECT_LT(m.estimate(4), 0);
  m.record(4, 10);
  EXPECT_DOUBLE_EQ(m.estimate(4), 10);  // the faster of the first two
  m.record(8, 20);
  m.record(8, 20);
  EXPECT_DOUBLE_EQ(m.estimate(6), 15);  // interpolated
  EXPECT_LT(m.estimate(2), 0);  // below the smallest measured: unknown
  EXPECT_DOUBLE_EQ(m.estimate(50), 20);  // beyond the largest: flat until measured
  m.record(8, 40);  // one slow sample moves the estimate a little
  EXPECT_LT(m.estimate(8), 25);
  m.record(8, 10);  // a fast one moves it a lot
  EXPECT_LE(m.estimate(8), 16);
}

}  // namespace
}  // namespace sy
