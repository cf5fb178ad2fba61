// How far to speculate, decided every step from measurements rather than a
// fixed k: speculation pays at batch 1 (a decode step is a pass over the
// weights; verifying k drafts with it costs little more) and stops paying
// when the batch already keeps the machine busy (every draft token then costs
// about what a decoded token does, and rejected ones are waste).
//
// Each decoding sequence's draft length is chosen to maximise the step's
// expected tokens per millisecond:
//  - acceptance: a sequence's drafts are modelled as accepted token by token
//    with probability a (its running estimate; new sequences start from the
//    engine-wide one), so its j-th draft token adds a^j expected tokens;
//  - cost: the forward time measured as a function of the step's token
//    count (StepCostModel), plus the drafter's measured time per proposed
//    token (a draft model's forwards; a lookup drafter's is near zero). A
//    drafter that proposes trees verifies several nodes per draft length
//    (measured: rows_per_draft_token), and each of them costs a row.
// Draft tokens are added one at a time, best expected gain first, while each
// yields more tokens per millisecond than the step so far and than the same
// sequences decoding without drafts; now and then one more (to a sequence
// that drafted before), to keep the estimate that stopped them measured.
// Until the drafter's own time is measured, only one sequence drafts.
#pragma once
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace sy {

// Forward time against tokens per step, learned from every step the engine
// runs (prefill chunks included): per token count (exact up to 64 tokens,
// quarter octaves above), an average that follows faster samples more than
// slower ones (noise only adds time), trusted from its second sample on (the
// first often pays for warm-up); interpolated linearly between measured
// counts, and taken as flat beyond the largest (optimistic: the policy tries
// those sizes and so measures them).
class StepCostModel {
 public:
  void record(int32_t tokens, double ms);
  // Estimated milliseconds for a step of `tokens`; negative while no size up
  // to `tokens` is measured twice.
  double estimate(int32_t tokens) const;

 private:
  struct Point {
    double tokens = 0, ms = 0;
    int64_t samples = 0;
  };
  static int32_t bucket(int32_t tokens);
  std::vector<Point> points_;  // by bucket
};

class SpeculationPolicy {
 public:
  // max_k: the most draft tokens per sequence and step. adaptive false: always
  // max_k (a fixed draft length, for comparisons).
  SpeculationPolicy(int32_t max_k, bool adaptive) : max_k_(max_k), adaptive_(adaptive) {}

  // Draft lengths (each in [0, max_k]) for the decoding sequences `seqs` of a
  // step that runs `base_tokens` tokens without drafts, at most `budget`
  // draft tokens in all.
  // trees[i]: sequence i's drafts come as a tree (rows_per_draft_token rows
  // a draft token); missing or false, as a chain (one row each).
  std::vector<int32_t> draft_lengths(const std::vector<uint64_t>& seqs, int32_t base_tokens, int32_t budget,
                                     const std::vector<bool>& trees = {});

  void record_step(int32_t tokens, double ms) { cost_.record(tokens, ms); }
  // One proposal's time (not a sequence's first: that one also brings a
  // draft model up to date with the context).
  void record_drafting(int32_t proposed, double ms);
  void record_verification(uint64_t seq, int32_t proposed, int32_t accepted);
  // A tree of `nodes` drafts proposed for a draft length of `depth`: the
  // rows a draft length costs (a tree verifies every node, several per
  // depth; a chain one).
  void record_tree(int32_t depth, int32_t nodes);
  double rows_per_draft_token() const { return rows_per_draft_; }
  void forget(uint64_t seq) { seqs_.erase(seq); }

  double acceptance(uint64_t seq) const;  // the running estimate for seq
  double engine_acceptance() const { return rate(global_); }
  const StepCostModel& cost() const { return cost_; }

 private:
  // Decayed counts of accepted draft tokens and rejections (a draft that
  // stopped short): the per-token acceptance estimate is accepted / (accepted + rejected).
  struct Counts {
    double accepted = 0, rejected = 0;
  };
  static double rate(const Counts& c, double prior_rate = 0.7, double prior_weight = 1.0);
  // One draft token beyond the estimates, to a sequence that drafted before.
  void explore_one(const std::vector<uint64_t>& seqs, std::vector<int32_t>& k) const;
  int32_t max_k_;
  bool adaptive_;
  StepCostModel cost_;
  double draft_ms_per_token_ = 0;  // exponential average, per proposed token (a tree: per node)
  double rows_per_draft_ = 1;      // exponential average of nodes per draft length (1: chains)
  bool draft_cost_known_ = false;
  int64_t decisions_ = 0;
  Counts global_;
  std::unordered_map<uint64_t, Counts> seqs_;
};

}  // namespace sy
