// What the KV-size strategies cost in quality: fewer KV heads (mean-pooled
// groups, the GQA paper's conversion) and sliding-window attention, on the
// shared MHA and GQA models. For each variant: KV bytes per token, and over a
// 257-token text (run.c's story, teacher-forced) the top-1 agreement of
// next-token predictions and the logit error against the unchanged model.
// Prints a table and writes JSON (--out FILE, default kv-strategies.json).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine_configs.h"

namespace {

struct Variant {
  std::string name;
  std::map<std::string, std::string> pass, cache;
};

}  // namespace

int main(int argc, char** argv) {
  std::string out = "kv-strategies.json";
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
  std::ifstream in(std::string(SWITCHYARD_SHARED_DIR) + "/models/stories260K.runc.json");
  auto runc = nlohmann::json::parse(in);
  std::vector<int> text{1};
  for (int t : runc["runs"][0]["ids"]) text.push_back(t);

  nlohmann::json j;
  j["text_tokens"] = text.size();
  j["text"] = "stories260K.runc.json run 0: BOS + run.c's 256 greedy tokens, teacher-forced";
  std::printf("KV-size strategies, teacher-forced over %zu tokens (run.c's story)\n", text.size());
  std::printf("%-24s %-16s %8s %14s %10s %12s %12s\n", "model", "variant", "kv heads", "KV bytes/tok", "top-1 agr", "max |dlogit|",
              "mean |dlogit|");
  struct M {
    std::string stem;
    std::vector<int> heads;
  };
  for (const M& m : {M{"llama_mha_tiny_random", {3, 2, 1}}, M{"stories260K", {2, 1}}}) {
    std::vector<Variant> variants{{"unchanged", {}, {}}};
    for (int h : m.heads) variants.push_back({"kv_heads=" + std::to_string(h), {{"kv_heads", std::to_string(h)}}, {}});
    for (int w : {128, 32, 8})
      variants.push_back({"window=" + std::to_string(w), {{"window", std::to_string(w)}}, {{"window", std::to_string(w)}}});
    sy::Tensor reference;
    for (const auto& v : variants) {
      auto cache_opts = v.cache;
      cache_opts["block_size"] = "16";
      auto s = sy::Session::create(sy::bench::mode_config(sy::bench::shared_model(m.stem), "paged", cache_opts, v.pass));
      sy::Tensor logits = s->step_engine()->prompt_logits(text);
      if (v.name == "unchanged") reference = logits;
      const int64_t T = logits.dim(0), V = logits.dim(1);
      int64_t agree = 0;
      double max_err = 0, sum_err = 0;
      for (int64_t t = 0; t < T; ++t) {
        const float* a = logits.data<float>() + t * V;
        const float* b = reference.data<float>() + t * V;
        agree += std::max_element(a, a + V) - a == std::max_element(b, b + V) - b;
        for (int64_t k = 0; k < V; ++k) {
          double e = std::abs(static_cast<double>(a[k]) - b[k]);
          max_err = std::max(max_err, e);
          sum_err += e;
        }
      }
      int64_t kvh = s->model().kv_heads(), hd = s->model().head_dim(), layers = s->model().num_layers();
      double bytes_per_token = 2.0 * static_cast<double>(layers * kvh * hd) * sizeof(float);
      double top1 = static_cast<double>(agree) / static_cast<double>(T);
      double mean_err = sum_err / static_cast<double>(T * V);
      std::printf("%-24s %-16s %8lld %14.0f %10.4f %12.4f %12.5f\n", m.stem.c_str(), v.name.c_str(), static_cast<long long>(kvh),
                  bytes_per_token, top1, max_err, mean_err);
      nlohmann::json row{{"model", m.stem}, {"variant", v.name}, {"kv_heads", kvh}, {"kv_bytes_per_token", bytes_per_token},
                         {"top1_agreement", top1}, {"max_abs_logit_error", max_err}, {"mean_abs_logit_error", mean_err}};
      if (v.pass.count("window")) {
        int w = std::stoi(v.pass.at("window"));
        row["kv_bytes_per_sequence_cap"] = bytes_per_token * w;
      }
      j["rows"].push_back(row);
    }
  }
  std::ofstream(out) << j.dump(2) << "\n";
  std::printf("\nwindowed variants hold at most window (+ one block) tokens of KV per sequence; wrote %s\n", out.c_str());
  return 0;
}
