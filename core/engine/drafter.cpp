#include "engine/drafter.h"

#include <cstring>
#include <mutex>
#include <unordered_map>

namespace sy {
namespace {

class PluginDrafterAdapter : public Drafter {
 public:
  PluginDrafterAdapter(std::unique_ptr<PluginDrafter> p, int64_t vocab_size) : p_(std::move(p)), vocab_size_(vocab_size) {}
  std::vector<int32_t> propose(uint64_t seq, const std::vector<int32_t>& tokens, int32_t k, const SamplingParams& sampling,
                               std::vector<std::vector<double>>* q) override {
    sy_draft_sampling ds{};
    ds.struct_size = sizeof(ds);
    ds.temperature = sampling.temperature;
    ds.top_k = sampling.top_k;
    ds.top_p = sampling.top_p;
    ds.seed = sampling.seed;
    DraftProposal proposal = p_->propose(seq, tokens, k, ds, vocab_size_);
    if (q) *q = std::move(proposal.probs);
    return proposal.tokens;
  }
  bool proposes_trees() const override { return p_->proposes_trees(); }
  DraftTreeProposal propose_tree(uint64_t seq, const std::vector<int32_t>& tokens, int32_t max_nodes) override {
    return p_->propose_tree(seq, tokens, max_nodes);
  }
  bool observes() const override { return p_->observes(); }
  void observe(uint64_t seq, const std::vector<int32_t>& proposed, const std::vector<int32_t>& parents,
               const std::vector<int32_t>& target_next) override {
    p_->observe(seq, proposed, parents, target_next);
  }
  bool reads_hidden() const override { return p_->reads_hidden(); }
  void hidden_state(uint64_t seq, const float* hidden, int64_t size) override { p_->hidden_state(seq, hidden, size); }
  std::string label() const override { return p_->label(); }
  void accepted(uint64_t seq, int32_t proposed, int32_t accepted_count) override { p_->accepted(seq, proposed, accepted_count); }
  void release(uint64_t seq) override { p_->release(seq); }

 private:
  std::unique_ptr<PluginDrafter> p_;
  int64_t vocab_size_;
};

class DraftModelDrafter : public Drafter {
 public:
  DraftModelDrafter(const std::string& path, const KernelRegistry& registry, ThreadPool* threads, int32_t k, int64_t target_vocab)
      : k_(k) {
    ModelOptions mo;
    mo.max_context = 1 << 20;
    // Only the last fed position's logits are drafted from: the LM head (for
    // a small draft model, most of its weights) runs on that row only, not
    // on every token of a catch-up (the prompt, the accepted drafts).
    std::unique_ptr<GraphPass> select_logits = make_select_logits_pass();
    model_ = DecoderModel::load(path, registry, threads, mo, {select_logits.get()});
    SY_CHECK(model_->has_kv_cache() && !model_->paged_attention(),
             path << ": a draft model must be a decoder-with-past export (it runs with its own past/present KV)");
    // Verification compares the draft's distribution with the target's token
    // by token: the two must share one vocabulary (ids and size).
    SY_CHECK(model_->vocab_size() > 0 && target_vocab > 0,
             path << ": the draft model's vocabulary size (" << model_->vocab_size() << ") and the target's (" << target_vocab
                  << ") must be static to check that they match");
    SY_CHECK(model_->vocab_size() == target_vocab, path << ": the draft model's vocabulary has " << model_->vocab_size()
                                                        << " tokens, the target's " << target_vocab
                                                        << ": a draft model must share the target's tokenizer");
  }

  std::vector<int32_t> propose(uint64_t seq, const std::vector<int32_t>& tokens, int32_t k, const SamplingParams& sampling,
                               std::vector<std::vector<double>>* q) override {
    State& st = states_[seq];
    if (!st.sampler) {
      // The draft samples with the target's filters from its own stream; its
      // distribution q need not match (rejection sampling corrects for it).
      SamplingParams draft = sampling;
      draft.seed = sampling.seed * 0x9e3779b97f4a7c15ull + seq + 1;
      draft.logprobs = -1;
      st.sampler = std::make_unique<Sampler>(draft);
    }
    // Roll the draft cache back to the longest prefix it shares with the
    // target's tokens (rejected drafts leave it).
    size_t common = 0;
    while (common < st.covered.size() && common < tokens.size() && st.covered[common] == tokens[common]) ++common;
    if (common == tokens.size()) --common;  // always feed at least the last token
    truncate(st, common);
    std::vector<int32_t> out;
    std::vector<int32_t> feed(tokens.begin() + static_cast<std::ptrdiff_t>(common), tokens.end());
    int32_t n = std::min(k, k_);
    std::vector<double> p;
    for (int32_t i = 0; i < n; ++i) {
      Tensor logits = forward(st, feed);
      const float* row = logits.data<float>() + (logits.dim(1) - 1) * logits.dim(2);
      int vocab = static_cast<int>(logits.dim(2));
      int tok;
      if (st.sampler->greedy()) {
        tok = Sampler::argmax(row, vocab);
      } else {
        st.sampler->distribution(row, vocab, p);
        tok = st.sampler->sample_from(p);
        if (q) q->push_back(p);
      }
      out.push_back(tok);
      feed = {tok};
    }
    return out;
  }

  std::string label() const override { return "drafter 'draft-model' (built in)"; }
  void accepted(uint64_t, int32_t, int32_t) override {}
  void release(uint64_t seq) override { states_.erase(seq); }

 private:
  struct State {
    std::vector<int32_t> covered;  // tokens whose KV the draft cache holds
    std::vector<Tensor> k, v;      // per layer [1, H, covered, D]
    std::unique_ptr<Sampler> sampler;
  };

  void truncate(State& st, size_t length) {
    if (st.k.empty()) {
      for (int l = 0; l < model_->num_layers(); ++l) {
        st.k.push_back(Tensor::empty(model_->kv_dtype(), Shape{1, model_->kv_heads(), 0, model_->head_dim()}));
        st.v.push_back(Tensor::empty(model_->kv_dtype(), Shape{1, model_->kv_heads(), 0, model_->value_dim()}));
      }
    }
    if (length >= st.covered.size()) return;
    auto cut = [&](Tensor& t) {
      int64_t H = t.dim(1), T = t.dim(2), D = t.dim(3);
      Tensor n = Tensor::empty(t.dtype(), Shape{1, H, static_cast<int64_t>(length), D});
      size_t es = dtype_size(t.dtype());
      for (int64_t h = 0; h < H; ++h)
        std::memcpy(static_cast<std::byte*>(n.raw()) + static_cast<size_t>(h * static_cast<int64_t>(length) * D) * es,
                    static_cast<const std::byte*>(t.raw()) + static_cast<size_t>(h * T * D) * es, length * static_cast<size_t>(D) * es);
      t = n;
    };
    for (auto& t : st.k) cut(t);
    for (auto& t : st.v) cut(t);
    st.covered.resize(length);
  }

  Tensor forward(State& st, const std::vector<int32_t>& feed) {
    Executor& ex = model_->executor();
    auto S = static_cast<int64_t>(feed.size()), P = static_cast<int64_t>(st.covered.size());
    std::vector<Tensor> in(ex.graph().inputs.size());
    Tensor ids = Tensor::empty(DType::I64, Shape{1, S});
    Tensor pos = Tensor::empty(DType::I64, Shape{1, S});
    for (int64_t j = 0; j < S; ++j) {
      ids.data<int64_t>()[j] = feed[static_cast<size_t>(j)];
      pos.data<int64_t>()[j] = P + j;
    }
    in[static_cast<size_t>(model_->input_ids)] = ids;
    if (model_->position_ids >= 0) in[static_cast<size_t>(model_->position_ids)] = pos;
    if (model_->logits_indices >= 0) in[static_cast<size_t>(model_->logits_indices)] = Tensor::from<int64_t>(Shape{1}, {S - 1});
    if (model_->attention_mask >= 0) {
      Tensor mask = Tensor::empty(DType::I64, Shape{1, P + S});
      for (int64_t j = 0; j < P + S; ++j) mask.data<int64_t>()[j] = 1;
      in[static_cast<size_t>(model_->attention_mask)] = mask;
    }
    for (int l = 0; l < model_->num_layers(); ++l) {
      in[static_cast<size_t>(model_->past_key_inputs()[static_cast<size_t>(l)])] = st.k[static_cast<size_t>(l)];
      in[static_cast<size_t>(model_->past_value_inputs()[static_cast<size_t>(l)])] = st.v[static_cast<size_t>(l)];
    }
    std::vector<Tensor> out = ex.run(in);
    for (int l = 0; l < model_->num_layers(); ++l) {
      st.k[static_cast<size_t>(l)] = out[static_cast<size_t>(model_->present_key_outputs()[static_cast<size_t>(l)])];
      st.v[static_cast<size_t>(l)] = out[static_cast<size_t>(model_->present_value_outputs()[static_cast<size_t>(l)])];
    }
    st.covered.insert(st.covered.end(), feed.begin(), feed.end());
    return out[static_cast<size_t>(model_->logits)];
  }

  std::unique_ptr<DecoderModel> model_;
  int32_t k_;
  std::unordered_map<uint64_t, State> states_;
};

}  // namespace

std::unique_ptr<Drafter> make_plugin_drafter(std::unique_ptr<PluginDrafter> plugin, int64_t vocab_size) {
  return std::make_unique<PluginDrafterAdapter>(std::move(plugin), vocab_size);
}

std::unique_ptr<Drafter> make_draft_model_drafter(const std::string& model_path, const KernelRegistry& registry, ThreadPool* threads,
                                                  int32_t k, int64_t target_vocab) {
  return std::make_unique<DraftModelDrafter>(model_path, registry, threads, k, target_vocab);
}

}  // namespace sy
