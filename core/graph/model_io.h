// A decoder export's interface, found by role rather than by one exporter's
// names: token ids, attention mask, optional positions, the past/present KV
// pair of every layer (past_key_values.N.key, past.N.value, past_key_N, ...
// in any order), and the logits. onnxruntime-genai's genai_config.json
// (read by model/model_folder.h) names them exactly and is used first.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "graph/graph.h"

namespace sy {

// What genai_config.json (onnxruntime-genai) says about a model.
struct GenaiConfig {
  std::string filename;                 // model.decoder.filename
  std::map<std::string, std::string> inputs, outputs;  // role -> name or "%d" pattern
  int64_t head_size = 0, kv_heads = 0, num_layers = 0, context_length = 0, vocab_size = 0;
  std::vector<int> eos_ids;
  int bos_id = -1, pad_id = -1;
};

struct KvLayer {
  int layer = 0;
  int past_key = -1, past_value = -1;        // graph input slots
  int present_key = -1, present_value = -1;  // graph output slots
  int key_seq_axis = 2;                      // 3 when keys are stored transposed [B, H, D, T]
};

struct ModelIO {
  int input_ids = -1, attention_mask = -1, position_ids = -1, logits = -1;
  std::vector<KvLayer> layers;  // layer 0..N-1
  int64_t kv_heads = 0, head_dim = 0;
  // The values' head size where it differs from the keys' (an MLA export
  // caching its latent as keys and the shared rope key as values); else
  // head_dim.
  int64_t value_dim = 0;
  DType kv_dtype = DType::F32;
  // The onnxruntime-genai feeding convention: rows right-padded, no
  // position_ids, positions from the mask sums (GroupQueryAttention).
  bool right_padding = false;
};

// Finds every role. `extra_inputs` are further input names the caller feeds
// itself (logits_indices). Throws listing the graph's inputs/outputs when a
// role cannot be found or an input has no role.
// `fused`: attention is fused (the cache manager owns the KV), so past
// inputs may remain unused and present outputs may be gone.
ModelIO discover_model_io(const Graph& g, const std::string& path, const GenaiConfig* genai,
                          const std::vector<std::string>& extra_inputs = {}, bool fused = false);

}  // namespace sy
