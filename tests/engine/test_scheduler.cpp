// Scheduler plugins driving the asynchronous step engine: identical greedy
// outputs under every batching strategy, chunked prefill that keeps decode
// flowing (checked on the step plans), preemption without loss, and the
// request queue used from several threads with streaming, cancellation and
// timeouts.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "step_support.h"

namespace sy {
namespace {

using test::paged_config;
using test::set_scheduler;

using test::greedy;

std::vector<int> text(int len, int salt) {
  std::vector<int> p{1};
  for (int i = 1; i < len; ++i) p.push_back(3 + (i * 131 + salt * 977) % 500);
  return p;
}

std::vector<GenerationRequest> workload() {
  std::vector<GenerationRequest> w;
  for (int i = 0; i < 10; ++i) w.push_back(greedy(text(3 + 9 * i, i), 6 + 3 * (i % 4)));
  return w;
}

EngineConfig with_scheduler(const std::string& name, const std::map<std::string, std::string>& options,
                            const std::map<std::string, std::string>& cache_options = {{"block_size", "4"}}) {
  auto c = paged_config("stories260K", "paged", cache_options);
  set_scheduler(c, name, options);
  return c;
}

TEST(Schedulers, GreedyOutputsIdenticalAcrossStrategies) {
  auto reference = Session::create(paged_config("stories260K", ""))->generate(workload());  // baseline mode
  for (const auto& [name, options] : std::vector<std::pair<std::string, std::map<std::string, std::string>>>{
           {"static", {{"batch_size", "4"}, {"max_wait_ms", "1"}}},
           {"dynamic", {{"max_batch", "3"}, {"window_ms", "1"}}},
           {"continuous", {{"chunk_size", "8"}}},
           {"continuous", {{"chunk_size", "64"}, {"priorities", "true"}}},
           {"slo", {{"tpot_ms", "5"}, {"min_chunk", "4"}, {"warmup_tokens", "8"}}},
           {"slo", {{"tpot_ms", "50"}, {"priorities", "true"}}},
           // First-token deadlines: late prompts served after the ones that can make it, starved ones first.
           {"slo", {{"tpot_ms", "5"}, {"ttft_ms", "2"}, {"min_chunk", "4"}, {"warmup_tokens", "8"}}},
           {"slo", {{"tpot_ms", "5"}, {"ttft_ms", "2"}, {"starve_ms", "4"}, {"min_chunk", "4"}, {"warmup_tokens", "8"}}}}) {
    auto s = Session::create(with_scheduler(name, options));
    auto got = s->generate(workload());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].tokens, reference[i].tokens) << name << " request " << i;
  }
}

// Each request's first and last step in the recorded plans.
std::map<uint64_t, std::pair<size_t, size_t>> spans(const std::vector<StepRecord>& records) {
  std::map<uint64_t, std::pair<size_t, size_t>> out;
  for (size_t i = 0; i < records.size(); ++i)
    for (const auto& e : records[i].entries) {
      auto it = out.find(e.request);
      if (it == out.end()) {
        out[e.request] = {i, i};
      } else {
        it->second.second = i;
      }
    }
  return out;
}

TEST(Schedulers, StaticRunsBatchesToCompletion) {
  auto s = Session::create(with_scheduler("static", {{"batch_size", "4"}, {"max_wait_ms", "1"}}));
  s->step_engine()->record_steps(true);
  s->generate(workload());
  // Requests that start in the same step form a batch; a batch starts only
  // after the previous one has finished entirely, and holds at most 4.
  std::map<size_t, std::vector<uint64_t>> batches;  // first step -> requests
  auto sp = spans(s->step_engine()->step_records());
  for (const auto& [id, span] : sp) batches[span.first].push_back(id);
  size_t previous_end = 0;
  bool first = true;
  for (const auto& [start, ids] : batches) {
    EXPECT_LE(ids.size(), 4u);
    if (!first) {
      EXPECT_GT(start, previous_end) << "a batch started before the previous one finished";
    }
    for (uint64_t id : ids) previous_end = std::max(previous_end, sp[id].second);
    first = false;
  }
  EXPECT_GE(batches.size(), 3u);  // 10 requests, batches of at most 4
}

TEST(Schedulers, ChunkedPrefillDoesNotStallDecode) {
  auto cfg = with_scheduler("continuous", {{"chunk_size", "16"}});
  cfg.max_batch_tokens = 24;
  auto s = Session::create(cfg);
  StepEngine& e = *s->step_engine();
  e.record_steps(true);
  std::atomic<int> tokens_seen{0};
  std::vector<std::future<GenerationResult>> futures(4);
  std::vector<uint64_t> short_ids;
  for (int i = 0; i < 3; ++i) {
    StepEngine::Callbacks cb;
    cb.on_token = [&](uint64_t, int) { ++tokens_seen; };
    short_ids.push_back(e.submit(greedy(text(4, i), 60), cb, &futures[static_cast<size_t>(i)]));
  }
  while (tokens_seen < 6) std::this_thread::yield();  // the short ones are decoding
  uint64_t long_id = e.submit(greedy(text(200, 9), 4), {}, &futures[3]);
  for (auto& f : futures) f.get();
  int long_steps = 0;
  auto records = e.step_records();
  auto sp = spans(records);
  for (size_t step_index = 0; step_index < records.size(); ++step_index) {
    const auto& rec = records[step_index];
    int32_t total = 0;
    bool long_prefill = false;
    std::set<uint64_t> present;
    for (const auto& en : rec.entries) {
      total += en.tokens;
      present.insert(en.request);
      if (en.request == long_id && en.prefill) {
        long_prefill = true;
        EXPECT_LE(en.tokens, 16);  // chunk_size
      }
    }
    EXPECT_LE(total, 24);  // token budget
    if (!long_prefill) continue;
    ++long_steps;
    // Every short request that was already decoding and is not finished
    // gets its decode token in this very step.
    for (uint64_t id : short_ids) {
      auto [first_step, last_step] = sp[id];
      if (first_step < step_index && step_index <= last_step) {
        EXPECT_TRUE(present.count(id)) << "step " << step_index << " ran a prompt chunk without request " << id;
      }
    }
  }
  EXPECT_GE(long_steps, 200 / 16);  // the long prompt was split into chunks
}

TEST(Schedulers, SloSchedulerUnderASmallCacheLosesNothingAndHoldsItsBudgetToTheTarget) {
  auto big = Session::create(with_scheduler("continuous", {{"chunk_size", "8"}}));
  auto slo = Session::create(with_scheduler("slo", {{"tpot_ms", "2"}, {"min_chunk", "4"}, {"warmup_tokens", "8"}},
                                            {{"block_size", "4"}, {"num_blocks", "28"}}));
  slo->step_engine()->record_steps(true);
  auto a = big->generate(workload()), b = slo->generate(workload());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].tokens, b[i].tokens) << "request " << i;
  // A 2 ms target leaves little room for prompt tokens beside the decodes:
  // once the cost model has its samples, steps stay well under the 512-token budget.
  size_t biggest = 0;
  const auto records = slo->step_engine()->step_records();
  for (size_t i = 8; i < records.size(); ++i) {
    size_t tokens = 0;
    for (const auto& e : records[i].entries) tokens += static_cast<size_t>(e.tokens);
    biggest = std::max(biggest, tokens);
  }
  std::printf("[ slo ] %zu steps, largest step after warmup %zu tokens, %lld preemptions\n", records.size(), biggest,
              static_cast<long long>(slo->step_engine()->metrics().preemptions));
  EXPECT_LT(biggest, 512u);
}

TEST(Schedulers, PreemptionUnderASmallCacheLosesNothing) {
  auto big = Session::create(with_scheduler("continuous", {{"chunk_size", "8"}}));
  auto small = Session::create(with_scheduler("continuous", {{"chunk_size", "8"}}, {{"block_size", "4"}, {"num_blocks", "28"}}));
  auto a = big->generate(workload()), b = small->generate(workload());
  EXPECT_GT(small->step_engine()->metrics().preemptions, 0);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << "request " << i;
    EXPECT_EQ(b[i].finish_reason, FinishReason::Length);
  }
}

TEST(Schedulers, SchedulerBuiltAgainstTheAbi10HeaderReadsItsArraysAt10Strides) {
  // 1.3 grew sy_sched_seq from 48 to 56 bytes; this plugin indexes its
  // arrays with the 1.0 size. The host must lay them out at 1.0's stride
  // (from the descriptor's struct_size) and keep the fields' meanings, also
  // for preempted sequences (prompt_len + generated - computed_len).
  auto big = Session::create(with_scheduler("continuous", {{"chunk_size", "8"}}));
  auto cfg = paged_config("stories260K", "paged", {{"block_size", "4"}, {"num_blocks", "28"}});
  cfg.plugins.push_back(PluginSpec{SY_ABI_1_0_DRAFTER_PLUGIN, std::nullopt, "test"});
  set_scheduler(cfg, "fcfs-1.0");
  auto old = Session::create(cfg);
  auto a = big->generate(workload()), b = old->generate(workload());
  EXPECT_GT(old->step_engine()->metrics().preemptions, 0);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].tokens, b[i].tokens) << "request " << i;
}

TEST(Engine, RequestsFromSeveralThreadsStreamInOrder) {
  auto s = Session::create(with_scheduler("continuous", {}));
  StepEngine& e = *s->step_engine();
  auto reference = Session::create(paged_config("stories260K", "paged"))->generate(workload());
  std::vector<std::thread> threads;
  std::vector<std::vector<int>> streamed(workload().size());
  std::vector<GenerationResult> results(workload().size());
  std::mutex mu;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      auto w = workload();
      for (size_t i = static_cast<size_t>(t); i < w.size(); i += 4) {
        std::future<GenerationResult> f;
        StepEngine::Callbacks cb;
        cb.on_token = [&, i](uint64_t, int tok) {
          std::lock_guard<std::mutex> lock(mu);
          streamed[i].push_back(tok);
        };
        e.submit(w[i], cb, &f);
        results[i] = f.get();
      }
    });
  for (auto& th : threads) th.join();
  for (size_t i = 0; i < results.size(); ++i) {
    EXPECT_EQ(results[i].tokens, reference[i].tokens);
    EXPECT_EQ(streamed[i], results[i].tokens);
  }
}

TEST(Engine, CancelAndTimeoutFreeTheCache) {
  auto s = Session::create(with_scheduler("continuous", {}));
  StepEngine& e = *s->step_engine();
  std::atomic<int> n{0};
  std::future<GenerationResult> f;
  StepEngine::Callbacks cb;
  cb.on_token = [&](uint64_t, int) { ++n; };
  uint64_t id = e.submit(greedy(text(8, 1), 100000), cb, &f);
  while (n < 5) std::this_thread::yield();
  e.cancel(id);
  auto r = f.get();
  EXPECT_EQ(r.finish_reason, FinishReason::Cancelled);
  EXPECT_LT(r.tokens.size(), 100000u);
  auto req = greedy(text(8, 2), 100000);
  req.timeout_ms = 20;
  std::future<GenerationResult> g;
  e.submit(req, {}, &g);
  EXPECT_EQ(g.get().finish_reason, FinishReason::Timeout);
  // Everything was given back; the engine still serves.
  auto ok = s->generate({greedy(text(8, 3), 5)});
  EXPECT_EQ(ok[0].tokens.size(), 5u);
  auto m = e.metrics();
  EXPECT_EQ(m.cancelled, 1);
  EXPECT_EQ(s->step_engine()->cache().stats().free_blocks, m.total_blocks);
}

TEST(Engine, BadRequestsAreRejectedAtSubmit) {
  auto s = Session::create(with_scheduler("continuous", {}));
  StepEngine& e = *s->step_engine();
  EXPECT_THROW(e.submit(greedy({}, 4), {}), Error);
  EXPECT_THROW(e.submit(greedy({1, 100000}, 4), {}), Error);
  auto bad = greedy({1, 2}, 4);
  bad.sampling.top_p = 0;
  EXPECT_THROW(e.submit(bad, {}), Error);
}

}  // namespace
}  // namespace sy
