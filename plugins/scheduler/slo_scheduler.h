// The SLO-aware continuous scheduler ("slo"): stall-free batching in the
// style of Sarathi-Serve, with the step budget derived from a TPOT target
// and a step-cost model measured while it runs.
//
// Every step: the decoding sequences run first (one token each: the TPOT
// promise), then prompt chunks fill what is left of a token budget chosen
// so that the step is predicted to take at most tpot_ms. The prediction is
// a linear model, step time = a + b * tokens + c * context tokens read,
// fitted by exponentially weighted least squares to the steps it has seen
// (the time between two plans, from the engine clock), so the budget
// follows the model, the machine and the load without hand tuning; until
// it has seen enough steps it plans warmup_tokens of prompt per step.
// With a TTFT target too, a step may grow past the TPOT budget when the
// earliest prompt in line would otherwise miss its first-token deadline (the
// smallest budget that meets it, by the same model); a prompt already past
// its deadline gets no such boost (it cannot be saved; the decodes can).
// Admission protects running requests: a new request is admitted only if
// the free KV blocks left afterwards still hold one more block per running
// request (they keep growing), so admissions do not cause preemptions a
// step later. Prompts are served earliest first (or by priority), a long
// prompt in chunks, so short and long ones both progress; with a TTFT
// target, the prompts that can still make it go before the ones already late
// (prompt_order), so an overload costs some requests their deadline instead
// of all of them.
#pragma once

#include <switchyard/plugin.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <vector>

namespace sy_sched {

// Exponentially weighted least squares for y = w0 + w1 x1 + w2 x2.
class StepCostModel {
 public:
  explicit StepCostModel(double forget = 0.97) : forget_(forget) {}
  void add(double x1, double x2, double y) {
    const std::array<double, 3> x{1.0, x1, x2};
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j) xx_[i][j] = forget_ * xx_[i][j] + x[i] * x[j];
      xy_[i] = forget_ * xy_[i] + x[i] * y;
    }
    ++samples_;
  }
  int samples() const { return samples_; }
  // The fitted weights (a small ridge keeps them finite when the samples
  // do not vary along every feature yet).
  std::array<double, 3> weights() const {
    double m[3][4];
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j) m[i][j] = xx_[i][j] + (i == j ? 1e-6 * (1.0 + xx_[i][i]) : 0.0);
      m[i][3] = xy_[i];
    }
    for (int c = 0; c < 3; ++c) {  // Gauss-Jordan with partial pivoting
      int p = c;
      for (int r = c + 1; r < 3; ++r)
        if (std::fabs(m[r][c]) > std::fabs(m[p][c])) p = r;
      for (int k = 0; k < 4; ++k) std::swap(m[c][k], m[p][k]);
      if (std::fabs(m[c][c]) < 1e-300) return {0, 0, 0};
      for (int r = 0; r < 3; ++r) {
        if (r == c) continue;
        const double f = m[r][c] / m[c][c];
        for (int k = c; k < 4; ++k) m[r][k] -= f * m[c][k];
      }
    }
    return {m[0][3] / m[0][0], m[1][3] / m[1][1], m[2][3] / m[2][2]};
  }

 private:
  double forget_;
  double xx_[3][3] = {};
  double xy_[3] = {};
  int samples_ = 0;
};

class SloScheduler {
 public:
  explicit SloScheduler(const sy::plugin::Options& o)
      : tpot_s_(static_cast<double>(o.get_float("tpot_ms")) / 1000.0),
        ttft_s_(static_cast<double>(o.get_float("ttft_ms")) / 1000.0),
        min_chunk_(static_cast<int32_t>(o.get_int("min_chunk"))),
        warmup_(static_cast<int32_t>(o.get_int("warmup_tokens"))),
        priorities_(o.get_bool("priorities")),
        log_every_(o.get_int("log_every")) {
    if (!(tpot_s_ > 0)) throw sy::plugin::Error("tpot_ms must be positive", SY_INVALID_ARGUMENT);
    if (!(ttft_s_ >= 0)) throw sy::plugin::Error("ttft_ms must be >= 0 (0: off)", SY_INVALID_ARGUMENT);
    if (log_every_ < 0) throw sy::plugin::Error("log_every must be >= 0 (0: never)", SY_INVALID_ARGUMENT);
    const double starve_ms = o.get_float("starve_ms");
    if (!(starve_ms >= 0 || starve_ms == -1))
      throw sy::plugin::Error("starve_ms must be >= 0 (0: never) or -1 (4 x ttft_ms)", SY_INVALID_ARGUMENT);
    starve_s_ = starve_ms == -1 ? 4 * ttft_s_ : starve_ms / 1000.0;
    if (min_chunk_ < 1 || warmup_ < 1) throw sy::plugin::Error("min_chunk and warmup_tokens must be positive", SY_INVALID_ARGUMENT);
  }

  std::vector<sy_sched_decision> plan(const sy_sched_input& in) {
    learn(in.now);
    const int32_t B = in.block_size;
    auto held = [&](const sy_sched_seq& s) { return (s.computed_len + B - 1) / B; };
    auto added = [&](const sy_sched_seq& s, int32_t t) { return (s.computed_len + t + B - 1) / B - held(s); };
    auto order = [&](const sy_sched_seq& a, const sy_sched_seq& b) {
      if (priorities_ && a.priority != b.priority) return a.priority < b.priority;
      return a.arrival_time < b.arrival_time;
    };
    std::vector<sy_sched_seq> decoding, prefilling;
    int64_t context = 0;
    for (int32_t i = 0; i < in.num_running; ++i) {
      const sy_sched_seq& s = in.running[i];
      (s.remaining_tokens == 1 && s.generated > 0 ? decoding : prefilling).push_back(s);
      context += s.computed_len;
    }
    std::stable_sort(decoding.begin(), decoding.end(), order);
    std::stable_sort(prefilling.begin(), prefilling.end(), order);
    std::vector<sy_sched_decision> out;

    // Blocks for the decodes; preempt the newest decoders when they do not fit.
    int32_t free_blocks = in.free_blocks;
    int32_t need = 0;
    for (const auto& s : decoding) need += added(s, 1);
    std::vector<sy_sched_seq> victims_first(prefilling.rbegin(), prefilling.rend());  // a preempted prefill loses least
    for (auto it = decoding.rbegin(); it != decoding.rend(); ++it) victims_first.push_back(*it);
    size_t victim = 0;
    std::vector<uint64_t> preempted;
    while (need > free_blocks && victim < victims_first.size()) {
      const sy_sched_seq& v = victims_first[victim++];
      free_blocks += held(v);
      if (v.remaining_tokens == 1 && v.generated > 0) need -= added(v, 1);
      preempted.push_back(v.id);
      out.push_back({v.id, SY_SCHED_PREEMPT, 0});
    }
    auto gone = [&](const sy_sched_seq& s) { return std::find(preempted.begin(), preempted.end(), s.id) != preempted.end(); };
    free_blocks -= need;

    // The step's token budget: what keeps the predicted step time at the target.
    int32_t decodes = 0;
    for (const auto& s : decoding)
      if (!gone(s)) {
        out.push_back({s.id, SY_SCHED_RUN, 1});
        ++decodes;
      }
    // Prompts in the order that meets the most first-token deadlines
    // (prompt_order): running ones continue within the free blocks, waiting
    // ones are admitted within the sequence slots and the headroom.
    std::vector<sy_sched_seq> waiting(in.waiting, in.waiting + in.num_waiting);
    const std::vector<Prompt> prompts = prompt_order(in, prefilling, waiting, decodes, context);
    int32_t budget = std::min(in.token_budget, std::max(decodes + min_chunk_, budget_for(decodes, context)));
    budget = std::max(budget, deadline_budget(in, prompts, decodes, context, budget));
    int32_t left = budget - decodes;
    auto seqs = static_cast<int32_t>(decodes);
    int32_t running_after = in.num_running - static_cast<int32_t>(preempted.size());
    bool admitting = true;
    for (const Prompt& p : prompts) {
      if (left <= 0) break;
      const sy_sched_seq& s = *p.seq;
      if (p.running) {
        if (gone(s)) continue;
        const int32_t t = std::min(left, s.remaining_tokens);
        const int32_t more = added(s, t);
        if (more > free_blocks) continue;
        free_blocks -= more;
        out.push_back({s.id, SY_SCHED_RUN, t});
        left -= t;
        ++seqs;
        continue;
      }
      if (!admitting || seqs >= in.max_seqs) continue;
      const int32_t t = std::min(left, s.remaining_tokens);
      const int32_t blocks = (t + B - 1) / B;
      // Keep a block of headroom per running request; the prompts behind
      // one that does not fit wait too (it keeps its place).
      if (blocks + running_after + 1 > free_blocks) {
        admitting = false;
        continue;
      }
      free_blocks -= blocks;
      out.push_back({s.id, SY_SCHED_RUN, t});
      left -= t;
      ++seqs;
      ++running_after;
    }
    if (log_every_ > 0 && ++steps_ % log_every_ == 0) {
      const auto w = model_.weights();
      char line[256];
      std::snprintf(line, sizeof line,
                    "slo: step %lld: %d decodes, budget %d (TPOT alone %d), planned %d; step cost %.2f ms + %.4f ms/token + "
                    "%.6f ms/context token; %d waiting",
                    static_cast<long long>(steps_), decodes, budget, budget_for(decodes, context), budget - left, 1e3 * w[0], 1e3 * w[1],
                    1e3 * w[2], in.num_waiting);
      sy::plugin::log(SY_LOG_INFO, line);
    }
    last_tokens_ = budget - left;
    last_context_ = context;
    last_now_ = in.now;
    return out;
  }

 private:
  // The step that just ran took now - last_now_ (engine clock): one sample.
  void learn(double now) {
    // Only after a plan that ran something: the engine starts the next step
    // right after it, so the gap is that step (an idle wait follows only an
    // empty plan, which is not sampled).
    if (last_tokens_ > 0 && last_now_ >= 0) {
      const double dt = now - last_now_;
      if (dt > 0 && dt < 10.0) model_.add(last_tokens_, static_cast<double>(last_context_), dt);
    }
    last_tokens_ = 0;
  }
  double predict(int32_t tokens, int64_t context) const {
    const auto w = model_.weights();
    return w[0] + w[1] * tokens + w[2] * static_cast<double>(context);
  }
  int32_t budget_for(int32_t decodes, int64_t context) const {
    if (model_.samples() < 8) return decodes + warmup_;
    const auto w = model_.weights();
    if (!(w[1] > 0)) return decodes + warmup_;
    const double room = tpot_s_ - w[0] - w[2] * static_cast<double>(context);
    return static_cast<int32_t>(std::clamp(room / w[1], 0.0, 1e6));
  }

  struct Prompt {
    const sy_sched_seq* seq;
    bool running;  // prefilling now (else waiting)
  };
  // The order prompts get the step's budget in. First the preempted ones
  // that already had their first token (they decode again once recomputed),
  // then the prompts that can still get their first token by arrival +
  // ttft_ms, earliest deadline first, then the rest (already late, or late
  // whatever the budget) by arrival: under overload the time goes to the
  // requests it can still save instead of making every request miss.
  // Feasibility walks the deadline order adding up the prompt tokens ahead
  // of each one, at the largest step the engine allows; a prompt that cannot
  // make it does not count against those behind it. A prompt that has waited
  // starve_ms (default 4 x ttft_ms) goes first regardless, so a long prompt
  // is not deferred forever. Without ttft_ms: arrival order (or priority).
  std::vector<Prompt> prompt_order(const sy_sched_input& in, const std::vector<sy_sched_seq>& prefilling,
                                   const std::vector<sy_sched_seq>& waiting, int32_t decodes, int64_t context) const {
    std::vector<Prompt> all;
    for (const auto& s : prefilling) all.push_back({&s, true});
    for (const auto& s : waiting) all.push_back({&s, false});
    enum Class { kResumed, kStarved, kFeasible, kLate };
    std::vector<int> cls(all.size(), kFeasible);
    for (size_t i = 0; i < all.size(); ++i) {
      const sy_sched_seq& s = *all[i].seq;
      if (s.generated > 0) cls[i] = kResumed;
      else if (starve_s_ > 0 && in.now - s.arrival_time >= starve_s_) cls[i] = kStarved;
    }
    auto by_arrival = [&](size_t a, size_t b) {
      const sy_sched_seq &x = *all[a].seq, &y = *all[b].seq;
      if (priorities_ && x.priority != y.priority) return x.priority < y.priority;
      if (x.arrival_time != y.arrival_time) return x.arrival_time < y.arrival_time;
      return all[a].running && !all[b].running;
    };
    std::vector<size_t> idx(all.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::stable_sort(idx.begin(), idx.end(), by_arrival);  // with one ttft, deadline order is arrival order
    if (ttft_s_ > 0 && model_.samples() >= 8) {
      const int32_t share = in.token_budget - decodes;
      const double step = predict(in.token_budget, context);
      int64_t ahead = 0;
      for (size_t i : idx) {
        if (cls[i] != kFeasible) continue;
        const sy_sched_seq& s = *all[i].seq;
        const double left = s.arrival_time + ttft_s_ - in.now;
        const int64_t with = ahead + s.remaining_tokens;
        if (left <= 0 || share <= 0 || std::ceil(static_cast<double>(with) / share) * step > left) cls[i] = kLate;
        else ahead = with;
      }
    }
    std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return cls[a] < cls[b]; });
    std::vector<Prompt> out;
    for (size_t i : idx) out.push_back(all[i]);
    return out;
  }

  // The smallest step budget (up to the engine's) with which every prompt
  // in line that can still get its first token by arrival + ttft does: the
  // prompts are served in prompt_order, so prompt i is done after the
  // remaining tokens of prompts 0..i, in ceil(sum / prompt share) steps of
  // predicted length. Prompts that no budget can save any more are not
  // counted (prompt_order put them last).
  int32_t deadline_budget(const sy_sched_input& in, const std::vector<Prompt>& prompts, int32_t decodes, int64_t context,
                          int32_t budget) const {
    if (ttft_s_ <= 0 || model_.samples() < 8) return budget;
    int64_t ahead = 0;  // prompt tokens served before (and including) this one
    int32_t need = budget;
    for (size_t i = 0; i < prompts.size() && i < 32; ++i) {
      const sy_sched_seq& s = *prompts[i].seq;
      ahead += s.remaining_tokens;
      if (s.generated > 0) continue;  // a preempted request had its first token
      const double left = s.arrival_time + ttft_s_ - in.now;
      auto meets = [&](int32_t b) {
        const int32_t share = b - decodes;
        return share > 0 && std::ceil(static_cast<double>(ahead) / share) * predict(b, context) <= left;
      };
      if (left <= 0 || meets(need) || !meets(in.token_budget)) continue;  // met already, or beyond saving
      int32_t lo = need, hi = in.token_budget;  // meets(hi), !meets(lo)
      while (hi - lo > 1) {
        const int32_t mid = lo + (hi - lo) / 2;
        (meets(mid) ? hi : lo) = mid;
      }
      need = hi;
    }
    return need;
  }

  double tpot_s_, ttft_s_;
  int32_t min_chunk_, warmup_;
  bool priorities_;
  double starve_s_ = 0;  // a prompt waiting this long goes first (0: never)
  StepCostModel model_;
  int32_t last_tokens_ = 0;
  int64_t last_context_ = 0;
  double last_now_ = -1;
  int64_t log_every_, steps_ = 0;
};

}  // namespace sy_sched
