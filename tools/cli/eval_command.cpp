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

// An engine that can compute every position's logits (the step engine).
std::unique_ptr<Engine> open_stepped(const EngineOptions& options, const std::string& label) {
  auto engine = Engine::open(options);
  SY_CHECK(engine->has_step_engine(), label << ": eval runs the step engine; select a cache manager ('cache:') and the "
                                               "attention-fusion pass in the profile");
  return engine;
}

}  // namespace

int cmd_eval(const std::vector<std::string>& args) {
  EngineFlags mf;
  std::string baseline_profile, text_path, tokenizer_path, json_out = "eval.json";
  int64_t max_tokens = 512, ctx = 0;
  po::options_description d("eval options");
  d.add_options()("help,h", "show this help");
  mf.add(d);
  d.add_options()("baseline", po::value(&baseline_profile), "baseline profile (default: the profile without its 'quantize' pass)")(
      "text", po::value(&text_path)->required(), "text file to evaluate on")(
      "tokenizer,t", po::value(&tokenizer_path), "llama2.c tokenizer (default: the manifest's, else beside the model)")(
      "max-tokens", po::value(&max_tokens)->default_value(512), "evaluate the first N tokens of the text")(
      "ctx", po::value(&ctx)->default_value(0),
      "windows of N tokens, each scored on its second half (llama-perplexity's -c N); 0: one window, every position")(
      "out", po::value(&json_out)->default_value("eval.json"), "JSON output");
  auto p = parse(args, d, "usage: switchyard eval --manifest F --profile P --text FILE [--baseline P0] [--out eval.json]");
  if (p.help) return 0;
  SY_CHECK(!mf.manifest.empty(), "eval compares two profiles of a manifest: give --manifest");
  EngineOptions options = mf.options();
  if (!tokenizer_path.empty()) options.tokenizer = tokenizer_path;
  EngineOptions base = options;
  if (!baseline_profile.empty()) {
    base.profile = baseline_profile;
  } else {
    base.without_passes = {"quantize"};
    baseline_profile = mf.profile + " without quantize";
  }
  std::ifstream in(text_path);
  SY_CHECK(in, "cannot read the text " << text_path);
  std::stringstream ss;
  ss << in.rdbuf();
  // The baseline first, then the profile: one engine in memory at a time.
  // The tokenizer: --tokenizer, else the manifest's, else the model folder's.
  std::vector<int> tokens;
  std::string model;
  int64_t V = 0;
  // Windows (begin, length, first scored position): the whole text, or
  // llama-perplexity's chunks of --ctx tokens scored on their second half.
  struct Window {
    int64_t begin, length, first;
  };
  std::vector<Window> windows;
  std::vector<std::vector<float>> lb;
  auto window_tokens = [&](const Window& w) {
    return std::vector<int>(tokens.begin() + w.begin, tokens.begin() + w.begin + w.length);
  };
  {
    auto engine = open_stepped(base, "baseline '" + baseline_profile + "'");
    model = engine->model_path();
    auto tok = engine->folder().tokenizer();
    tokens = tok->encode(ss.str(), true);
    if (static_cast<int64_t>(tokens.size()) > max_tokens) tokens.resize(static_cast<size_t>(max_tokens));
    SY_CHECK(tokens.size() >= 2, text_path << ": the text has fewer than two tokens");
    const int64_t n = static_cast<int64_t>(tokens.size());
    if (ctx > 0) {
      SY_CHECK(ctx >= 4 && n >= ctx, "--ctx " << ctx << ": needs at least one window of " << ctx << " tokens (the text has " << n << ")");
      for (int64_t b = 0; b + ctx <= n; b += ctx) windows.push_back({b, ctx, ctx / 2});
    } else {
      windows.push_back({0, n, 0});
    }
    V = engine->vocab_size();
    for (const Window& w : windows) lb.push_back(engine->prompt_logits(window_tokens(w)));
  }
  auto profile_engine = open_stepped(options, "profile '" + mf.profile + "'");
  int64_t agree = 0, scored = 0, predicted = 0;
  double kl_sum = 0, kl_max = 0, nll_b = 0, nll_q = 0;
  for (size_t wi = 0; wi < windows.size(); ++wi) {
    const Window& w = windows[wi];
    const std::vector<float> lq = profile_engine->prompt_logits(window_tokens(w));
    SY_CHECK(lb[wi].size() == lq.size() && static_cast<int64_t>(lq.size()) == w.length * V, "the two profiles' logits differ in shape");
    for (int64_t t = w.first; t < w.length; ++t) {
      const float* a = lb[wi].data() + t * V;
      const float* b = lq.data() + t * V;
      agree += std::max_element(a, a + V) - a == std::max_element(b, b + V) - b;
      ++scored;
      auto pa = log_probs(a, V), pb = log_probs(b, V);
      double kl = 0;
      for (int64_t i = 0; i < V; ++i) kl += std::exp(pa[static_cast<size_t>(i)]) * (pa[static_cast<size_t>(i)] - pb[static_cast<size_t>(i)]);
      kl_sum += kl;
      kl_max = std::max(kl_max, kl);
      if (t + 1 < w.length) {
        const auto next = static_cast<size_t>(tokens[static_cast<size_t>(w.begin + t + 1)]);
        nll_b -= pa[next];
        nll_q -= pb[next];
        ++predicted;
      }
    }
  }
  const int64_t T = static_cast<int64_t>(tokens.size());
  const double ppl_b = std::exp(nll_b / double(predicted)), ppl_q = std::exp(nll_q / double(predicted));
  nlohmann::json j{{"model", model},
                   {"text", text_path},
                   {"tokens", T},
                   {"ctx", ctx},
                   {"predicted_tokens", predicted},
                   {"baseline", baseline_profile},
                   {"profile", mf.profile},
                   {"top1_agreement", double(agree) / double(scored)},
                   {"kl_mean", kl_sum / double(scored)},
                   {"kl_max", kl_max},
                   {"perplexity_baseline", ppl_b},
                   {"perplexity_profile", ppl_q},
                   {"perplexity_delta", ppl_q - ppl_b}};
  std::printf("%-28s %-14s %7s %10s %10s %10s %10s %9s\n", "baseline", "profile", "tokens", "top-1 agr", "KL mean", "KL max",
              "ppl base", "ppl prof");
  std::printf("%-28s %-14s %7lld %10.4f %10.2e %10.2e %10.4f %9.4f\n", baseline_profile.c_str(), mf.profile.c_str(),
              static_cast<long long>(T), double(agree) / double(scored), kl_sum / double(scored), kl_max, ppl_b, ppl_q);
  std::ofstream(json_out) << j.dump(2) << "\n";
  return 0;
}

}  // namespace sy::cli
