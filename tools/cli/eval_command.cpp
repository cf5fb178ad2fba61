// switchyard eval: what a profile's rewrites cost in quality, against a
// baseline (by default the same profile without its quantize pass). Over a
// text, teacher-forced through the step engine, for each position: does the
// next-token prediction agree (top-1), how far apart are the distributions
// (KL(baseline || profile)), and how well does each predict the text
// (perplexity). Prints a table and writes JSON.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_support.h"
#include "commands.h"
#include "engine/step_engine.h"
#include "tokenizer/tokenizer.h"

namespace sy::cli {

namespace {

// log-softmax of one row, in double.
std::vector<double> log_probs(const float* logits, int64_t V) {
  double m = *std::max_element(logits, logits + V), s = 0;
  for (int64_t i = 0; i < V; ++i) s += std::exp(double(logits[i]) - m);
  const double lse = m + std::log(s);
  std::vector<double> lp(static_cast<size_t>(V));
  for (int64_t i = 0; i < V; ++i) lp[static_cast<size_t>(i)] = double(logits[i]) - lse;
  return lp;
}

Tensor text_logits(const EngineConfig& cfg, const std::vector<int>& tokens, const std::string& label) {
  auto session = Session::create(cfg);
  SY_CHECK(session->step_engine(), label << ": eval runs the step engine; select a cache manager ('cache:') and the "
                                            "attention-fusion pass in the profile");
  return session->step_engine()->prompt_logits(tokens);
}

}  // namespace

int cmd_eval(const std::vector<std::string>& args) {
  EngineFlags mf;
  std::string baseline_profile, text_path, tokenizer_path, json_out = "eval.json";
  int64_t max_tokens = 512;
  po::options_description d("eval options");
  d.add_options()("help,h", "show this help");
  mf.add(d);
  d.add_options()("baseline", po::value(&baseline_profile), "baseline profile (default: the profile without its 'quantize' pass)")(
      "text", po::value(&text_path)->required(), "text file to evaluate on")(
      "tokenizer,t", po::value(&tokenizer_path), "llama2.c tokenizer (default: the manifest's, else beside the model)")(
      "max-tokens", po::value(&max_tokens)->default_value(512), "evaluate the first N tokens of the text")(
      "out", po::value(&json_out)->default_value("eval.json"), "JSON output");
  auto p = parse(args, d, "usage: switchyard eval --manifest F --profile P --text FILE [--baseline P0] [--out eval.json]");
  if (p.help) return 0;
  SY_CHECK(!mf.manifest.empty(), "eval compares two profiles of a manifest: give --manifest");
  EngineConfig cfg = mf.config();
  EngineConfig base;
  if (!baseline_profile.empty()) {
    EngineFlags bf = mf;
    bf.profile = baseline_profile;
    base = bf.config();
  } else {
    base = cfg;
    auto& passes = base.passes;
    passes.erase(std::remove_if(passes.begin(), passes.end(), [](const ComponentSelection& s) { return s.name == "quantize"; }), passes.end());
    SY_CHECK(passes.size() < cfg.passes.size(), "profile '" << mf.profile << "' has no 'quantize' pass: give --baseline PROFILE");
    baseline_profile = mf.profile + " without quantize";
  }
  std::ifstream in(text_path);
  SY_CHECK(in, "cannot read the text " << text_path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto tok = load_tokenizer(find_tokenizer(cfg.model, tokenizer_path.empty() ? cfg.tokenizer : tokenizer_path));
  std::vector<int> tokens = tok->encode(ss.str(), true);
  if (static_cast<int64_t>(tokens.size()) > max_tokens) tokens.resize(static_cast<size_t>(max_tokens));
  SY_CHECK(tokens.size() >= 2, text_path << ": the text has fewer than two tokens");

  Tensor lb = text_logits(base, tokens, "baseline '" + baseline_profile + "'");
  Tensor lq = text_logits(cfg, tokens, "profile '" + mf.profile + "'");
  const int64_t T = lb.dim(0), V = lb.dim(1);
  int64_t agree = 0;
  double kl_sum = 0, kl_max = 0, nll_b = 0, nll_q = 0;
  for (int64_t t = 0; t < T; ++t) {
    const float* a = lb.data<float>() + t * V;
    const float* b = lq.data<float>() + t * V;
    agree += std::max_element(a, a + V) - a == std::max_element(b, b + V) - b;
    auto pa = log_probs(a, V), pb = log_probs(b, V);
    double kl = 0;
    for (int64_t i = 0; i < V; ++i) kl += std::exp(pa[static_cast<size_t>(i)]) * (pa[static_cast<size_t>(i)] - pb[static_cast<size_t>(i)]);
    kl_sum += kl;
    kl_max = std::max(kl_max, kl);
    if (t + 1 < T) {
      nll_b -= pa[static_cast<size_t>(tokens[static_cast<size_t>(t + 1)])];
      nll_q -= pb[static_cast<size_t>(tokens[static_cast<size_t>(t + 1)])];
    }
  }
  const double ppl_b = std::exp(nll_b / double(T - 1)), ppl_q = std::exp(nll_q / double(T - 1));
  nlohmann::json j{{"model", cfg.model},
                   {"text", text_path},
                   {"tokens", T},
                   {"baseline", baseline_profile},
                   {"profile", mf.profile},
                   {"top1_agreement", double(agree) / double(T)},
                   {"kl_mean", kl_sum / double(T)},
                   {"kl_max", kl_max},
                   {"perplexity_baseline", ppl_b},
                   {"perplexity_profile", ppl_q},
                   {"perplexity_delta", ppl_q - ppl_b}};
  std::printf("%-28s %-14s %7s %10s %10s %10s %10s %9s\n", "baseline", "profile", "tokens", "top-1 agr", "KL mean", "KL max",
              "ppl base", "ppl prof");
  std::printf("%-28s %-14s %7lld %10.4f %10.2e %10.2e %10.4f %9.4f\n", baseline_profile.c_str(), mf.profile.c_str(),
              static_cast<long long>(T), double(agree) / double(T), kl_sum / double(T), kl_max, ppl_b, ppl_q);
  std::ofstream(json_out) << j.dump(2) << "\n";
  return 0;
}

}  // namespace sy::cli
