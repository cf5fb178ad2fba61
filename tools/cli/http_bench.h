// `switchyard bench --url`: the same workloads as the in-process bench, sent
// to a running OpenAI-compatible server by concurrent streaming clients.
#pragma once
#include <string>

#include "bench/bench_runner.h"

namespace sy::cli {

BenchResult run_workload_http(const std::string& url, const std::string& api_key, const std::string& model, const Workload& w,
                              bool progress);

}  // namespace sy::cli
