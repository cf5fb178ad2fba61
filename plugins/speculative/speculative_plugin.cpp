// Drafters behind the drafter ABI.
//
//   prompt-lookup  "inference with reference": find the latest earlier
//                  occurrence of the sequence's last n tokens (n from
//                  ngram_max down to ngram_min) in the prompt and generated
//                  text, and propose the k tokens that followed it (a copy
//                  that reaches the end continues from its own proposals,
//                  so a repetition is proposed k tokens deep); an
//                  n-gram index per sequence, grown as tokens arrive. With
//                  adaptive, k shrinks after a rejection and grows after a
//                  fully accepted draft (between 1 and k).
//
// (The draft-model drafter runs a second model and lives in the engine,
// which owns models and their KV caches: see core/engine/drafter.cpp.)
#include <switchyard/plugin.hpp>

#include <algorithm>
#include <unordered_map>
#include <vector>

namespace {

using sy::plugin::Options;
using sy::plugin::Tokens;

// Per sequence, for each n-gram length g, the latest start of every n-gram
// whose continuation exists, keyed by the n-gram's hash: appending tokens
// adds the n-grams they complete, so a proposal costs O(ngram_max) lookups
// however long the sequence is (instead of a rescan of it every step).
class NgramIndex {
 public:
  NgramIndex(int32_t gmin, int32_t gmax) : gmin_(gmin), gmax_(gmax), latest_(static_cast<size_t>(gmax - gmin + 1)) {}

  // Brings the index up to t (the sequence so far: it only grows, but a
  // sequence that changed under us is re-indexed from scratch).
  void update(const Tokens& t) {
    if (t.size < indexed_ || (indexed_ > 0 && t[indexed_ - 1] != last_)) {
      for (auto& m : latest_) m.clear();
      indexed_ = 0;
    }
    // The n-gram [s, s + g) gets its continuation when the sequence reaches
    // s + g + 1 tokens: index every one that did since the last call.
    for (int32_t g = gmin_; g <= gmax_; ++g) {
      auto& m = latest_[static_cast<size_t>(g - gmin_)];
      for (int32_t s = std::max(0, indexed_ - g); s + g + 1 <= t.size; ++s) m[hash(t.data + s, g)] = s;
    }
    indexed_ = t.size;
    if (t.size > 0) last_ = t[t.size - 1];
  }
  // The latest earlier start of the sequence's last g tokens, or -1.
  int32_t find(const Tokens& t, int32_t g) const {
    const auto& m = latest_[static_cast<size_t>(g - gmin_)];
    auto it = m.find(hash(t.data + t.size - g, g));
    if (it == m.end() || !std::equal(t.data + t.size - g, t.data + t.size, t.data + it->second)) return -1;
    return it->second;
  }

 private:
  static uint64_t hash(const int32_t* p, int32_t n) {
    uint64_t h = 1469598103934665603ull;
    for (int32_t i = 0; i < n; ++i) h = (h ^ static_cast<uint32_t>(p[i])) * 1099511628211ull;
    return h;
  }
  int32_t gmin_, gmax_;
  std::vector<std::unordered_map<uint64_t, int32_t>> latest_;  // per g: n-gram hash -> latest start
  int32_t indexed_ = 0;
  int32_t last_ = 0;
};

class PromptLookup {
 public:
  explicit PromptLookup(const Options& o)
      : ngram_min_(static_cast<int32_t>(o.get_int("ngram_min"))), ngram_max_(static_cast<int32_t>(o.get_int("ngram_max"))),
        k_(static_cast<int32_t>(o.get_int("k"))), adaptive_(o.get_bool("adaptive")) {
    if (ngram_min_ < 1 || ngram_max_ < ngram_min_ || k_ < 1)
      throw sy::plugin::Error("need 1 <= ngram_min <= ngram_max and k >= 1", SY_INVALID_ARGUMENT);
  }

  // The continuation of the latest earlier occurrence of the last g tokens,
  // longest g first.
  std::vector<int32_t> propose(uint64_t seq, const Tokens& t, int32_t k) {
    const int32_t n = t.size;
    const int32_t want = std::min(k, adaptive_ && k_of_.count(seq) ? k_of_[seq] : k_);
    NgramIndex& index = index_.try_emplace(seq, ngram_min_, ngram_max_).first->second;
    index.update(t);
    for (int32_t g = std::min(ngram_max_, n - 1); g >= ngram_min_; --g) {
      const int32_t start = index.find(t, g);
      if (start < 0) continue;
      // Copy what followed the match. A copy that reaches the end of the
      // text continues from its own proposals (an overlapping copy, as in
      // LZ77): a match p tokens back proposes the period-p repetition, not
      // just the p tokens before the end.
      const int32_t from = start + g;
      std::vector<int32_t> out;
      for (int32_t i = 0; i < want; ++i) {
        const int32_t at = from + i;
        out.push_back(at < n ? t[at] : out[static_cast<size_t>(at - n)]);
      }
      return out;
    }
    return {};
  }

  void accepted(uint64_t seq, int32_t proposed, int32_t accepted_count) {
    if (!adaptive_ || proposed == 0) return;
    int32_t& k = k_of_.emplace(seq, k_).first->second;
    if (accepted_count == proposed) k = std::min(k_, k + 1);
    else if (accepted_count == 0) k = std::max(1, k - 1);
  }

  void release(uint64_t seq) {
    k_of_.erase(seq);
    index_.erase(seq);
  }

 private:
  int32_t ngram_min_, ngram_max_, k_;
  bool adaptive_;
  std::unordered_map<uint64_t, int32_t> k_of_;  // adaptive k per sequence
  std::unordered_map<uint64_t, NgramIndex> index_;
};

}  // namespace

SY_PLUGIN(builder) {
  using sy::plugin::option_bool;
  using sy::plugin::option_int;
  builder.info("switchyard-speculative", "1.0.0", "speculative drafters: prompt lookup");
  builder.drafter<PromptLookup>(
      "prompt-lookup", "1.0.0", "propose the continuation of the latest n-gram match in the prompt and generated text",
      {option_int("ngram_min", "1", "shortest n-gram to match"), option_int("ngram_max", "3", "longest n-gram to match"),
       option_int("k", "4", "tokens proposed per step (the most, with adaptive)"),
       option_bool("adaptive", "false", "shrink k after rejections, grow it after full acceptance")});
}
