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
//                  fully accepted draft (between 1 and k). With branches > 1
//                  it proposes a tree (ABI 1.9): the continuations of up to
//                  that many earlier occurrences (the longest matches, the
//                  latest first), merged where they agree, so one step
//                  verifies the alternatives a text offers.
//
//   lookahead      lookahead decoding's n-gram pool (Fu et al. 2024) without
//                  its extra attention branch: per sequence, for each token,
//                  the n - 1 tokens that followed it, newest first, from the
//                  prompt and the generated text and from what the target
//                  itself predicted after every proposal it verified
//                  (observe, ABI 1.9): past the first proposal it rejected,
//                  those are its continuations of contexts it did not keep,
//                  the next guesses of a Jacobi iteration. Each step
//                  proposes the pool's continuations of the last token as a
//                  tree (with trees; else the newest as a chain), and the
//                  target's guesses past what it kept last step.
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

// Per sequence, for each n-gram length g, the latest starts (up to
// `keep`, newest first) of every n-gram whose continuation exists, keyed by
// the n-gram's hash: appending tokens adds the n-grams they complete, so a
// proposal costs O(ngram_max) lookups however long the sequence is
// (instead of a rescan of it every step).
class NgramIndex {
 public:
  NgramIndex(int32_t gmin, int32_t gmax, int32_t keep = 1)
      : gmin_(gmin), gmax_(gmax), keep_(keep), latest_(static_cast<size_t>(gmax - gmin + 1)) {}

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
      for (int32_t s = std::max(0, indexed_ - g); s + g + 1 <= t.size; ++s) {
        std::vector<int32_t>& starts = m[hash(t.data + s, g)];
        starts.insert(starts.begin(), s);
        if (static_cast<int32_t>(starts.size()) > keep_) starts.pop_back();
      }
    }
    indexed_ = t.size;
    if (t.size > 0) last_ = t[t.size - 1];
  }
  // The latest earlier start of the sequence's last g tokens, or -1.
  int32_t find(const Tokens& t, int32_t g) const {
    const std::vector<int32_t> all = find_all(t, g);
    return all.empty() ? -1 : all.front();
  }
  // The latest earlier starts of the sequence's last g tokens, newest first.
  std::vector<int32_t> find_all(const Tokens& t, int32_t g) const {
    const auto& m = latest_[static_cast<size_t>(g - gmin_)];
    auto it = m.find(hash(t.data + t.size - g, g));
    std::vector<int32_t> out;
    if (it == m.end()) return out;
    for (int32_t start : it->second)
      if (std::equal(t.data + t.size - g, t.data + t.size, t.data + start)) out.push_back(start);
    return out;
  }

 private:
  static uint64_t hash(const int32_t* p, int32_t n) {
    uint64_t h = 1469598103934665603ull;
    for (int32_t i = 0; i < n; ++i) h = (h ^ static_cast<uint32_t>(p[i])) * 1099511628211ull;
    return h;
  }
  int32_t gmin_, gmax_, keep_;
  std::vector<std::unordered_map<uint64_t, std::vector<int32_t>>> latest_;  // per g: n-gram hash -> latest starts
  int32_t indexed_ = 0;
  int32_t last_ = 0;
};

class PromptLookup {
 public:
  explicit PromptLookup(const Options& o)
      : ngram_min_(static_cast<int32_t>(o.get_int("ngram_min"))), ngram_max_(static_cast<int32_t>(o.get_int("ngram_max"))),
        k_(static_cast<int32_t>(o.get_int("k"))), branches_(static_cast<int32_t>(o.get_int("branches"))), adaptive_(o.get_bool("adaptive")) {
    if (ngram_min_ < 1 || ngram_max_ < ngram_min_ || k_ < 1)
      throw sy::plugin::Error("need 1 <= ngram_min <= ngram_max and k >= 1", SY_INVALID_ARGUMENT);
    if (branches_ < 1 || branches_ > 16) throw sy::plugin::Error("branches must be between 1 and 16", SY_INVALID_ARGUMENT);
  }

  // A tree: the continuations of up to `branches` earlier occurrences of the
  // sequence's last tokens (longest n-grams first, newest first), each up to
  // k deep, merged into a trie (shared prefixes once) within max_nodes.
  sy::plugin::DraftTree propose_tree(uint64_t seq, const Tokens& t, int32_t max_nodes) {
    sy::plugin::DraftTree tree;
    if (branches_ == 1) {
      tree.tokens = propose(seq, t, max_nodes);
      for (size_t i = 0; i < tree.tokens.size(); ++i) tree.parents.push_back(static_cast<int32_t>(i) - 1);
      return tree;
    }
    const int32_t n = t.size;
    const int32_t want = std::min(k_, adaptive_ && k_of_.count(seq) ? k_of_[seq] : k_);
    NgramIndex& index = index_.try_emplace(seq, ngram_min_, ngram_max_, branches_).first->second;
    index.update(t);
    int32_t branches = 0;
    for (int32_t g = std::min(ngram_max_, n - 1); g >= ngram_min_ && branches < branches_; --g)
      for (int32_t start : index.find_all(t, g)) {
        if (branches == branches_ || static_cast<int32_t>(tree.tokens.size()) >= max_nodes) break;
        // Walk the continuation down the trie, adding the nodes it lacks.
        int32_t parent = -1;
        bool added = false;
        for (int32_t i = 0; i < want && static_cast<int32_t>(tree.tokens.size()) < max_nodes; ++i) {
          const int32_t at = start + g + i;
          if (at >= n) break;  // (trees stop at the text's end; chains repeat, see propose)
          const int32_t tok = t[at];
          int32_t child = -1;
          for (size_t c = 0; c < tree.tokens.size() && child < 0; ++c)
            if (tree.parents[c] == parent && tree.tokens[c] == tok) child = static_cast<int32_t>(c);
          if (child < 0) {
            tree.tokens.push_back(tok);
            tree.parents.push_back(parent);
            child = static_cast<int32_t>(tree.tokens.size()) - 1;
            added = true;
          }
          parent = child;
        }
        branches += added;
      }
    return tree;
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
  int32_t ngram_min_, ngram_max_, k_, branches_;
  bool adaptive_;
  std::unordered_map<uint64_t, int32_t> k_of_;  // adaptive k per sequence
  std::unordered_map<uint64_t, NgramIndex> index_;
};

class Lookahead {
 public:
  explicit Lookahead(const Options& o)
      : n_(static_cast<int32_t>(o.get_int("n"))), pool_(static_cast<int32_t>(o.get_int("pool"))),
        branches_(static_cast<int32_t>(o.get_int("branches"))) {
    if (n_ < 2 || n_ > 16 || pool_ < 1 || branches_ < 1)
      throw sy::plugin::Error("need 2 <= n <= 16, pool >= 1 and branches >= 1", SY_INVALID_ARGUMENT);
  }

  std::vector<int32_t> propose(uint64_t seq, const Tokens& t, int32_t k) {
    const sy::plugin::DraftTree tree = propose_tree(seq, t, k);
    std::vector<int32_t> chain;  // the first branch, while it is a chain
    for (size_t i = 0; i < tree.tokens.size() && tree.parents[i] == static_cast<int32_t>(i) - 1; ++i) chain.push_back(tree.tokens[i]);
    return chain;
  }

  sy::plugin::DraftTree propose_tree(uint64_t seq, const Tokens& t, int32_t max_nodes) {
    State& st = states_[seq];
    pool_text(st, t);
    st.context.assign(t.data + std::max(0, t.size - (n_ - 1)), t.data + t.size);
    sy::plugin::DraftTree tree;
    if (t.size == 0) return tree;
    auto add = [&](const std::vector<int32_t>& branch) {
      int32_t parent = -1;
      for (int32_t tok : branch) {
        if (static_cast<int32_t>(tree.tokens.size()) >= max_nodes) return;
        int32_t child = -1;
        for (size_t c = 0; c < tree.tokens.size() && child < 0; ++c)
          if (tree.parents[c] == parent && tree.tokens[c] == tok) child = static_cast<int32_t>(c);
        if (child < 0) {
          tree.tokens.push_back(tok);
          tree.parents.push_back(parent);
          child = static_cast<int32_t>(tree.tokens.size()) - 1;
        }
        parent = child;
      }
    };
    // The Jacobi guesses first (they continue the text the target just
    // wrote), then the pool's continuations of the last token, newest first.
    if (!st.guess.empty()) add(st.guess);
    st.guess.clear();
    auto it = st.pool.find(t[t.size - 1]);
    int32_t taken = 0;
    if (it != st.pool.end())
      for (const auto& cont : it->second) {
        if (taken++ == branches_) break;
        add(cont);
      }
    return tree;
  }

  void observe(uint64_t seq, const Tokens& proposed, const int32_t* parents, const int32_t* target_next) {
    State& st = states_[seq];
    const int32_t count = proposed.size;
    auto parent_of = [&](int32_t i) { return parents ? parents[i] : i - 1; };
    // Every verified row: the target's next token after the context, the
    // proposals on the row's path, an n-gram for the pool.
    for (int32_t row = 0; row <= count; ++row) {
      std::vector<int32_t> path;  // the proposals from the root to this row's node
      for (int32_t i = row - 1; i >= 0; i = parent_of(i)) path.insert(path.begin(), proposed[i]);
      std::vector<int32_t> gram(st.context);
      gram.insert(gram.end(), path.begin(), path.end());
      gram.push_back(target_next[row]);
      if (static_cast<int32_t>(gram.size()) >= n_) add_gram(st, gram.data() + gram.size() - n_);
    }
    // The path the target kept (its greedy choices), and past it the
    // Jacobi guesses: its next tokens along the first proposal it rejected.
    int32_t row = 0;
    for (;;) {
      int32_t next = -1;
      for (int32_t i = 0; i < count && next < 0; ++i)
        if (parent_of(i) == row - 1 && proposed[i] == target_next[row]) next = i;
      if (next < 0) break;
      row = next + 1;
    }
    st.guess.clear();
    int32_t rejected = -1;
    for (int32_t i = 0; i < count && rejected < 0; ++i)
      if (parent_of(i) == row - 1) rejected = i;
    for (int32_t i = rejected; i >= 0 && static_cast<int32_t>(st.guess.size()) < n_ - 1;) {
      st.guess.push_back(target_next[i + 1]);
      int32_t child = -1;
      for (int32_t c = i + 1; c < count && child < 0; ++c)
        if (parent_of(c) == i) child = c;
      i = child;
    }
  }

  void release(uint64_t seq) { states_.erase(seq); }

 private:
  struct State {
    std::unordered_map<int32_t, std::vector<std::vector<int32_t>>> pool;  // token -> the n - 1 tokens after it, newest first
    int32_t pooled = 0;               // tokens of the sequence whose n-grams are pooled
    std::vector<int32_t> last_pooled;  // the sequence's tokens then (a changed sequence is pooled anew)
    std::vector<int32_t> context;      // the last n - 1 tokens when the proposal was made
    std::vector<int32_t> guess;        // the Jacobi branch for the next step
  };

  void add_gram(State& st, const int32_t* gram) {
    std::vector<std::vector<int32_t>>& list = st.pool[gram[0]];
    const std::vector<int32_t> cont(gram + 1, gram + n_);
    auto same = std::find(list.begin(), list.end(), cont);
    if (same != list.end()) list.erase(same);
    list.insert(list.begin(), cont);
    if (static_cast<int32_t>(list.size()) > pool_) list.pop_back();
  }

  // The sequence's own n-grams, as its tokens arrive.
  void pool_text(State& st, const Tokens& t) {
    if (t.size < st.pooled || (st.pooled > 0 && t[st.pooled - 1] != st.last_pooled.back())) {
      st.pool.clear();
      st.pooled = 0;
    }
    for (int32_t s = std::max(0, st.pooled - n_ + 1); s + n_ <= t.size; ++s) add_gram(st, t.data + s);
    st.pooled = t.size;
    st.last_pooled.assign(1, t.size > 0 ? t[t.size - 1] : 0);
  }

  int32_t n_, pool_, branches_;
  std::unordered_map<uint64_t, State> states_;
};

}  // namespace

SY_PLUGIN(builder) {
  using sy::plugin::option_bool;
  using sy::plugin::option_int;
  builder.info("switchyard-speculative", "1.1.0", "speculative drafters: prompt lookup (chains or trees), lookahead");
  builder.drafter<PromptLookup>(
      "prompt-lookup", "1.1.0", "propose the continuation of the latest n-gram match in the prompt and generated text",
      {option_int("ngram_min", "1", "shortest n-gram to match"), option_int("ngram_max", "3", "longest n-gram to match"),
       option_int("k", "4", "tokens proposed per step (the most, with adaptive)"),
       option_bool("adaptive", "false", "shrink k after rejections, grow it after full acceptance"),
       option_int("branches", "1", "continuations of this many earlier occurrences proposed as a tree (1: a chain)")});
  builder.drafter<Lookahead>(
      "lookahead", "1.0.0",
      "lookahead decoding's n-gram pool: the text's n-grams and the target's own predictions after verified proposals",
      {option_int("n", "4", "n-gram size (a proposal is n - 1 tokens deep)"),
       option_int("pool", "8", "continuations kept per token, newest first"),
       option_int("branches", "4", "pool continuations proposed in one tree")});
}
