// Engine modes side by side on the shared model, in one process:
//  1. prefill and decode tokens/s at batch 1, 8 and 32: baseline mode
//     (padded batch, past/present tensors) vs fused attention over the
//     contiguous, paged and prefix-caching cache managers;
//  2. TTFT with and without prefix caching for prompts sharing 90% of their
//     tokens.
// Prints tables and writes JSON (--out FILE, default bench-engine.json).
// Timings are medians of --reps runs (default 3).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine_configs.h"

namespace {

using Clock = std::chrono::steady_clock;
using sy::GenerationRequest;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// BOS and `len - 1` pseudo-random tokens; different salts give different prompts.
std::vector<int> prompt_of(int len, int salt) {
  std::vector<int> p{1};
  uint64_t x = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(salt + 1);
  for (int i = 1; i < len; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    p.push_back(3 + static_cast<int>(x % 500));
  }
  return p;
}

struct Throughput {
  double prefill_tps, decode_tps;
};

Throughput measure(sy::Session& s, int batch, int prompt_len, int gen, int reps) {
  std::vector<double> pre, dec;
  for (int r = 0; r < reps; ++r) {
    std::vector<GenerationRequest> reqs(static_cast<size_t>(batch));
    for (int i = 0; i < batch; ++i) {
      reqs[static_cast<size_t>(i)].prompt = prompt_of(prompt_len, i + 1000 * r);
      reqs[static_cast<size_t>(i)].max_tokens = 1;
      reqs[static_cast<size_t>(i)].stop_at_eos = false;
    }
    auto t0 = Clock::now();
    s.generate(reqs);
    double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    pre.push_back(batch * prompt_len / secs);
    for (auto& q : reqs) {
      q.prompt.resize(8);
      q.max_tokens = gen;
    }
    auto res = s.generate(reqs);
    double ttft = 0, e2e = 0;
    for (const auto& x : res) {
      ttft = std::max(ttft, x.ttft_ms);
      e2e = std::max(e2e, x.e2e_ms);
    }
    dec.push_back(batch * (gen - 1) / ((e2e - ttft) / 1000.0));
  }
  return {median(pre), median(dec)};
}

}  // namespace

int main(int argc, char** argv) {
  std::string out = "bench-engine.json";
  int reps = 3;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atoi(argv[++i]);
  }
  const std::string model = sy::bench::shared_model("stories260K");
  nlohmann::json j;
  j["model"] = model;
  j["reps"] = reps;

  struct Mode {
    const char* name;
    std::string cache;
    std::map<std::string, std::string> options;
  };
  std::vector<Mode> modes = {{"baseline", "", {}},
                             {"contiguous", "contiguous", {{"max_seq_len", "512"}}},
                             {"paged", "paged", {{"block_size", "16"}}},
                             {"prefix", "prefix-caching", {{"block_size", "16"}}}};
  const int prompt_len = 128, gen = 128;
  std::printf("Throughput on %s: prompt %d tokens (prefill), %d generated tokens (decode), median of %d\n", model.c_str(),
              prompt_len, gen, reps);
  std::printf("%-12s %6s %16s %16s %10s %10s\n", "mode", "batch", "prefill tok/s", "decode tok/s", "pp ratio", "tg ratio");
  for (int batch : {1, 8, 32}) {
    double base_pp = 0, base_tg = 0;
    for (const auto& m : modes) {
      auto s = sy::Session::create(sy::bench::mode_config(model, m.cache, m.options));
      auto t = measure(*s, batch, prompt_len, gen, reps);
      if (!std::strcmp(m.name, "baseline")) {
        base_pp = t.prefill_tps;
        base_tg = t.decode_tps;
      }
      std::printf("%-12s %6d %16.0f %16.0f %10.2f %10.2f\n", m.name, batch, t.prefill_tps, t.decode_tps, t.prefill_tps / base_pp,
                  t.decode_tps / base_tg);
      j["throughput"].push_back({{"mode", m.name}, {"batch", batch}, {"prefill_tokens_per_s", t.prefill_tps},
                                 {"decode_tokens_per_s", t.decode_tps}, {"prefill_ratio_vs_baseline", t.prefill_tps / base_pp},
                                 {"decode_ratio_vs_baseline", t.decode_tps / base_tg}});
    }
  }

  // Prefix caching: 16 requests one after another, 400-token prompts of
  // which the first 360 (90%) are shared; TTFT is the prefill of each.
  const int n_req = 16, len = 400, shared = 360;
  std::printf("\nTTFT, %d requests of %d tokens sharing the first %d (90%%), one after another, median of %d\n", n_req, len,
              shared, reps);
  std::printf("%-16s %12s %12s %12s\n", "cache", "mean TTFT ms", "hit rate", "TTFT ratio");
  double paged_ttft = 0;
  for (const auto& [name, cache] : std::vector<std::pair<std::string, std::string>>{{"paged", "paged"}, {"prefix-caching", "prefix-caching"}}) {
    std::vector<double> ttfts;
    double hit = 0;
    for (int r = 0; r < reps; ++r) {
      auto s = sy::Session::create(sy::bench::mode_config(model, cache, {{"block_size", "16"}}));
      auto common = prompt_of(shared, 7 + r);
      double sum = 0;
      for (int i = 0; i < n_req; ++i) {
        GenerationRequest q;
        q.prompt = common;
        auto tail = prompt_of(len - shared + 1, 100 + i);
        q.prompt.insert(q.prompt.end(), tail.begin() + 1, tail.end());
        q.max_tokens = 1;
        sum += s->generate({q})[0].ttft_ms;
      }
      ttfts.push_back(sum / n_req);
      hit = s->step_engine()->metrics().prefix_hit_rate();
    }
    double t = median(ttfts);
    if (name == "paged") paged_ttft = t;
    std::printf("%-16s %12.3f %12.3f %12.2f\n", name.c_str(), t, hit, paged_ttft / t);
    j["prefix_ttft"].push_back({{"cache", name}, {"mean_ttft_ms", t}, {"prefix_hit_rate", hit}, {"ttft_speedup_vs_paged", paged_ttft / t}});
  }
  std::ofstream(out) << j.dump(2) << "\n";
  std::printf("\nwrote %s\n", out.c_str());
  return 0;
}
