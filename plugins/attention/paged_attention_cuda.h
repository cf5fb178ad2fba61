// Paged attention on CUDA with GQA/MQA (query head h reads KV head
// h / (heads / kv_heads)), causal, optional sliding window:
//  - the step's new keys and values are written into their cache slots;
//  - prefill and mixed steps: flash-style tiles of up to 16 queries of one
//    sequence per block, K/V of 32 positions at a time staged in shared
//    memory and shared by the tile's queries, online softmax;
//  - decode-only steps: split-K over the context (flash-decoding): each
//    block takes 256 positions of one (token, head), partial softmax states
//    are merged by a second kernel.
// fp32 throughout; head_dim up to 256.
#pragma once
#include <cstdint>

namespace sy_attention {

struct CudaAttentionArgs {
  const float* q;        // [H, T, D]
  const float* k_new;    // [KVH, T, D]
  const float* v_new;    // [KVH, T, D]
  float* key_cache;      // [blocks, KVH, BS, D]
  float* value_cache;
  float* out;            // [H, T, D]
  int32_t H, KVH, T, D, BS;
  int32_t num_seqs, max_blocks_per_seq;
  int64_t window;        // 0 = none
  float scale;
  // Step metadata in device memory (see cuda_paged_attention).
  const int32_t* query_start;   // [num_seqs + 1]
  const int32_t* context_len;   // [num_seqs]
  const int32_t* block_tables;  // [num_seqs * max_blocks_per_seq]
  const int32_t* token_seq;     // [T]: the sequence of each token
  const int32_t* tiles;         // [num_tiles * 3]: seq, first token, count
  int32_t num_tiles;
  bool decode_only;             // every sequence has one new token
  int32_t max_context;
  float* scratch;               // split-K partials, cuda_attention_scratch_floats() of them
};

constexpr int kQueryTile = 16;
constexpr int kSplitKeys = 256;

int64_t cuda_attention_scratch_floats(const CudaAttentionArgs& a);
// Error message or null (no exception crosses the .cu boundary).
const char* cuda_paged_attention(const CudaAttentionArgs& a, void* stream);

}  // namespace sy_attention
