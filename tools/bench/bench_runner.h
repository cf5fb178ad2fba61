// Runs a workload against a session's step engine in-process: requests are
// submitted at their arrival offsets from a driver thread, tokens timed as
// they stream; then the serving metrics (vLLM's definitions) are computed.
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/workload.h"
#include "facade/engine.h"

namespace sy {

struct Percentiles {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0;
};
Percentiles percentiles(std::vector<double> v);

struct BenchResult {
  std::string profile;
  double duration_s = 0;
  std::vector<GenerationResult> results;  // per workload request
  std::vector<double> arrival_s;          // actual submit offsets
  // Samples over the run: (seconds, generated tokens so far, KV blocks used).
  std::vector<std::tuple<double, int64_t, int32_t>> timeline;
  StepEngineMetrics engine;
  double memory_bandwidth_gbs = 0;  // read bandwidth, measured in the same run with the session's threads
  int64_t weight_bytes = 0;
  int64_t kv_bytes_per_token = 0;
  int32_t total_blocks = 0;

  // Derived metrics.
  Percentiles ttft_ms, tpot_ms, itl_ms, e2e_ms;
  double request_throughput = 0, output_throughput = 0, total_token_throughput = 0, goodput = 0;
  double kv_usage_peak = 0, kv_usage_mean = 0, prefix_hit_rate = 0, mbu = 0;
  int32_t running_peak = 0;  // the most sequences one step held (what the KV memory admitted)
  int completed = 0, failed = 0;
};

// The serving metrics as vLLM's benchmark defines them (TTFT, TPOT, ITL and
// E2E percentiles, request/output/total throughput, goodput under the
// workload's SLOs, completed and failed), from r.results and r.duration_s.
// The one definition: the in-process bench and `bench --url` both use it.
void compute_serving_metrics(BenchResult& r, const Workload& w);

// Memory-read bandwidth (GB/s), measured the way a decode step reads its
// weights: `threads` threads each summing their share of a 1 GiB buffer
// (twice the largest L3 met so far) on 2 MB pages; best of a few runs.
double measure_read_bandwidth_gbs(int threads);

// `progress`: draw a progress bar on stderr.
BenchResult run_workload(Engine& engine, const Workload& w, const std::string& profile, bool progress);

// A table with one column per result (and the ratio of the last to the
// first when there are two), for people.
std::string results_table(const std::vector<BenchResult>& results, const Slo& slo);
// The same for machines.
nlohmann::json results_json(const std::vector<BenchResult>& results, const Slo& slo);

// Several A/B rounds of one workload (a[i], b[i] ran back to back): per
// metric the median of A, of B, and of the per-round ratios B/A with their
// range, so a comparison holds on a machine whose speed drifts between runs.
std::string rounds_table(const std::vector<BenchResult>& a, const std::vector<BenchResult>& b);
nlohmann::json rounds_json(const std::vector<BenchResult>& a, const std::vector<BenchResult>& b);

}  // namespace sy
