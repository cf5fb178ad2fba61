// Running parts of a graph at load time: the equivalence probe of the pass
// host and passes that ask what a subgraph computes (the attention pass
// reads a model's mask this way) evaluate chosen values on synthetic decoder
// inputs, with any value fed from outside.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "graph/model_io.h"
#include "graph/graph.h"
#include "kernels/registry.h"
#include "runtime/executor.h"
#include "switchyard/plugin.h"

namespace sy {

// A pruned copy of a graph that computes `want` from `fed` values (graph
// inputs or any intermediate, whose producers then do not run), planned once
// and run many times. Only the nodes the wanted values need are kept.
class SubgraphRunner {
 public:
  SubgraphRunner(const Graph& g, const KernelRegistry& registry, ThreadPool* threads, const std::vector<ValueId>& fed,
                 const std::vector<ValueId>& want);
  // feeds in the order of `fed`; step: a sy_step_context for step-mode graphs.
  std::vector<Tensor> run(const std::vector<Tensor>& feeds, const void* step = nullptr);
  // Which of the fed values the pruned graph reads (others need no tensor).
  bool reads(size_t fed_index) const { return reads_[fed_index]; }
  bool reads_input(ValueId fed_value) const;

 private:
  std::shared_ptr<Graph> graph_;
  std::unique_ptr<Executor> executor_;
  std::vector<int> input_of_fed_;  // executor input slot of each fed value, -1 if pruned away
  std::vector<bool> reads_;
  std::vector<ValueId> fed_;
};

// One synthetic decoder step: rows of `lengths` new tokens (padded to the
// longest on the left, or on the right for right-padding models) after
// `past` cached tokens each.
struct ProbeCase {
  std::string name;
  int64_t past = 0;
  std::vector<int64_t> lengths{1};
  bool right_pad = false;
  int64_t batch() const { return static_cast<int64_t>(lengths.size()); }
  int64_t width() const;  // the padded new-token length
};

// Synthetic inputs for a decoder-with-past graph, by role: token ids drawn
// from the vocabulary, the attention mask, positions from the mask, past
// keys/values from a seeded normal distribution. Deterministic per seed.
struct ProbeInputs {
  std::vector<ValueId> ids;
  std::vector<Tensor> tensors;
  std::vector<std::vector<int64_t>> tokens;  // each row's real tokens
  std::vector<Tensor> past_keys, past_values;  // per layer
  const Tensor* find(ValueId v) const;
};
ProbeInputs synthetic_decoder_inputs(const Graph& g, const ModelIO& io, const ProbeCase& c, int64_t vocab, uint64_t seed);

// A step context for the same case in the step engine's ragged layout,
// with a scratch block KV cache holding each row's past (from the synthetic
// past inputs). Owns everything the sy_step_context points at.
class ScratchStep {
 public:
  ScratchStep(const ModelIO& io, const ProbeCase& c, const ProbeInputs& inputs, int32_t block_size = 16);
  const sy_step_context* context() const { return &step_; }
  const std::vector<int64_t>& flat_tokens() const { return flat_tokens_; }
  const std::vector<int64_t>& flat_positions() const { return positions_; }

 private:
  std::vector<Tensor> keys_, values_;
  std::vector<sy_tensor> key_views_, value_views_;
  std::vector<int32_t> query_start_, context_len_, tables_;
  std::vector<int64_t> positions_, flat_tokens_;
  std::vector<uint64_t> seq_ids_;
  sy_step_context step_{};
};

// The context length a model supports: genai_config.json, the graph's
// metadata, or `config_context` (config.json's, ModelFolder reads it); 0 if none.
int64_t model_context_length(const Graph& g, const GenaiConfig* genai, int64_t config_context, const std::string& model_path);

// The vocabulary size from the logits output's last dimension, else 0.
int64_t model_vocab_size(const Graph& g, const ModelIO& io);

}  // namespace sy
