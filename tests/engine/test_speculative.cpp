// Speculative decoding: greedy outputs identical with and without each
// drafter on every shared model at batch 1 and 8; with sampling, the token
// distribution matches the target's (two-sample chi-square); rejected
// drafts leave the prefix cache exactly as if they never existed.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "step_support.h"
#include "synth/synth_model.h"

namespace sy {
namespace {

using test::paged_config;
using test::set_drafter;

GenerationRequest req(std::vector<int> prompt, int n, float temperature = 0, uint64_t seed = 0) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = n;
  r.stop_at_eos = false;
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  return r;
}

// Prompts with repetition (prompt lookup finds matches) and without.
std::vector<GenerationRequest> batch8() {
  std::vector<std::vector<int>> prompts = {
      {1, 403, 407, 261, 378},
      {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 403, 407, 261, 378},
      {1, 360, 317, 455, 386, 370, 264, 334, 281, 422, 415, 46, 436, 472, 258, 360, 317, 455},
      {1, 300, 301, 302, 300, 301, 302, 300, 301},
      {1},
      {1, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396},
      {1, 267, 337, 410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385},
      {1, 403, 407, 261, 378, 403, 407}};
  std::vector<GenerationRequest> out;
  for (size_t i = 0; i < prompts.size(); ++i) out.push_back(req(prompts[i], 24 + static_cast<int>(i)));
  return out;
}

struct Drafter {
  std::string name;
  std::map<std::string, std::string> options;
  std::string draft_length = "fixed";  // "adaptive": the engine's speculation policy chooses per step
};

std::vector<Drafter> drafters() {
  return {{"prompt-lookup", {{"k", "4"}}},
          {"prompt-lookup", {{"k", "6"}, {"ngram_max", "2"}, {"adaptive", "true"}}},
          {"prompt-lookup", {{"k", "6"}}, "adaptive"},
          {"prompt-lookup", {{"k", "8"}, {"branches", "3"}}},  // trees (ABI 1.9)
          {"prompt-lookup", {{"k", "8"}, {"branches", "4"}, {"ngram_min", "2"}}, "adaptive"},
          {"lookahead", {{"n", "4"}}},  // the text's n-grams and the target's own predictions (observe, 1.9)
          {"lookahead", {{"n", "3"}, {"branches", "2"}}, "adaptive"},
          {"draft-model", {{"model", test::model_path("llama_mqa_tiny_random.onnx")}, {"k", "3"}}},  // low acceptance
          {"draft-model", {{"k", "4"}}},                                                           // the target itself: full acceptance
          {"draft-model", {{"k", "4"}}, "adaptive"}};
}

TEST(Speculative, GreedyOutputsIdenticalWithEveryDrafterOnEveryModel) {
  for (const char* model : {"stories260K", "llama_mha_tiny_random", "llama_mqa_tiny_random"}) {
    auto plain = Session::create(paged_config(model, "paged", {{"block_size", "4"}}));
    auto batch = batch8();
    auto expected = plain->generate(batch);
    for (auto d : drafters()) {
      if (d.name == "draft-model" && !d.options.count("model")) d.options["model"] = test::model_path(std::string(model) + ".onnx");
      auto cfg = paged_config(model, "paged", {{"block_size", "4"}});
      set_drafter(cfg, d.name, d.options, d.draft_length);
      auto s = Session::create(cfg);
      for (size_t i = 0; i < batch.size(); ++i)  // batch 1
        EXPECT_EQ(s->generate({batch[i]})[0].tokens, expected[i].tokens) << model << " " << d.name << " request " << i;
      auto together = s->generate(batch);  // batch 8
      for (size_t i = 0; i < batch.size(); ++i)
        EXPECT_EQ(together[i].tokens, expected[i].tokens) << model << " " << d.name << " batch request " << i;
      auto m = s->step_engine()->metrics();
      EXPECT_GT(m.spec_drafts, 0) << model << " " << d.name;
      if (d.options.count("branches") && d.draft_length == "fixed") {
        EXPECT_GT(m.spec_tree_drafts, 0) << model << ": no tree was verified";
      }
      std::printf("[ %s / %s, %s ] drafts %lld (trees %lld), proposed %lld, accepted %lld (rate %.3f, mean accepted length %.2f), declined %lld\n",
                  model, d.name.c_str(), d.draft_length.c_str(), static_cast<long long>(m.spec_drafts), static_cast<long long>(m.spec_tree_drafts),
                  static_cast<long long>(m.spec_draft_tokens), static_cast<long long>(m.spec_accepted_tokens), m.spec_acceptance_rate(),
                  m.spec_mean_accepted_length(), static_cast<long long>(m.spec_declined));
    }
  }
}

// On int8 and int4 weights the k+1 rows of a verification go through the
// quantized kernels' multi-token paths: each row must be the bits a plain
// decode step gives, so greedy outputs stay identical at batch 1 on every
// CPU. At batch 8 (decodes beside prompt chunks of 16 tokens and more) that
// holds where the quantized kernels keep a token's bits at every token count
// (VNNI; the fp32-activation paths use sgemm from 16 tokens on).
TEST(Speculative, GreedyOutputsIdenticalOnQuantizedWeights) {
  __builtin_cpu_init();
  const bool every_count = __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw");
  for (const char* scheme : {"int8", "int4"}) {
    auto quantized = [&] {
      auto cfg = paged_config("stories260K", "paged", {{"block_size", "4"}});
      cfg.plugins.push_back(PluginSpec{SY_QUANT_PLUGIN, std::nullopt, "test"});
      ComponentSelection q{"quantize", {}, "test: passes[0]"};
      q.options["scheme"] = RawOption{scheme, "test: scheme"};
      cfg.passes.insert(cfg.passes.begin(), q);
      return cfg;
    };
    auto plain = Session::create(quantized());
    auto batch = batch8();
    std::vector<std::vector<int>> alone;
    for (const auto& r : batch) alone.push_back(plain->generate({r})[0].tokens);
    for (auto d : std::vector<Drafter>{{"prompt-lookup", {{"k", "4"}}}, {"draft-model", {{"k", "5"}}}}) {
      if (d.name == "draft-model") d.options["model"] = test::model_path("stories260K.onnx");  // fp32 drafts, quantized verification
      auto cfg = quantized();
      set_drafter(cfg, d.name, d.options, d.draft_length);
      auto s = Session::create(cfg);
      for (size_t i = 0; i < batch.size(); ++i)
        EXPECT_EQ(s->generate({batch[i]})[0].tokens, alone[i]) << scheme << " " << d.name << " request " << i;
      if (every_count) {
        auto together = s->generate(batch);
        for (size_t i = 0; i < batch.size(); ++i) EXPECT_EQ(together[i].tokens, alone[i]) << scheme << " " << d.name << " batch request " << i;
      }
      auto m = s->step_engine()->metrics();
      EXPECT_GT(m.spec_accepted_tokens, 0) << scheme << " " << d.name;
      std::printf("[ %s / %s ] accepted %lld of %lld drafted; batch 8 %s\n", scheme, d.name.c_str(),
                  static_cast<long long>(m.spec_accepted_tokens), static_cast<long long>(m.spec_draft_tokens),
                  every_count ? "checked too (VNNI)" : "not checked (no VNNI on this CPU)");
    }
  }
}

// The LM head split off (what the heads drafter and sy_lm_head score with)
// is the model's own: the hidden states of a prompt through it give the
// prompt's logits, on float32, int8 and int4 weights (the quantized head's
// kernel and packed weights, shared with the model's graph).
TEST(LmHead, ProjectsHiddenStatesToTheModelsOwnLogitsOnEveryWeightScheme) {
  const std::vector<int> prompt{1, 403, 407, 261, 378, 429, 260, 354};
  for (const char* scheme : {"none", "int8", "int4"}) {
    auto cfg = paged_config("stories260K", "paged", {{"block_size", "16"}});
    if (std::string(scheme) != "none") {
      cfg.plugins.push_back(PluginSpec{SY_QUANT_PLUGIN, std::nullopt, "test"});
      ComponentSelection q{"quantize", {}, "test: passes[0]"};
      q.options["scheme"] = RawOption{scheme, "test: scheme"};
      cfg.passes.insert(cfg.passes.begin(), q);
    }
    auto s = Session::create(cfg);
    LmHead& head = s->lm_head();
    EXPECT_EQ(head.hidden_size(), 64) << scheme;
    EXPECT_EQ(head.vocab_size(), 512) << scheme;
    const Tensor hidden = s->step_engine()->prompt_hidden_states(prompt);
    const Tensor want = s->step_engine()->prompt_logits(prompt);
    const Tensor got = head.project(hidden);
    ASSERT_EQ(got.shape().str(), want.shape().str()) << scheme;
    float worst = 0, largest = 0;
    for (int64_t i = 0; i < got.numel(); ++i) {
      worst = std::max(worst, std::abs(got.data<float>()[i] - want.data<float>()[i]));
      largest = std::max(largest, std::abs(want.data<float>()[i]));
    }
    EXPECT_LE(worst, 1e-5f * largest) << scheme << ": the split-off head's logits differ from the model's";
    EXPECT_GT(largest, 1.0f) << scheme;
    // A row of the wrong size is refused, naming both sizes.
    try {
      head.project(Tensor::empty(DType::F32, Shape{1, 65}));
      ADD_FAILURE() << "a row of 65 values was projected";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("rows of 65 values; the model's hidden size is 64"), std::string::npos) << e.what();
    }
  }
}

// The penalties and filters are part of the distribution the verifier
// judges drafts against: each position counts the drafts before it as
// generated, so greedy outputs stay identical with every drafter.
TEST(Speculative, GreedyOutputsIdenticalWithPenalties) {
  auto penalized = [](GenerationRequest r) {
    r.sampling.presence_penalty = 0.4f;
    r.sampling.frequency_penalty = 0.6f;
    r.sampling.repetition_penalty = 1.3f;
    return r;
  };
  auto plain = Session::create(paged_config("stories260K", "paged", {{"block_size", "4"}}));
  std::vector<GenerationRequest> batch;
  for (const auto& r : batch8()) batch.push_back(penalized(r));
  auto expected = plain->generate(batch);
  auto unpenalized = plain->generate(batch8());
  int changed = 0;
  for (size_t i = 0; i < batch.size(); ++i) changed += expected[i].tokens != unpenalized[i].tokens;
  EXPECT_GT(changed, 4) << "the penalties should change most of these continuations";
  for (auto d : drafters()) {
    if (d.name == "draft-model" && !d.options.count("model")) d.options["model"] = test::model_path("stories260K.onnx");
    auto cfg = paged_config("stories260K", "paged", {{"block_size", "4"}});
    set_drafter(cfg, d.name, d.options);
    auto s = Session::create(cfg);
    auto together = s->generate(batch);
    for (size_t i = 0; i < batch.size(); ++i) EXPECT_EQ(together[i].tokens, expected[i].tokens) << d.name << " request " << i;
    auto m = s->step_engine()->metrics();
    EXPECT_GT(m.spec_accepted_tokens, 0) << d.name;
    std::printf("[ penalties / %s ] drafts %lld, proposed %lld, accepted %lld\n", d.name.c_str(), static_cast<long long>(m.spec_drafts),
                static_cast<long long>(m.spec_draft_tokens), static_cast<long long>(m.spec_accepted_tokens));
  }
}

// Pearson's two-sample chi-square over the categories both samples hit at
// least 5 times (the rest pooled); returns {statistic, degrees of freedom}.
std::pair<double, int> chi_square(const std::map<int, int>& a, const std::map<int, int>& b, int na, int nb) {
  std::map<int, std::pair<int, int>> cells;
  std::pair<int, int> pooled{0, 0};
  for (const auto& [k, v] : a) cells[k].first = v;
  for (const auto& [k, v] : b) cells[k].second = v;
  std::vector<std::pair<int, int>> used;
  for (const auto& [k, c] : cells) {
    if (c.first + c.second >= 10) used.push_back(c);
    else pooled = {pooled.first + c.first, pooled.second + c.second};
  }
  if (pooled.first + pooled.second > 0) used.push_back(pooled);
  double chi = 0;
  double ka = std::sqrt(static_cast<double>(nb) / na), kb = std::sqrt(static_cast<double>(na) / nb);
  for (const auto& [x, y] : used) chi += std::pow(ka * x - kb * y, 2) / (x + y);
  return {chi, static_cast<int>(used.size()) - 1};
}

// Upper 0.1% point of chi-square with df degrees of freedom (Wilson-Hilferty).
double chi_square_critical_001(int df) {
  double z = 3.0902, h = 2.0 / (9.0 * df);
  return df * std::pow(1 - h + z * std::sqrt(h), 3);
}

TEST(Speculative, SamplingPreservesTheTargetDistribution) {
  // Independent samples (different seeds) with and without a drafter; the
  // marginal distributions of generated tokens 3 and 5, which verification
  // steps produce, must agree at the 0.1% level.
  const int N = 2000;
  std::vector<int> prompt = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 403, 407, 261, 378};
  auto sample = [&](const std::optional<Drafter>& d, uint64_t seed_base, bool penalties = false) {
    auto cfg = paged_config("stories260K", "paged", {{"block_size", "4"}});
    cfg.max_seqs = 256;
    cfg.max_batch_tokens = 4096;
    if (d) set_drafter(cfg, d->name, d->options);
    auto s = Session::create(cfg);
    std::vector<GenerationRequest> reqs;
    for (int i = 0; i < N; ++i) {
      reqs.push_back(req(prompt, 6, 1.0f, seed_base + static_cast<uint64_t>(i) * 7919));
      if (penalties) {
        reqs.back().sampling.presence_penalty = 0.8f;
        reqs.back().sampling.frequency_penalty = 0.5f;
        reqs.back().sampling.repetition_penalty = 1.2f;
        reqs.back().sampling.top_k = 40;
        reqs.back().sampling.min_p = 0.02f;
      }
    }
    std::vector<std::map<int, int>> hist(2);
    for (const auto& r : s->generate(reqs)) {
      ++hist[0][r.tokens[2]];
      ++hist[1][r.tokens[4]];
    }
    auto m = s->step_engine()->metrics();
    if (d) {
      EXPECT_GT(m.spec_draft_tokens, N) << d->name;
      EXPECT_LT(m.spec_accepted_tokens, m.spec_draft_tokens) << d->name << ": some drafts must be rejected to test anything";
      EXPECT_GT(m.spec_accepted_tokens, 0) << d->name;
      if (d->options.count("branches")) {
        // (Where every earlier occurrence continues alike, the proposal is a chain.)
        EXPECT_GT(m.spec_tree_drafts, N / 20) << "trees of drafts must be verified, with the target's own samples picking the branch";
      }
      std::printf("[ %s ] sampled: %lld drafts (%lld trees), acceptance rate %.3f\n", d->name.c_str(), static_cast<long long>(m.spec_drafts),
                  static_cast<long long>(m.spec_tree_drafts), m.spec_acceptance_rate());
    }
    return hist;
  };
  auto target = sample(std::nullopt, 1000);
  for (const auto& d : {Drafter{"prompt-lookup", {{"k", "3"}}}, Drafter{"prompt-lookup", {{"k", "6"}, {"branches", "3"}}},
                        Drafter{"draft-model", {{"model", test::model_path("llama_mqa_tiny_random.onnx")}, {"k", "2"}}}}) {
    auto spec = sample(d, 500000);
    for (int pos = 0; pos < 2; ++pos) {
      auto [chi, df] = chi_square(target[static_cast<size_t>(pos)], spec[static_cast<size_t>(pos)], N, N);
      double crit = chi_square_critical_001(df);
      std::printf("[ %s ] token %d: chi-square %.1f on %d degrees of freedom (0.1%% critical value %.1f)\n", d.name.c_str(),
                  pos == 0 ? 3 : 5, chi, df, crit);
      EXPECT_GE(df, 3);
      EXPECT_LT(chi, crit) << d.name << " changes the distribution of generated token " << (pos == 0 ? 3 : 5);
    }
  }
  // With penalties, top-k and min-p as well: the verifier applies them too.
  auto target_penalized = sample(std::nullopt, 2000, true);
  auto spec_penalized = sample(Drafter{"prompt-lookup", {{"k", "3"}}}, 700000, true);
  for (int pos = 0; pos < 2; ++pos) {
    auto [chi, df] = chi_square(target_penalized[static_cast<size_t>(pos)], spec_penalized[static_cast<size_t>(pos)], N, N);
    double crit = chi_square_critical_001(df);
    std::printf("[ penalties, top-k, min-p / prompt-lookup ] token %d: chi-square %.1f on %d degrees of freedom (critical %.1f)\n",
                pos == 0 ? 3 : 5, chi, df, crit);
    EXPECT_GE(df, 3);
    EXPECT_LT(chi, crit);
  }
}

TEST(Speculative, PluginDrafterThatSamplesKeepsTheDistributionAndReportingItsDraftProbabilitiesRaisesAcceptance) {
  // A plugin drafter that draws its proposals at random, with its draft
  // distributions reported (propose_sampled) and without them (taken as
  // point masses, which is exact too but accepts less). Temperature 1.5,
  // top-k and top-p are all on (a flat enough target that the acceptance
  // difference shows), so the verifier's filtered target distribution is
  // what the outputs must follow.
  const int N = 2000;
  std::vector<int> prompt = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 403, 407, 261, 378};
  auto sample = [&](const std::string& drafter, uint64_t seed_base, double* acceptance) {
    auto cfg = paged_config("stories260K", "paged", {{"block_size", "4"}});
    cfg.plugins.push_back(PluginSpec{SY_SAMPLING_DRAFTER_PLUGIN, std::nullopt, "test"});
    cfg.max_seqs = 256;
    cfg.max_batch_tokens = 4096;
    if (!drafter.empty()) set_drafter(cfg, drafter, {{"k", "3"}, {"mix", "0.6"}});
    auto s = Session::create(cfg);
    std::vector<GenerationRequest> reqs;
    for (int i = 0; i < N; ++i) {
      reqs.push_back(req(prompt, 6, 1.5f, seed_base + static_cast<uint64_t>(i) * 7919));
      reqs.back().sampling.top_k = 40;
      reqs.back().sampling.top_p = 0.95f;
    }
    std::vector<std::map<int, int>> hist(2);
    for (const auto& r : s->generate(reqs)) {
      ++hist[0][r.tokens[2]];
      ++hist[1][r.tokens[4]];
    }
    auto m = s->step_engine()->metrics();
    if (!drafter.empty()) {
      EXPECT_GT(m.spec_draft_tokens, N) << drafter;
      EXPECT_GT(m.spec_accepted_tokens, 0) << drafter;
      EXPECT_LT(m.spec_accepted_tokens, m.spec_draft_tokens) << drafter;
      EXPECT_EQ(m.spec_invalid_drafts, 0) << drafter << ": " << m.spec_last_invalid;
      *acceptance = m.spec_acceptance_rate();
      std::printf("[ %s ] temperature 1.5, top-k 40, top-p 0.95: %lld draft tokens, acceptance rate %.3f\n", drafter.c_str(),
                  static_cast<long long>(m.spec_draft_tokens), *acceptance);
    }
    return hist;
  };
  double unused = 0, reported = 0, unreported = 0;
  auto target = sample("", 3000, &unused);
  for (const auto& [name, rate] : {std::pair<std::string, double*>{"sampled-lookup", &reported},
                                   std::pair<std::string, double*>{"sampled-lookup-unreported", &unreported}}) {
    auto spec = sample(name, name == "sampled-lookup" ? 900000 : 1900000, rate);
    for (int pos = 0; pos < 2; ++pos) {
      auto [chi, df] = chi_square(target[static_cast<size_t>(pos)], spec[static_cast<size_t>(pos)], N, N);
      double crit = chi_square_critical_001(df);
      std::printf("[ %s ] token %d: chi-square %.1f on %d degrees of freedom (0.1%% critical value %.1f)\n", name.c_str(),
                  pos == 0 ? 3 : 5, chi, df, crit);
      EXPECT_GE(df, 3);
      EXPECT_LT(chi, crit) << name << " changes the distribution of generated token " << (pos == 0 ? 3 : 5);
    }
  }
  // min(1, p/q) >= p(d) for every draft: reporting q can only accept more.
  EXPECT_GT(reported, unreported + 0.02) << "the reported draft distributions should raise acceptance";
}

void old_abi_drafter_keeps_greedy_outputs(const char* plugin) {
  auto plain = Session::create(paged_config("stories260K", "paged", {{"block_size", "4"}}));
  auto cfg = paged_config("stories260K", "paged", {{"block_size", "4"}});
  cfg.plugins.push_back(PluginSpec{plugin, std::nullopt, "test"});
  set_drafter(cfg, "bigram-1.0", {{"k", "3"}});
  auto spec = Session::create(cfg);
  auto batch = batch8();
  auto expected = plain->generate(batch);
  auto got = spec->generate(batch);
  for (size_t i = 0; i < batch.size(); ++i) EXPECT_EQ(got[i].tokens, expected[i].tokens) << "request " << i;
  auto m = spec->step_engine()->metrics();
  EXPECT_GT(m.spec_draft_tokens, 0);
  EXPECT_GT(m.spec_accepted_tokens, 0);
}

// A tree of drafts (ABI 1.9): the continuations of several earlier
// occurrences, verified in one step. On a prompt that repeats with
// variations, trees keep more tokens a step than the chain of the latest
// occurrence alone, the outputs stay the plain decode's, and the kept
// path's KV (moved to consecutive slots) serves the steps after it: a
// follow-up request with the whole text finds every full block cached.
TEST(Speculative, TreesOfDraftsKeepMoreTokensAStepAndTheOutputsExact) {
  // Two continuations of "403 407 261": 378 432 ... and 376 298 ...
  const std::vector<int> prompt = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 403, 407, 261, 376, 298, 315, 403, 407, 261};
  auto plain = Session::create(paged_config("stories260K", "prefix-caching", {{"block_size", "4"}}));
  const auto expect = plain->generate({req(prompt, 40)})[0].tokens;
  double chain_length = 0, tree_length = 0;
  for (const char* branches : {"1", "3"}) {
    auto cfg = paged_config("stories260K", "prefix-caching", {{"block_size", "4"}});
    set_drafter(cfg, "prompt-lookup", {{"k", "6"}, {"branches", branches}});
    auto s = Session::create(cfg);
    const auto got = s->generate({req(prompt, 40)})[0];
    EXPECT_EQ(got.tokens, expect) << branches << " branches";
    const auto m = s->step_engine()->metrics();
    (std::string(branches) == "1" ? chain_length : tree_length) = m.spec_mean_accepted_length();
    if (std::string(branches) == "3") {
      EXPECT_GT(m.spec_tree_drafts, 0);
      std::vector<int> whole = prompt;
      whole.insert(whole.end(), got.tokens.begin(), got.tokens.end());
      const auto follow = s->generate({req(whole, 4)})[0];
      EXPECT_EQ(follow.cached_tokens, static_cast<int32_t>((whole.size() - 1) / 4 * 4)) << "the kept paths' KV is what a prompt of them computes";
      EXPECT_EQ(follow.tokens, plain->generate({req(whole, 4)})[0].tokens);
    }
  }
  std::printf("[ mean tokens a step: chain %.2f, tree of 3 branches %.2f ]\n", chain_length, tree_length);
  EXPECT_GE(tree_length, chain_length);
}

TEST(Speculative, DrafterBuiltAgainstTheAbi10HeaderLoadsAndKeepsGreedyOutputs) {
  // Its descriptor ends before propose_sampled (1.2): the host must see
  // that from struct_size and call propose.
  old_abi_drafter_keeps_greedy_outputs(SY_ABI_1_0_DRAFTER_PLUGIN);
}

TEST(Speculative, DrafterBuiltAgainstTheAbi13HeaderLoadsAndKeepsGreedyOutputs) {
  // Its plugin description ends before the logits-processor list (1.4).
  old_abi_drafter_keeps_greedy_outputs(SY_ABI_1_3_DRAFTER_PLUGIN);
}

TEST(Speculative, DraftModelWithAnotherVocabularyIsRefused) {
  // Verification reads the draft's distribution at the target's token ids:
  // a draft vocabulary of another size would be read out of bounds.
  SynthConfig c = synth_preset("tiny");
  c.vocab = 300;
  test::TempDir dir;
  const std::string path = (dir.path / "draft_vocab300.onnx").string();
  write_synth_model(c, path, 3);
  auto cfg = paged_config("stories260K", "paged", {{"block_size", "4"}});
  set_drafter(cfg, "draft-model", {{"model", path}, {"k", "2"}});
  EXPECT_HAS(test::error_of([&] { Session::create(cfg); }), "the draft model's vocabulary has 300 tokens, the target's 512");
}

TEST(Speculative, RollbackLeavesThePrefixCacheAsIfRejectedTokensNeverExisted) {
  auto cfg = paged_config("stories260K", "prefix-caching", {{"block_size", "4"}});
  set_drafter(cfg, "draft-model", {{"model", test::model_path("llama_mqa_tiny_random.onnx")}, {"k", "3"}});
  auto spec = Session::create(cfg);
  auto plain = Session::create(paged_config("stories260K", "prefix-caching", {{"block_size", "4"}}));
  auto r = req({1, 403, 407, 261, 378}, 41);
  auto a = spec->generate({r})[0];
  auto b = plain->generate({r})[0];
  ASSERT_EQ(a.tokens, b.tokens);
  auto m = spec->step_engine()->metrics();
  ASSERT_GT(m.spec_draft_tokens - m.spec_accepted_tokens, 10) << "the test needs rejected drafts";
  // Every full block of prompt + output is registered under its true
  // tokens: a follow-up with the whole text reuses all of them, in both.
  std::vector<int> whole = r.prompt;
  whole.insert(whole.end(), a.tokens.begin(), a.tokens.end());  // 46 tokens: 11 full blocks
  auto follow = req(whole, 5);
  auto fa = spec->generate({follow})[0], fb = plain->generate({follow})[0];
  EXPECT_EQ(fa.cached_tokens, 44);
  EXPECT_EQ(fa.cached_tokens, fb.cached_tokens);
  EXPECT_EQ(fa.tokens, fb.tokens);
  // And the blocks are back in the free pool: nothing leaked by rollbacks.
  auto stats = spec->step_engine()->cache().stats();
  EXPECT_EQ(stats.free_blocks, stats.total_blocks);
}

}  // namespace
}  // namespace sy
