// Shortest-job-first: a third-party scheduler plugin, written from
// docs/plugin-guide.md against the installed SDK.
//
// Each step, running sequences keep going (decode tokens first, then prompt
// chunks); then waiting sequences are admitted shortest first (by the
// tokens they still need), within the token budget, the sequence limit and
// the free KV blocks. When the running ones need more blocks than are free,
// the one with the most work left is preempted first (it loses the least
// progress per freed block for the others).
#include <switchyard/plugin.hpp>

#include <algorithm>
#include <vector>

namespace {

class ShortestJobFirst {
 public:
  explicit ShortestJobFirst(const sy::plugin::Options& o) : chunk_(static_cast<int32_t>(o.get_int("chunk_size"))) {
    if (chunk_ <= 0) throw sy::plugin::Error("chunk_size must be positive", SY_INVALID_ARGUMENT);
  }

  std::vector<sy_sched_decision> plan(const sy_sched_input& in) const {
    const int32_t B = in.block_size;
    // Blocks a sequence's next t tokens add to the ones it holds.
    auto added_blocks = [&](const sy_sched_seq& s, int32_t t) { return (s.computed_len + t + B - 1) / B - (s.computed_len + B - 1) / B; };
    auto work_left = [](const sy_sched_seq& s) { return s.remaining_tokens + (s.max_tokens - s.generated); };

    std::vector<sy_sched_seq> running(in.running, in.running + in.num_running);
    // Decoding sequences first, then prompt chunks; most work left last.
    std::stable_sort(running.begin(), running.end(), [&](const sy_sched_seq& a, const sy_sched_seq& b) {
      const bool da = a.remaining_tokens == 1, db = b.remaining_tokens == 1;
      return da != db ? da : work_left(a) < work_left(b);
    });
    std::vector<sy_sched_decision> out;
    int32_t budget = in.token_budget, free_blocks = in.free_blocks;
    std::vector<int32_t> tokens;
    int32_t left = budget;
    for (const auto& s : running) {
      tokens.push_back(std::max(0, std::min({left, s.remaining_tokens, chunk_})));
      left -= tokens.back();
    }
    int32_t need = 0;
    for (size_t i = 0; i < running.size(); ++i) need += added_blocks(running[i], tokens[i]);
    while (need > free_blocks && !running.empty()) {
      need -= added_blocks(running.back(), tokens.back());
      free_blocks += (running.back().computed_len + B - 1) / B;
      out.push_back({running.back().id, SY_SCHED_PREEMPT, 0});
      running.pop_back();
      tokens.pop_back();
    }
    free_blocks -= need;
    for (size_t i = 0; i < running.size(); ++i)
      if (tokens[i] > 0) {
        out.push_back({running[i].id, SY_SCHED_RUN, tokens[i]});
        budget -= tokens[i];
      }
    // Admissions, shortest first.
    std::vector<sy_sched_seq> waiting(in.waiting, in.waiting + in.num_waiting);
    std::stable_sort(waiting.begin(), waiting.end(), [&](const sy_sched_seq& a, const sy_sched_seq& b) { return work_left(a) < work_left(b); });
    auto seqs = static_cast<int32_t>(running.size());
    for (const auto& s : waiting) {
      if (budget <= 0 || seqs >= in.max_seqs) break;
      const int32_t t = std::min({budget, s.remaining_tokens, chunk_});
      const int32_t blocks = (t + B - 1) / B;
      if (blocks > free_blocks) break;  // the engine admits in plan order and stops at the first that does not fit
      free_blocks -= blocks;
      out.push_back({s.id, SY_SCHED_RUN, t});
      budget -= t;
      ++seqs;
    }
    return out;
  }

 private:
  int32_t chunk_;
};

}  // namespace

SY_PLUGIN(builder) {
  builder.info("sjf-example", "1.0.0", "shortest-job-first scheduling (an example third-party plugin)");
  builder.scheduler<ShortestJobFirst>("shortest-first", "1.0.0", "admit the shortest waiting request first; chunked prefill",
                                      {sy::plugin::option_int("chunk_size", "256", "longest prompt chunk in one step")});
}
