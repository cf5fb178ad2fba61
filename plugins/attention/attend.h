// The CPU attention core of PagedAttention: one tile of query rows that
// share a sequence and a KV head (the group's query heads times a few
// tokens) against that sequence's cached keys and values.
//
// A tile reads each cached key and value once for all its rows, so a
// prompt chunk, a GQA group and the k+1 rows of a speculative verification
// cost about one pass over the context instead of one per row. Scores and
// the weighted sum run on SIMD vectors (AVX-512, AVX2 + FMA, or a generic
// build, chosen at run time); the softmax exponent is a vector polynomial.
//
// Every row's result depends only on its own query, its own key range and
// the key positions, never on the other rows of the tile or the tile's size:
// the same query attends to the same bits alone, batched or drafted. (Keys
// are taken in chunks of kChunkKeys positions starting at multiples of
// kChunkKeys, whatever the block size: a key's lane is its position mod
// kChunkKeys, which does not move with batching.)
#pragma once
#include <switchyard/plugin.h>

#include <cstdint>

namespace sy_attention {

// Keys per online-softmax chunk (a multiple of every build's vector width).
constexpr int64_t kChunkKeys = 32;

struct AttendTile {
  int64_t head_dim;      // DK: the size of a query and a key
  int64_t value_dim;     // DV: the size of a value and of the output (0: DK)
  int64_t block_size;    // BS: tokens per cache block
  int64_t kv_heads;      // KVH: the cache's heads
  int64_t kv_head;       // g: the one this tile reads
  const int32_t* table;  // the sequence's block table (cache block per BS positions)
  const void* k_cache;   // [blocks][KVH][BS] rows of DK values in `dtype` (kv_row_bytes each)
  const void* v_cache;   // the same with rows of DV values
  // Latent attention (MLA with its up-projections absorbed into the query and
  // the output): > 0 when the key cache's rows hold the latent (latent_dim
  // values) and the value cache's rows the shared rotary key (DK - latent_dim
  // values). A key is then the two rows concatenated, and a value its first
  // DV values (the latent, or the whole key where the values read the
  // rotary part too).
  int64_t latent_dim;
  int32_t dtype;  // SY_DTYPE_FLOAT32, _FLOAT16, _BFLOAT16, or quantized rows: _INT8, _FLOAT8E4M3FN
  float scale;    // scores = dot * scale
  float softcap;  // > 0: softcap * tanh(score / softcap)
  int64_t window;  // > 0: a row at position p sees keys p - window + 1 .. p
  int32_t rows;
  const float* q;       // rows x DK, rotated
  const int64_t* last;  // per row: the last key position it sees (causal)
  float* out;           // rows x DV
  // Per row, or null: an attention sink (gpt-oss), a logit that joins the
  // row's softmax as one more key whose value is zero. It only takes its
  // share of the probability mass, so it enters at the normalisation.
  const float* sinks;
  // Split-K: the tile reads only the keys at positions [key_begin, key_end),
  // one segment of the context, and with `state` set it writes each row's
  // online-softmax state there (rows x kStateFloats(DV): running maximum,
  // running sum, unnormalised output) instead of `out`, for attend_merge.
  int64_t key_begin = 0, key_end = INT64_MAX;
  float* state = nullptr;
  // Token trees: the keys at positions remap_begin.. sit in the cache at
  // slots remap[position - remap_begin] (a tree node's ancestors, stored
  // where the tree put them); earlier positions are their own slots. The
  // row then computes exactly what it would with those keys in place.
  int64_t remap_begin = INT64_MAX;
  const int64_t* remap = nullptr;
};

// The segments split-K cuts a long context into: fixed positions, whatever
// the tile, the batch or the threads, so a row's result never depends on how
// its work was shared out (a context within one segment is one pass, as if
// unsplit).
constexpr int64_t kSegmentKeys = 1024;

// Floats of one row's state in AttendTile::state.
inline int64_t attend_state_floats(int64_t value_dim) { return 2 + value_dim; }

// Combines the states of `parts` segments of the same rows (ascending
// segment order; each rows x attend_state_floats(DV)) into normalised
// outputs (rows x DV), the sinks (per row, or null) joining as in attend().
// One part gives exactly what attend() itself would have written.
void attend_merge(const float* const* parts, int64_t num_parts, int32_t rows, int64_t DV, const float* sinks, float* out);

// Bytes of one cached row of D values: float32, 16-bit, or a quantized row's
// D codes and its float16 scale (SY_KV_ROW_* in plugin.h).
inline int64_t kv_row_bytes(int32_t dtype, int64_t D) {
  if (SY_KV_ROW_QUANTIZED(dtype)) return D + SY_KV_ROW_SCALE_BYTES;
  return dtype == SY_DTYPE_FLOAT32 ? 4 * D : 2 * D;
}

// Per-thread working memory for attend(): sized by attend_scratch_floats.
int64_t attend_scratch_floats(int32_t rows, int64_t head_dim, int64_t value_dim);

using AttendFn = void (*)(const AttendTile& tile, float* scratch);

// The build for an instruction set ("avx512", "avx2", "generic"), or null
// when this CPU (or this build) lacks it.
AttendFn attend_build(const char* name);
// The build in use: SWITCHYARD_ATTENTION_ISA if set (an unknown or missing
// path is an error), else the widest the CPU has.
AttendFn attend_fn();
const char* attend_path();

// float32 -> float16 rows for the cache (round to nearest even, as
// sy::plugin::f32_to_f16): F16C where the CPU has it. A decode step writes
// every layer's new keys and values before its tiles run, on one thread.
using ToHalvesFn = void (*)(const float* x, int64_t n, uint16_t* out);
ToHalvesFn to_halves_fn();

}  // namespace sy_attention
