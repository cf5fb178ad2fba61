#include "bench/workload.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "facade/engine.h"

namespace sy {

Workload generate_workload(const WorkloadSpec& s, int vocab_size) {
  SY_CHECK(s.requests > 0, "workload: requests must be positive");
  SY_CHECK(s.input_min >= 1 && s.input_max >= s.input_min && s.output_min >= 1 && s.output_max >= s.output_min,
           "workload: bad input/output length ranges");
  SY_CHECK(s.arrival == "poisson" || s.arrival == "burst", "workload: arrival must be poisson or burst, got '" << s.arrival << "'");
  SY_CHECK(s.arrival == "burst" || s.rate > 0, "workload: rate must be positive for poisson arrivals");
  SY_CHECK(s.shared_prefix >= 0 && s.shared_prefix < 1, "workload: shared_prefix must be in [0, 1)");
  int vocab = s.vocab > 0 ? std::min(s.vocab, vocab_size) : vocab_size;
  SY_CHECK(vocab > 3, "workload: vocabulary too small");
  std::mt19937_64 rng(s.seed);
  std::uniform_int_distribution<int> token(3, vocab - 1), in_len(s.input_min, s.input_max), out_len(s.output_min, s.output_max);
  std::exponential_distribution<double> gap(s.arrival == "poisson" ? s.rate : 1.0);
  std::vector<int> prefix{1};
  int prefix_len = static_cast<int>(std::lround(s.shared_prefix * s.input_max));
  while (static_cast<int>(prefix.size()) < std::max(prefix_len, 1)) prefix.push_back(token(rng));
  Workload w;
  w.slo = s.slo;
  SY_CHECK(s.max_concurrency >= 0, "max_concurrency must be >= 0, got " << s.max_concurrency);
  w.max_concurrency = s.max_concurrency;
  double t = 0;
  for (int i = 0; i < s.requests; ++i) {
    WorkloadRequest r;
    if (s.arrival == "poisson" && i > 0) t += gap(rng);
    r.arrival_s = t;
    int len = in_len(rng);
    int shared = std::min(len, static_cast<int>(std::lround(s.shared_prefix * len)));
    r.request.prompt.assign(prefix.begin(), prefix.begin() + std::min<size_t>(prefix.size(), std::max(shared, 1)));
    while (static_cast<int>(r.request.prompt.size()) < len) r.request.prompt.push_back(token(rng));
    r.request.max_tokens = out_len(rng);
    r.request.stop_at_eos = false;  // fixed output lengths, as benchmarks do (ignore EOS)
    w.requests.push_back(std::move(r));
  }
  return w;
}

namespace {

void read_range(const YAML::Node& n, const std::string& key, int& lo, int& hi, const std::string& path) {
  if (!n) return;
  try {
    if (n.IsScalar()) {
      lo = hi = n.as<int>();
    } else {
      lo = n["min"].as<int>();
      hi = n["max"].as<int>();
    }
  } catch (const YAML::Exception&) {
    SY_THROW(path << ":" << n.Mark().line + 1 << ": " << key << ": expected a number or {min, max}");
  }
}

}  // namespace

Workload load_workload(const std::string& path, int vocab_size) {
  std::ifstream in(path);
  SY_CHECK(in, path << ": cannot open the workload");
  Workload w;
  w.name = path;
  if (path.size() > 6 && path.substr(path.size() - 6) == ".jsonl") {
    std::string line;
    int n = 0;
    std::mt19937_64 rng(1);
    std::uniform_int_distribution<int> token(3, std::max(4, vocab_size - 1));
    while (std::getline(in, line)) {
      ++n;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      try {
        auto j = nlohmann::json::parse(line);
        WorkloadRequest r;
        r.arrival_s = j.value("arrival_s", 0.0);
        if (j.contains("prompt_ids")) {
          r.request.prompt = j["prompt_ids"].get<std::vector<int>>();
        } else {
          int len = j.at("input_len").get<int>();
          SY_CHECK(len >= 1, "input_len must be >= 1");
          r.request.prompt.push_back(1);
          while (static_cast<int>(r.request.prompt.size()) < len) r.request.prompt.push_back(token(rng));
        }
        r.request.max_tokens = j.value("output_len", 128);
        r.request.stop_at_eos = false;
        w.requests.push_back(std::move(r));
      } catch (const std::exception& e) {
        SY_THROW(path << ":" << n << ": bad trace line: " << e.what());
      }
    }
    SY_CHECK(!w.requests.empty(), path << ": the trace has no requests");
    std::stable_sort(w.requests.begin(), w.requests.end(), [](const auto& a, const auto& b) { return a.arrival_s < b.arrival_s; });
    return w;
  }
  YAML::Node y;
  try {
    y = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    SY_THROW(path << ":" << e.mark.line + 1 << ": " << e.msg);
  }
  WorkloadSpec s;
  try {
    if (y["requests"]) s.requests = y["requests"].as<int>();
    if (y["arrival"]) s.arrival = y["arrival"].as<std::string>();
    if (y["rate"]) s.rate = y["rate"].as<double>();
    if (y["shared_prefix"]) s.shared_prefix = y["shared_prefix"].as<double>();
    if (y["vocab"]) s.vocab = y["vocab"].as<int>();
    if (y["seed"]) s.seed = y["seed"].as<uint64_t>();
    if (y["max_concurrency"]) s.max_concurrency = y["max_concurrency"].as<int>();
    if (y["slo"]) {
      if (y["slo"]["ttft_ms"]) s.slo.ttft_ms = y["slo"]["ttft_ms"].as<double>();
      if (y["slo"]["tpot_ms"]) s.slo.tpot_ms = y["slo"]["tpot_ms"].as<double>();
    }
  } catch (const YAML::Exception& e) {
    SY_THROW(path << ":" << e.mark.line + 1 << ": " << e.msg);
  }
  read_range(y["input_len"], "input_len", s.input_min, s.input_max, path);
  read_range(y["output_len"], "output_len", s.output_min, s.output_max, path);
  try {
    w = generate_workload(s, vocab_size);
  } catch (const Error& e) {
    SY_THROW(path << ": " << e.what());
  }
  w.name = path;
  return w;
}

}  // namespace sy
