// Test drafters that draw their proposals at random, built with the SDK's
// C++ drafter builder:
//   sampled-lookup             each proposal is drawn from
//                              q = mix * [the token that followed the latest
//                              earlier occurrence of the last token] +
//                              (1 - mix) * uniform, and q is reported
//                              (propose_sampled);
//   sampled-lookup-unreported  the same draws, q not reported (propose only):
//                              verification takes them as point masses.
// Both must keep the target's output distribution; reporting q must raise
// the acceptance rate.
#include <switchyard/plugin.hpp>

#include <random>
#include <vector>

namespace {

using sy::plugin::Options;
using sy::plugin::Tokens;

class SampledLookup {
 public:
  explicit SampledLookup(const Options& o)
      : mix_(o.get_float("mix")), vocab_(o.get_int("vocab")), seed_(static_cast<uint64_t>(o.get_int("seed"))) {}

  std::vector<int32_t> propose(uint64_t seq, const Tokens& t, int32_t k) { return draw(seq, t, k, 0, vocab_, nullptr); }

 protected:
  // Draws k proposals; with probs, writes each one's distribution.
  std::vector<int32_t> draw(uint64_t seq, const Tokens& t, int32_t k, uint64_t request_seed, int64_t vocab, float* probs) {
    std::vector<int32_t> seqn(t.begin(), t.end());
    std::mt19937_64 rng(seed_ ^ (request_seed * 0x9e3779b97f4a7c15ull) ^ (seq << 20) ^ static_cast<uint64_t>(t.size));
    std::uniform_real_distribution<double> u(0.0, 1.0);
    std::vector<int32_t> out;
    for (int32_t i = 0; i < k; ++i) {
      int32_t cand = -1;
      for (auto j = static_cast<int64_t>(seqn.size()) - 2; j >= 0; --j)
        if (seqn[static_cast<size_t>(j)] == seqn.back()) {
          cand = seqn[static_cast<size_t>(j) + 1];
          break;
        }
      const double m = cand >= 0 && cand < vocab ? mix_ : 0.0;
      int32_t tok = u(rng) < m ? cand : static_cast<int32_t>(std::uniform_int_distribution<int64_t>(0, vocab - 1)(rng));
      if (probs) {
        float* row = probs + static_cast<int64_t>(i) * vocab;
        for (int64_t v = 0; v < vocab; ++v) row[v] = static_cast<float>((1.0 - m) / static_cast<double>(vocab));
        if (m > 0) row[cand] += static_cast<float>(m);
      }
      out.push_back(tok);
      seqn.push_back(tok);
    }
    return out;
  }

  double mix_;
  int64_t vocab_;
  uint64_t seed_;
};

class SampledLookupReported : public SampledLookup {
 public:
  using SampledLookup::SampledLookup;
  std::vector<int32_t> propose_sampled(uint64_t seq, const Tokens& t, int32_t k, const sy_draft_sampling& s, int64_t vocab,
                                       float* probs) {
    return draw(seq, t, k, s.seed, vocab, probs);
  }
};

}  // namespace

SY_PLUGIN(builder) {
  using sy::plugin::option_float;
  using sy::plugin::option_int;
  builder.info("sampling-drafter", "1.0.0", "test drafters that sample their proposals");
  const std::vector<sy::plugin::OptionSpec> options = {option_float("mix", "0.7", "probability of the lookup candidate"),
                                                       option_int("vocab", "512", "vocabulary size (propose only)"),
                                                       option_int("seed", "1", "drafter seed"), option_int("k", "3", "tokens per step")};
  builder.drafter<SampledLookupReported>("sampled-lookup", "1.0.0", "random lookup drafts, distributions reported", options);
  builder.drafter<SampledLookup>("sampled-lookup-unreported", "1.0.0", "random lookup drafts, distributions not reported", options);
}
