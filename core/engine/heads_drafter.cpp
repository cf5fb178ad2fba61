// Medusa-style drafting heads. The heads file (ONNX, written by
// `python -m switchyard.distill heads`) maps the target's final hidden state
// at a position to one row per head: head i's row, scored by the target's
// own LM head, predicts the token i + 1 places past the one the target's
// logits chose there. The heads hold no vocabulary of their own, so they
// stay small (hidden x hidden per head) and always score with the weights,
// quantization included, that the target itself uses.
//
// Interface of the file: input `hidden_states` float [rows, hidden] and,
// optionally, `input_ids` int64 [rows] (the token that hidden state chose:
// the sequence's last token, which heads conditioned on it read beside the
// hidden state, as EAGLE does); output `head_states` float
// [rows, heads, hidden]; metadata
// `switchyard.heads.vocab_size` (optional) names the vocabulary the heads
// were trained against.
//
// Proposals: a tree grown best first. A node at depth d carries the product
// of the heads' probabilities along its path; the most likely open node is
// added next, its children being head d + 1's `top` candidates, until the
// step's node budget is spent. The chain (propose) is each head's top token.
#include <algorithm>
#include <cmath>
#include <queue>
#include <unordered_map>

#include "engine/decoder_model.h"
#include "engine/drafter.h"
#include "engine/lm_head.h"

namespace sy {
namespace {

class HeadsDrafter : public Drafter {
 public:
  HeadsDrafter(const std::string& path, LmHead& lm_head, const KernelRegistry& registry, ThreadPool* threads, int32_t top)
      : path_(path), lm_head_(lm_head), top_(std::max(1, top)) {
    const ModelFolder folder = ModelFolder::open(path);
    heads_ = prepare_executor(folder, registry, threads, ModelOptions{}, {}, nullptr);
    const Graph& g = heads_->graph();
    input_ = heads_->input_index("hidden_states");
    ids_ = heads_->input_index("input_ids");
    output_ = heads_->output_index("head_states");
    SY_CHECK(input_ >= 0 && output_ >= 0 && g.inputs.size() == (ids_ >= 0 ? 2u : 1u),
             path << ": a heads file takes `hidden_states` [rows, hidden] (and optionally `input_ids` [rows]) and gives "
                     "`head_states` [rows, heads, hidden]");
    const Value& in = g.values[static_cast<size_t>(g.inputs[static_cast<size_t>(input_)])];
    if (in.shape && in.shape->size() == 2 && (*in.shape)[1].is_static()) hidden_ = (*in.shape)[1].value;
    SY_CHECK(hidden_ > 0, path << ": the heads' input `hidden_states` must have a static hidden size ([rows, hidden])");
    SY_CHECK(lm_head.hidden_size() < 0 || lm_head.hidden_size() == hidden_,
             path << ": the heads read hidden states of " << hidden_ << " values; the target's are " << lm_head.hidden_size()
                  << ": heads are trained for one model (its hidden size and vocabulary)");
    auto v = g.metadata.find("switchyard.heads.vocab_size");
    if (v != g.metadata.end() && lm_head.vocab_size() > 0) {
      int64_t vocab = -1;
      try {
        vocab = std::stoll(v->second);
      } catch (const std::exception&) {
        SY_THROW(path << ": metadata switchyard.heads.vocab_size is not a number: '" << v->second << "'");
      }
      SY_CHECK(vocab == lm_head.vocab_size(), path << ": the heads were trained against a vocabulary of " << vocab
                                                  << " tokens; the target's has " << lm_head.vocab_size());
    }
  }

  bool reads_hidden() const override { return true; }
  void hidden_state(uint64_t seq, const float* hidden, int64_t size) override {
    SY_CHECK(size == hidden_, path_ << ": the target's hidden state has " << size << " values; the heads read " << hidden_);
    State& st = states_[seq];
    st.hidden.assign(hidden, hidden + size);
    st.scored = false;
  }

  std::vector<int32_t> propose(uint64_t seq, const std::vector<int32_t>& tokens, int32_t k, const SamplingParams&,
                               std::vector<std::vector<double>>*) override {
    const State* st = scored(seq, tokens);
    std::vector<int32_t> out;
    if (!st) return out;
    for (int32_t i = 0; i < std::min<int32_t>(k, static_cast<int32_t>(st->candidates.size())); ++i)
      out.push_back(st->candidates[static_cast<size_t>(i)].front().second);
    return out;
  }

  bool proposes_trees() const override { return true; }
  DraftTreeProposal propose_tree(uint64_t seq, const std::vector<int32_t>& tokens, int32_t max_nodes) override {
    DraftTreeProposal t;
    const State* st = scored(seq, tokens);
    if (!st || max_nodes <= 0) return t;
    // Open nodes: (path probability, depth, parent node, rank in that head's candidates).
    struct Open {
      double p;
      int32_t depth, parent, rank;
      bool operator<(const Open& o) const { return p < o.p; }
    };
    std::priority_queue<Open> open;
    auto push_children = [&](double p, int32_t depth, int32_t parent) {
      if (depth >= static_cast<int32_t>(st->candidates.size())) return;
      const auto& c = st->candidates[static_cast<size_t>(depth)];
      for (int32_t r = 0; r < static_cast<int32_t>(c.size()); ++r) open.push({p * c[static_cast<size_t>(r)].first, depth, parent, r});
    };
    push_children(1.0, 0, -1);
    while (!open.empty() && t.count < max_nodes) {
      const Open n = open.top();
      open.pop();
      t.tokens.push_back(st->candidates[static_cast<size_t>(n.depth)][static_cast<size_t>(n.rank)].second);
      t.parents.push_back(n.parent);
      push_children(n.p, n.depth + 1, t.count++);
    }
    return t;
  }

  std::string label() const override { return "drafter 'heads' (built in, " + path_ + ")"; }
  void accepted(uint64_t, int32_t, int32_t) override {}
  void release(uint64_t seq) override { states_.erase(seq); }

 private:
  struct State {
    std::vector<float> hidden;
    bool scored = false;
    // Per head, its `top` tokens with their probabilities, most likely first.
    std::vector<std::vector<std::pair<double, int32_t>>> candidates;
  };

  // The heads run once per hidden state (a chain and a tree from one run).
  const State* scored(uint64_t seq, const std::vector<int32_t>& tokens) {
    auto it = states_.find(seq);
    if (it == states_.end() || it->second.hidden.empty() || tokens.empty()) return nullptr;
    State& st = it->second;
    if (st.scored) return &st;
    const Tensor h = Tensor::from<float>(Shape{1, hidden_}, std::span<const float>(st.hidden));
    std::vector<Tensor> in(ids_ >= 0 ? 2 : 1);
    in[static_cast<size_t>(input_)] = h;
    if (ids_ >= 0) in[static_cast<size_t>(ids_)] = Tensor::from<int64_t>(Shape{1}, {static_cast<int64_t>(tokens.back())});
    const Tensor rows = heads_->run(in)[static_cast<size_t>(output_)];
    SY_CHECK(rows.rank() == 3 && rows.dim(0) == 1 && rows.dim(2) == hidden_,
             path_ << ": head_states has shape " << rows.shape().str() << ", expected [1, heads, " << hidden_ << "]");
    const int64_t heads = rows.dim(1);
    const Tensor logits = lm_head_.project(rows.reshaped(Shape{heads, hidden_}));
    const int64_t V = logits.dim(1);
    st.candidates.assign(static_cast<size_t>(heads), {});
    for (int64_t i = 0; i < heads; ++i) {
      const float* row = logits.data<float>() + i * V;
      auto& c = st.candidates[static_cast<size_t>(i)];
      // Softmax over the row; keep the `top` most likely.
      const float mx = *std::max_element(row, row + V);
      double sum = 0;
      for (int64_t j = 0; j < V; ++j) sum += std::exp(static_cast<double>(row[j] - mx));
      std::vector<int32_t> idx(static_cast<size_t>(V));
      for (int64_t j = 0; j < V; ++j) idx[static_cast<size_t>(j)] = static_cast<int32_t>(j);
      const auto n = static_cast<std::ptrdiff_t>(std::min<int64_t>(top_, V));
      std::partial_sort(idx.begin(), idx.begin() + n, idx.end(), [&](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
      for (std::ptrdiff_t r = 0; r < n; ++r)
        c.emplace_back(std::exp(static_cast<double>(row[idx[static_cast<size_t>(r)]] - mx)) / sum, idx[static_cast<size_t>(r)]);
    }
    st.scored = true;
    return &st;
  }

  std::string path_;
  LmHead& lm_head_;
  int32_t top_;
  std::unique_ptr<Executor> heads_;
  int input_ = -1, ids_ = -1, output_ = -1;
  int64_t hidden_ = -1;
  std::unordered_map<uint64_t, State> states_;
};

}  // namespace

std::unique_ptr<Drafter> make_heads_drafter(const std::string& heads_path, LmHead& lm_head, const KernelRegistry& registry,
                                            ThreadPool* threads, int32_t top) {
  return std::make_unique<HeadsDrafter>(heads_path, lm_head, registry, threads, top);
}

}  // namespace sy
