// The server's Prometheus metrics: the engine's counters (sy_engine_metrics)
// and per-request latencies, under two sets of names: switchyard:* (as
// before) and vLLM's vllm:* with the model_name label, which vLLM's Grafana
// dashboards and autoscalers read unchanged.
#pragma once
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "switchyard/switchyard.h"

namespace sy::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size(), 0) {}
  void observe(double v);
  // labels: "" or `name="value"` pairs joined by commas.
  void write(std::ostringstream& os, const std::string& name, const std::string& help, const std::string& labels) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

class ServerMetrics {
 public:
  explicit ServerMetrics(std::string model_name) : model_name_(std::move(model_name)) {}
  // A finished request (from the engine thread).
  void record(const sy_request_info& info);
  void http_error();
  std::string prometheus(const sy_metrics& engine) const;

 private:
  const std::string model_name_;
  mutable std::mutex mu_;
  Histogram ttft_{{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0}};
  Histogram tpot_{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0}};
  Histogram e2e_{{0.01, 0.05, 0.1, 0.3, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0}};
  Histogram queue_{{0.001, 0.005, 0.01, 0.05, 0.1, 0.3, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0}};
  Histogram prefill_{{0.001, 0.005, 0.01, 0.05, 0.1, 0.3, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0}};
  Histogram decode_{{0.01, 0.05, 0.1, 0.3, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 60.0}};
  Histogram prompt_tokens_{{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000}};
  Histogram generation_tokens_{{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000}};
  std::map<std::string, uint64_t> success_;  // finished_reason -> count
  uint64_t http_errors_ = 0;
};

// OpenAI's finish_reason for the engine's (SY_FINISH_*).
const char* finish_reason_name(int32_t reason);

}  // namespace sy::server
