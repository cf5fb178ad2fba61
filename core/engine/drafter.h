// Speculative drafters as the step engine sees them: a plugin drafter (the
// drafter ABI; point masses, or with the distributions a sampling drafter
// reports through propose_sampled) or the built-in draft-model
// drafter (a second model with its own KV cache; it reports the draft
// distribution of every proposal so verification can be exact).
#pragma once
#include <memory>
#include <vector>

#include "engine/decoder_model.h"
#include "engine/sampler.h"
#include "plugin_host/components.h"

namespace sy {

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Up to k tokens to follow `tokens` (prompt + generated so far). When q is
  // filled, q[i] is the distribution proposal i was drawn from; left empty,
  // proposals are deterministic (point masses).
  virtual std::vector<int32_t> propose(uint64_t seq, const std::vector<int32_t>& tokens, int32_t k, const SamplingParams& sampling,
                                       std::vector<std::vector<double>>* q) = 0;
  // Drafters that propose alternatives (ABI 1.9's propose_tree): a tree of
  // at most max_nodes nodes, raw (the Speculator checks it).
  virtual bool proposes_trees() const { return false; }
  virtual DraftTreeProposal propose_tree(uint64_t, const std::vector<int32_t>&, int32_t) { return {}; }
  // Drafters that learn from verification (1.9's observe): the target's
  // greedy next token after the last token and after each proposal.
  virtual bool observes() const { return false; }
  virtual void observe(uint64_t, const std::vector<int32_t>&, const std::vector<int32_t>&, const std::vector<int32_t>&) {}
  // Drafters that propose from the target's hidden states (Medusa-style
  // heads; 1.10's hidden_state): the final hidden state at the position whose
  // logits chose the sequence's last token, given before each proposal.
  virtual bool reads_hidden() const { return false; }
  virtual void hidden_state(uint64_t, const float*, int64_t) {}
  // Which drafter, for messages about its proposals.
  virtual std::string label() const = 0;
  virtual void accepted(uint64_t seq, int32_t proposed, int32_t accepted) = 0;
  virtual void release(uint64_t seq) = 0;
};

// vocab_size: the target's (a sampling plugin drafter reports distributions over it).
std::unique_ptr<Drafter> make_plugin_drafter(std::unique_ptr<PluginDrafter> plugin, int64_t vocab_size);

// The draft model runs in baseline mode (its own past/present KV per
// sequence, rolled back to what the target accepted before each proposal).
// Its vocabulary must be the target's (target_vocab); otherwise it is refused.
// Medusa-style heads (engine/heads_drafter.cpp): an ONNX file mapping the
// target's hidden state to one row per head, each scored by the target's own
// LM head (`lm_head`, not owned); `top` candidates per head make the tree.
// Refused naming both when the file's hidden size or vocabulary is not the
// target's.
class LmHead;
std::unique_ptr<Drafter> make_heads_drafter(const std::string& heads_path, LmHead& lm_head, const KernelRegistry& registry,
                                            ThreadPool* threads, int32_t top);

std::unique_ptr<Drafter> make_draft_model_drafter(const std::string& model_path, const KernelRegistry& registry, ThreadPool* threads,
                                                  int32_t k, int64_t target_vocab);

}  // namespace sy
