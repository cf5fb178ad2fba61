// What the planner hands the rest of the step (vLLM's SchedulerOutput): who
// runs with how many tokens, drafts included once the speculator has added
// them, and which rows of the forward's logits are sampled from.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/step/sequence.h"

namespace sy {

struct StepPlan {
  struct Entry {
    Sequence* seq;
    int32_t tokens;  // prompt chunk, or decode token plus drafts
  };
  std::vector<Entry> entries;

  bool empty() const { return entries.empty(); }
  int32_t tokens() const {
    int32_t n = 0;
    for (const Entry& e : entries) n += e.tokens;
    return n;
  }
  // Entries whose sequence a part of the step has failed leave the plan.
  void drop_finished() {
    std::erase_if(entries, [](const Entry& e) { return e.seq->finished(); });
  }
};

// The flattened positions sampled from: a sequence's last token when its
// prompt is complete, or every position of a drafted step. first[i] is
// entry i's first row in `rows` (-1: it samples nothing this step).
struct SampledRows {
  std::vector<int64_t> rows;
  std::vector<int64_t> first;

  static SampledRows of(const StepPlan& plan) {
    SampledRows out;
    out.first.assign(plan.entries.size(), -1);
    int64_t at = 0;
    for (size_t i = 0; i < plan.entries.size(); ++i) {
      const Sequence* s = plan.entries[i].seq;
      const int32_t n = plan.entries[i].tokens;
      if (!s->drafts.empty() || s->computed + n == static_cast<int32_t>(s->tokens.size())) {
        out.first[i] = static_cast<int64_t>(out.rows.size());
        for (int64_t r = s->drafts.empty() ? at + n - 1 : at; r < at + n; ++r) out.rows.push_back(r);
      }
      at += n;
    }
    return out;
  }
};

}  // namespace sy
