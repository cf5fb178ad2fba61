#include "bench/bench_runner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <sstream>
#include <thread>

#include <sys/mman.h>

namespace sy {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

Percentiles percentiles(std::vector<double> v) {
  Percentiles p;
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  p.mean = sum / static_cast<double>(v.size());
  // Linear interpolation between closest ranks (numpy's default).
  auto at = [&](double q) {
    double pos = q * static_cast<double>(v.size() - 1);
    size_t lo = static_cast<size_t>(pos);
    size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
  };
  p.p50 = at(0.5);
  p.p90 = at(0.9);
  p.p99 = at(0.99);
  return p;
}

// A 1 GB sum, on 2 MB pages as the engine holds weights (its host_alloc;
// the tools see only the facade, so the same request is made here): on
// 4 KB pages the page walks, not the memory, set a one-thread figure, and
// MBU would be taken against a rate the weights never see.
double measure_read_bandwidth_gbs(int threads) {
  threads = std::max(1, threads);
  const size_t bytes = size_t{1} << 30;
  constexpr size_t kHugePage = size_t{2} << 20;
  std::unique_ptr<float, decltype(&std::free)> storage(static_cast<float*>(std::aligned_alloc(kHugePage, bytes)), &std::free);
  if (!storage) throw std::bad_alloc();
  madvise(storage.get(), bytes, MADV_HUGEPAGE);  // advice only: a refusal changes nothing
  const std::span<float> buf(storage.get(), bytes / sizeof(float));
  std::fill(buf.begin(), buf.end(), 1.0f);
  const size_t n = buf.size(), share = n / static_cast<size_t>(threads);
  double best = 0;
  volatile float sink = 0;
  for (int r = 0; r < 5; ++r) {
    std::vector<float> sums(static_cast<size_t>(threads));
    auto t0 = Clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        const float* p = buf.data() + share * static_cast<size_t>(t);
        float acc[16] = {};
        for (size_t i = 0; i + 16 <= share; i += 16)
          for (int j = 0; j < 16; ++j) acc[j] += p[i + j];
        float s = 0;
        for (float a : acc) s += a;
        sums[static_cast<size_t>(t)] = s;
      });
    for (auto& th : pool) th.join();
    best = std::max(best, static_cast<double>(share * static_cast<size_t>(threads) * sizeof(float)) / seconds_since(t0) / 1e9);
    for (float v : sums) sink = sink + v;
  }
  return best;
}

void compute_serving_metrics(BenchResult& r, const Workload& w) {
  std::vector<double> ttft, tpot, itl, e2e;
  int64_t out_tokens = 0, in_tokens = 0;
  int good = 0;
  r.completed = r.failed = 0;
  for (size_t i = 0; i < r.results.size(); ++i) {
    const GenerationResult& g = r.results[i];
    if (g.finish_reason == FinishReason::Error || g.tokens.empty()) {
      ++r.failed;
      continue;
    }
    ++r.completed;
    out_tokens += static_cast<int64_t>(g.tokens.size());
    in_tokens += static_cast<int64_t>(w.requests[i].request.prompt.size());
    ttft.push_back(g.ttft_ms);
    e2e.push_back(g.e2e_ms);
    if (g.tokens.size() > 1) tpot.push_back(g.tpot_ms());
    for (size_t k = 1; k < g.token_ms.size(); ++k) itl.push_back(g.token_ms[k] - g.token_ms[k - 1]);
    good += (w.slo.ttft_ms <= 0 || g.ttft_ms <= w.slo.ttft_ms) && (w.slo.tpot_ms <= 0 || g.tpot_ms() <= w.slo.tpot_ms);
  }
  r.ttft_ms = percentiles(ttft);
  r.tpot_ms = percentiles(tpot);
  r.itl_ms = percentiles(itl);
  r.e2e_ms = percentiles(e2e);
  r.request_throughput = r.completed / r.duration_s;
  r.output_throughput = static_cast<double>(out_tokens) / r.duration_s;
  r.total_token_throughput = static_cast<double>(out_tokens + in_tokens) / r.duration_s;
  r.goodput = good / r.duration_s;
}

BenchResult run_workload(Engine& engine, const Workload& w, const std::string& profile, bool progress) {
  SY_CHECK(engine.has_step_engine(), "profile '" << profile << "': bench drives the step engine; select a cache manager ('cache:') and the "
                                                       "attention-fusion pass (static batching is the 'static' scheduler)");
  BenchResult r;
  r.profile = profile;
  const EngineFootprint footprint = engine.footprint();
  r.memory_bandwidth_gbs = measure_read_bandwidth_gbs(footprint.threads);
  r.weight_bytes = footprint.weight_bytes;
  r.kv_bytes_per_token = footprint.kv_bytes_per_token;
  StepEngineMetrics before = engine.metrics();
  r.total_blocks = before.total_blocks;
  const size_t n = w.requests.size();
  std::vector<std::future<GenerationResult>> futures(n);
  r.arrival_s.assign(n, 0);
  std::atomic<size_t> done{0};
  std::mutex finished_mu;
  std::condition_variable finished_cv;  // a request finished (for max_concurrency)
  auto finished_one = [&] {
    {
      std::lock_guard<std::mutex> lock(finished_mu);
      ++done;
    }
    finished_cv.notify_all();
  };
  auto t0 = Clock::now();
  std::thread driver([&] {
    for (size_t i = 0; i < n; ++i) {
      std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(w.requests[i].arrival_s)));
      if (w.max_concurrency > 0) {
        std::unique_lock<std::mutex> lock(finished_mu);
        finished_cv.wait(lock, [&] { return i - done < static_cast<size_t>(w.max_concurrency); });
      }
      r.arrival_s[i] = seconds_since(t0);
      try {
        futures[i] = engine.submit(w.requests[i].request, [&](const GenerationResult&) { finished_one(); });
      } catch (const std::exception& e) {
        std::promise<GenerationResult> p;
        GenerationResult failed;
        failed.finish_reason = FinishReason::Error;
        failed.error = e.what();
        p.set_value(failed);
        futures[i] = p.get_future();
        finished_one();
      }
    }
  });
  // Sample progress, throughput and KV usage while it runs.
  size_t shown = SIZE_MAX;
  while (done < n) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    StepEngineMetrics m = engine.metrics();
    r.timeline.emplace_back(seconds_since(t0), m.generated_tokens - before.generated_tokens, m.used_blocks);
    if (progress && done != shown) {
      size_t d = shown = done;
      int width = 40, fill = static_cast<int>(width * d / n);
      std::fprintf(stderr, "\r  %-12s [%s%s] %zu/%zu requests", profile.c_str(), std::string(static_cast<size_t>(fill), '#').c_str(),
                   std::string(static_cast<size_t>(width - fill), '.').c_str(), d, n);
    }
  }
  driver.join();
  r.duration_s = seconds_since(t0);
  if (progress) std::fprintf(stderr, "\n");
  for (auto& f : futures) r.results.push_back(f.get());
  StepEngineMetrics after = engine.metrics();
  r.engine = after;
  r.timeline.emplace_back(r.duration_s, after.generated_tokens - before.generated_tokens, after.used_blocks);

  compute_serving_metrics(r, w);
  double used_sum = 0;
  int32_t used_peak = 0;
  for (const auto& [t, g, used] : r.timeline) {
    used_sum += used;
    used_peak = std::max(used_peak, used);
  }
  used_peak = std::max(used_peak, after.peak_used_blocks);
  r.kv_usage_peak = r.total_blocks ? static_cast<double>(used_peak) / r.total_blocks : 0;
  r.running_peak = after.peak_running;
  r.kv_usage_mean = r.total_blocks && !r.timeline.empty() ? used_sum / static_cast<double>(r.timeline.size()) / r.total_blocks : 0;
  int64_t prompt = after.prompt_tokens - before.prompt_tokens, cached = after.cached_tokens - before.cached_tokens;
  r.prefix_hit_rate = prompt ? static_cast<double>(cached) / static_cast<double>(prompt) : 0;
  // MBU: bytes that had to be read (all weights once per step, plus the KV
  // of every sequence in the step) per second, over measured bandwidth.
  double steps = static_cast<double>(after.steps - before.steps);
  double kv = static_cast<double>(after.kv_tokens_read - before.kv_tokens_read) * static_cast<double>(r.kv_bytes_per_token);
  double bytes = steps * static_cast<double>(r.weight_bytes) + kv;
  r.mbu = r.memory_bandwidth_gbs > 0 ? bytes / r.duration_s / (r.memory_bandwidth_gbs * 1e9) : 0;
  return r;
}

namespace {

struct Row {
  std::string name;
  std::function<double(const BenchResult&)> get;
  const char* fmt;
};

std::vector<Row> rows() {
  auto pct = [](const char* name, Percentiles BenchResult::*m) {
    std::vector<Row> out;
    out.push_back({std::string(name) + " mean", [m](const BenchResult& r) { return (r.*m).mean; }, "%.2f"});
    out.push_back({std::string(name) + " p50", [m](const BenchResult& r) { return (r.*m).p50; }, "%.2f"});
    out.push_back({std::string(name) + " p90", [m](const BenchResult& r) { return (r.*m).p90; }, "%.2f"});
    out.push_back({std::string(name) + " p99", [m](const BenchResult& r) { return (r.*m).p99; }, "%.2f"});
    return out;
  };
  std::vector<Row> r = {
      {"completed requests", [](const BenchResult& b) { return b.completed; }, "%.0f"},
      {"failed requests", [](const BenchResult& b) { return b.failed; }, "%.0f"},
      {"duration s", [](const BenchResult& b) { return b.duration_s; }, "%.2f"},
      {"request throughput req/s", [](const BenchResult& b) { return b.request_throughput; }, "%.2f"},
      {"output throughput tok/s", [](const BenchResult& b) { return b.output_throughput; }, "%.1f"},
      {"total throughput tok/s", [](const BenchResult& b) { return b.total_token_throughput; }, "%.1f"},
      {"goodput req/s", [](const BenchResult& b) { return b.goodput; }, "%.2f"},
  };
  for (auto& x : pct("TTFT ms", &BenchResult::ttft_ms)) r.push_back(x);
  for (auto& x : pct("TPOT ms", &BenchResult::tpot_ms)) r.push_back(x);
  for (auto& x : pct("ITL ms", &BenchResult::itl_ms)) r.push_back(x);
  for (auto& x : pct("E2E ms", &BenchResult::e2e_ms)) r.push_back(x);
  r.push_back({"KV usage peak", [](const BenchResult& b) { return b.kv_usage_peak; }, "%.3f"});
  r.push_back({"running seqs peak", [](const BenchResult& b) { return static_cast<double>(b.running_peak); }, "%.0f"});
  r.push_back({"KV usage mean", [](const BenchResult& b) { return b.kv_usage_mean; }, "%.3f"});
  r.push_back({"prefix cache hit rate", [](const BenchResult& b) { return b.prefix_hit_rate; }, "%.3f"});
  r.push_back({"preemptions", [](const BenchResult& b) { return static_cast<double>(b.engine.preemptions); }, "%.0f"});
  r.push_back({"spec draft tokens", [](const BenchResult& b) { return static_cast<double>(b.engine.spec_draft_tokens); }, "%.0f"});
  r.push_back({"spec acceptance rate", [](const BenchResult& b) { return b.engine.spec_acceptance_rate(); }, "%.3f"});
  r.push_back({"spec mean accepted length", [](const BenchResult& b) { return b.engine.spec_mean_accepted_length(); }, "%.3f"});
  r.push_back({"spec declined (seq-steps)", [](const BenchResult& b) { return static_cast<double>(b.engine.spec_declined); }, "%.0f"});
  r.push_back({"model steps", [](const BenchResult& b) { return static_cast<double>(b.engine.steps); }, "%.0f"});
  r.push_back({"memory bandwidth GB/s", [](const BenchResult& b) { return b.memory_bandwidth_gbs; }, "%.1f"});
  r.push_back({"MBU", [](const BenchResult& b) { return b.mbu; }, "%.4f"});
  return r;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

std::string results_table(const std::vector<BenchResult>& results, const Slo& slo) {
  std::ostringstream os;
  char line[512];
  std::snprintf(line, sizeof line, "%-28s", "metric");
  os << line;
  for (const auto& r : results) {
    std::snprintf(line, sizeof line, " %16s", r.profile.c_str());
    os << line;
  }
  if (results.size() == 2) os << "      ratio B/A";
  os << "\n";
  for (const Row& row : rows()) {
    std::snprintf(line, sizeof line, "%-28s", row.name.c_str());
    os << line;
    for (const auto& r : results) {
      std::snprintf(line, sizeof line, " %16s", fmt(row.fmt, row.get(r)).c_str());
      os << line;
    }
    if (results.size() == 2) {
      double a = row.get(results[0]), b = row.get(results[1]);
      std::snprintf(line, sizeof line, " %14s", a != 0 ? fmt("%.3f", b / a).c_str() : "-");
      os << line;
    }
    os << "\n";
  }
  os << "goodput SLOs: TTFT <= " << (slo.ttft_ms > 0 ? fmt("%.0f ms", slo.ttft_ms) : std::string("any")) << ", TPOT <= "
     << (slo.tpot_ms > 0 ? fmt("%.0f ms", slo.tpot_ms) : std::string("any")) << "\n";
  return os.str();
}

nlohmann::json results_json(const std::vector<BenchResult>& results, const Slo& slo) {
  nlohmann::json j;
  j["slo"] = {{"ttft_ms", slo.ttft_ms}, {"tpot_ms", slo.tpot_ms}};
  for (const auto& r : results) {
    nlohmann::json p;
    p["profile"] = r.profile;
    for (const Row& row : rows()) p["metrics"][row.name] = row.get(r);
    nlohmann::json per = nlohmann::json::array();
    for (size_t i = 0; i < r.results.size(); ++i)
      per.push_back({{"arrival_s", r.arrival_s[i]}, {"ttft_ms", r.results[i].ttft_ms}, {"e2e_ms", r.results[i].e2e_ms},
                     {"output_tokens", r.results[i].tokens.size()}, {"finish_reason", finish_reason_name(r.results[i].finish_reason)}});
    p["requests"] = per;
    nlohmann::json tl = nlohmann::json::array();
    for (const auto& [t, g, used] : r.timeline) tl.push_back({t, g, used});
    p["timeline"] = tl;
    j["profiles"].push_back(p);
  }
  return j;
}

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One metric over the rounds: each round's values, their medians, and the
// median and range of the rounds' ratios B/A (rounds where A is 0 have none).
struct RoundStats {
  std::vector<double> va, vb;
  double a = 0, b = 0, ratio = 0, lo = 0, hi = 0;
  bool has_ratio = false;
};

RoundStats round_stats(const Row& row, const std::vector<BenchResult>& a, const std::vector<BenchResult>& b) {
  RoundStats st;
  std::vector<double> ratios;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    st.va.push_back(row.get(a[i]));
    st.vb.push_back(row.get(b[i]));
    if (st.va.back() != 0) ratios.push_back(st.vb.back() / st.va.back());
  }
  st.a = median(st.va);
  st.b = median(st.vb);
  st.has_ratio = !ratios.empty();
  if (st.has_ratio) {
    st.ratio = median(ratios);
    st.lo = *std::min_element(ratios.begin(), ratios.end());
    st.hi = *std::max_element(ratios.begin(), ratios.end());
  }
  return st;
}

}  // namespace

std::string rounds_table(const std::vector<BenchResult>& a, const std::vector<BenchResult>& b) {
  std::ostringstream os;
  char line[512];
  const std::string an = a.empty() ? "A" : a[0].profile, bn = b.empty() ? "B" : b[0].profile;
  std::snprintf(line, sizeof line, "%-28s %16s %16s %12s %17s\n", (std::to_string(std::min(a.size(), b.size())) + " rounds, medians").c_str(),
                an.c_str(), bn.c_str(), "ratio B/A", "ratio range");
  os << line;
  for (const Row& row : rows()) {
    const RoundStats st = round_stats(row, a, b);
    std::snprintf(line, sizeof line, "%-28s %16s %16s %12s %17s\n", row.name.c_str(), fmt(row.fmt, st.a).c_str(), fmt(row.fmt, st.b).c_str(),
                  st.has_ratio ? fmt("%.3f", st.ratio).c_str() : "-",
                  st.has_ratio ? (fmt("%.3f", st.lo) + " - " + fmt("%.3f", st.hi)).c_str() : "-");
    os << line;
  }
  return os.str();
}

nlohmann::json rounds_json(const std::vector<BenchResult>& a, const std::vector<BenchResult>& b) {
  nlohmann::json j;
  j["rounds"] = std::min(a.size(), b.size());
  for (const Row& row : rows()) {
    const RoundStats st = round_stats(row, a, b);
    nlohmann::json m{{"median_a", st.a}, {"median_b", st.b}};
    if (st.has_ratio) m.update({{"median_ratio", st.ratio}, {"ratio_min", st.lo}, {"ratio_max", st.hi}});
    m["a"] = st.va;
    m["b"] = st.vb;
    j["metrics"][row.name] = m;
  }
  return j;
}

}  // namespace sy
