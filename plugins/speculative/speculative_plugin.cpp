// Drafters behind the drafter ABI.
//
//   prompt-lookup  "inference with reference": find the latest earlier
//                  occurrence of the sequence's last n tokens (n from
//                  ngram_max down to ngram_min) in the prompt and generated
//                  text, and propose the k tokens that followed it. With
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

class PromptLookup {
 public:
  explicit PromptLookup(const Options& o)
      : ngram_min_(static_cast<int32_t>(o.get_int("ngram_min"))), ngram_max_(static_cast<int32_t>(o.get_int("ngram_max"))),
        k_(static_cast<int32_t>(o.get_int("k"))), adaptive_(o.get_bool("adaptive")) {
    if (ngram_min_ < 1 || ngram_max_ < ngram_min_ || k_ < 1)
      throw sy::plugin::Error("need 1 <= ngram_min <= ngram_max and k >= 1", SY_INVALID_ARGUMENT);
  }

  std::vector<int32_t> propose(uint64_t seq, const Tokens& t, int32_t k) {
    const int32_t n = t.size;
    int32_t want = std::min(k, adaptive_ && k_of_.count(seq) ? k_of_[seq] : k_);
    for (int32_t g = std::min(ngram_max_, n - 1); g >= ngram_min_; --g) {
      const int32_t* tail = t.data + n - g;
      // Latest earlier occurrence whose continuation exists.
      for (int32_t start = n - g - 1; start >= 0; --start) {
        if (!std::equal(tail, tail + g, t.data + start)) continue;
        int32_t from = start + g;
        return std::vector<int32_t>(t.data + from, t.data + from + std::min(want, n - from));
      }
    }
    return {};
  }

  void accepted(uint64_t seq, int32_t proposed, int32_t accepted_count) {
    if (!adaptive_ || proposed == 0) return;
    int32_t& k = k_of_.emplace(seq, k_).first->second;
    if (accepted_count == proposed) k = std::min(k_, k + 1);
    else if (accepted_count == 0) k = std::max(1, k - 1);
  }

  void release(uint64_t seq) { k_of_.erase(seq); }

 private:
  int32_t ngram_min_, ngram_max_, k_;
  bool adaptive_;
  std::unordered_map<uint64_t, int32_t> k_of_;  // adaptive k per sequence
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
