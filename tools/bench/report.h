// A self-contained HTML report of benchmark runs: the metrics table and SVG
// plots (TTFT and end-to-end latency CDFs, output throughput and KV usage
// over time). No script and no network resource: it opens anywhere.
#pragma once
#include <string>
#include <vector>

#include "bench/bench_runner.h"

namespace sy {

void write_html_report(const std::string& path, const std::string& title, const std::vector<BenchResult>& results,
                       const Slo& slo, const std::string& notes);

}  // namespace sy
