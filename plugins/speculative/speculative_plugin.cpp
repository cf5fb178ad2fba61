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
// which owns models and their KV caches: see core/engine/draft_model.cpp.)
#include <switchyard/plugin.hpp>

#include <algorithm>
#include <unordered_map>
#include <vector>

namespace {

using sy::plugin::guard;
using sy::plugin::Options;

struct PromptLookup {
  int32_t ngram_min, ngram_max, k;
  bool adaptive;
  std::unordered_map<uint64_t, int32_t> k_of;  // adaptive k per sequence
};

sy_status create(void*, const sy_options* o, void** state) {
  return guard([&] {
    Options opts(o);
    auto* s = new PromptLookup{static_cast<int32_t>(opts.get_int("ngram_min")), static_cast<int32_t>(opts.get_int("ngram_max")),
                               static_cast<int32_t>(opts.get_int("k")), opts.get_bool("adaptive"), {}};
    if (s->ngram_min < 1 || s->ngram_max < s->ngram_min || s->k < 1) {
      delete s;
      throw sy::plugin::Error("need 1 <= ngram_min <= ngram_max and k >= 1", SY_INVALID_ARGUMENT);
    }
    *state = s;
  });
}

sy_status propose(void* state, uint64_t seq, const int32_t* t, int32_t n, int32_t k, int32_t* out, int32_t* count) {
  return guard([&] {
    auto* s = static_cast<PromptLookup*>(state);
    int32_t want = std::min(k, s->adaptive ? (s->k_of.count(seq) ? s->k_of[seq] : s->k) : s->k);
    *count = 0;
    for (int32_t g = std::min(s->ngram_max, n - 1); g >= s->ngram_min; --g) {
      const int32_t* tail = t + n - g;
      // Latest earlier occurrence whose continuation exists.
      for (int32_t start = n - g - 1; start >= 0; --start) {
        if (!std::equal(tail, tail + g, t + start)) continue;
        int32_t from = start + g;
        int32_t m = std::min(want, n - from);
        for (int32_t i = 0; i < m; ++i) out[i] = t[from + i];
        *count = m;
        return;
      }
    }
  });
}

sy_status accepted(void* state, uint64_t seq, int32_t proposed, int32_t accepted_count) {
  return guard([&] {
    auto* s = static_cast<PromptLookup*>(state);
    if (!s->adaptive || proposed == 0) return;
    int32_t& k = s->k_of.emplace(seq, s->k).first->second;
    if (accepted_count == proposed) k = std::min(s->k, k + 1);
    else if (accepted_count == 0) k = std::max(1, k - 1);
  });
}

sy_status release(void* state, uint64_t seq) {
  return guard([&] { static_cast<PromptLookup*>(state)->k_of.erase(seq); });
}

void destroy(void* state) { delete static_cast<PromptLookup*>(state); }

}  // namespace

SY_PLUGIN(builder) {
  using sy::plugin::option_bool;
  using sy::plugin::option_int;
  builder.info("switchyard-speculative", "1.0.0", "speculative drafters: prompt lookup");
  sy_drafter_desc d{};
  d.struct_size = sizeof(d);
  d.name = "prompt-lookup";
  d.version = "1.0.0";
  d.description = "propose the continuation of the latest n-gram match in the prompt and generated text";
  d.options = builder.options({option_int("ngram_min", "1", "shortest n-gram to match"), option_int("ngram_max", "3", "longest n-gram to match"),
                               option_int("k", "4", "tokens proposed per step (the most, with adaptive)"),
                               option_bool("adaptive", "false", "shrink k after rejections, grow it after full acceptance")},
                              d.num_options);
  d.create = create;
  d.propose = propose;
  d.accepted = accepted;
  d.release = release;
  d.destroy = destroy;
  builder.drafter(d);
}
