// The KV cache's memory for a loaded model under each storage strategy:
// bytes per token and per sequence, and how many sequences of a length fit
// in a memory budget. The seed's formula, size = 2 · B · S · L · H · M
// (B sequences of S tokens, L layers, H = kv_heads · head_dim, M bytes per
// element), filled with the model's own numbers; where keys and values
// differ in head size (a latent-attention cache) the 2 · H becomes
// kv_heads · (key size + value size).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>

namespace sy {

class Session;

// sequence_tokens: S; memory_bytes: the budget the sequence counts use.
nlohmann::json kv_memory_report(Session& session, int64_t sequence_tokens, int64_t memory_bytes);

}  // namespace sy
