// KV-cache managers behind the cache ABI: contiguous (one region per
// sequence), paged (fixed-size blocks) and prefix-caching (paged + shared
// prompt prefixes). One implementation, BlockCache, with three configurations.
#include <switchyard/plugin.hpp>

#include <cstddef>
#include <memory>

#include "block_cache.h"

namespace {

using sy::plugin::Options;
using sy::plugin::Tokens;
using sy_cache::BlockCache;

// The stored element type: the option ("fp32", "fp16", "bf16", "int8",
// "fp8"), else the engine's request. int8 and fp8 (e4m3fn) rows carry their
// own float16 scale (SY_KV_ROW_* in plugin.h).
int32_t kv_dtype(const Options& o, int32_t requested) {
  const std::string d = o.get_string("dtype");
  if (d.empty()) return requested;
  if (d == "fp32" || d == "float32") return SY_DTYPE_FLOAT32;
  if (d == "fp16" || d == "float16") return SY_DTYPE_FLOAT16;
  if (d == "bf16" || d == "bfloat16") return SY_DTYPE_BFLOAT16;
  if (d == "int8") return SY_DTYPE_INT8;
  if (d == "fp8" || d == "fp8_e4m3" || d == "float8e4m3fn") return SY_DTYPE_FLOAT8E4M3FN;
  throw sy::plugin::Error("dtype must be fp32, fp16, bf16, int8 or fp8, got '" + d + "'", SY_INVALID_ARGUMENT);
}

// Elements of one stored row of head_dim values (a quantized row adds its scale's bytes).
int32_t row_elements(int32_t dtype, int32_t head_dim) { return SY_KV_ROW_QUANTIZED(dtype) ? head_dim + SY_KV_ROW_SCALE_BYTES : head_dim; }
int32_t element_bytes(int32_t dtype) { return dtype == SY_DTYPE_FLOAT32 ? 4 : SY_KV_ROW_QUANTIZED(dtype) ? 1 : 2; }

enum class Kind { Contiguous, Paged, Prefix };

// key_value_bytes: a key row's and a value row's bytes together.
int64_t blocks_for_budget(const sy_cache_config* c, int32_t block_size, int64_t budget_mb, int32_t key_value_bytes) {
  int64_t per_block = int64_t{c->num_layers} * c->kv_heads * block_size * key_value_bytes;
  return std::max<int64_t>(1, budget_mb * 1024 * 1024 / per_block);
}

// One class, three configurations (Kind), behind the SDK's cache builder.
template <Kind K>
class KvCache {
 public:
  KvCache(const sy_cache_config& c, const Options& opts) {
    const int32_t dtype = kv_dtype(opts, c.dtype);
    if (dtype != SY_DTYPE_FLOAT32 && dtype != SY_DTYPE_FLOAT16 && dtype != SY_DTYPE_BFLOAT16 && !SY_KV_ROW_QUANTIZED(dtype))
      throw sy::plugin::Error("KV caches hold float32, float16, bfloat16, int8 or fp8 (e4m3fn)", SY_UNSUPPORTED);
    if (dtype != SY_DTYPE_FLOAT32 && c.device != SY_DEVICE_CPU)
      throw sy::plugin::Error(std::string("cache dtype '") + opts.get_string("dtype") +
                                  "' is not readable by the CUDA PagedAttention kernel (it reads float32 KV): run attention on "
                                  "the CPU or keep the cache's dtype fp32",
                              SY_UNSUPPORTED);
    sy_cache::DeviceCopy device_copy = nullptr;
    if (c.device != SY_DEVICE_CPU) {
      device_copy = sy_cache::device_copy_for(c.device);
      if (!device_copy) throw sy::plugin::Error("this build of the cache plugin keeps KV in host memory only (built without CUDA)", SY_UNSUPPORTED);
    }
    // BlockCache sizes rows in elements of element_bytes; a quantized row is
    // head_dim codes and its scale, one byte each.
    sy_cache::Config cfg{c.num_layers, c.kv_heads, row_elements(dtype, c.head_dim), 0, 0, K == Kind::Prefix};
    cfg.value_dim = row_elements(dtype, sy_cache_value_head_dim(&c));
    cfg.device = c.device;
    cfg.element_bytes = element_bytes(dtype);
    const int64_t budget_mb = opts.get_int("budget_mb");
    cfg.block_size = static_cast<int32_t>(opts.get_int(K == Kind::Contiguous ? "max_seq_len" : "block_size"));
    if (cfg.block_size <= 0) throw sy::plugin::Error("block size must be positive", SY_INVALID_ARGUMENT);
    cfg.window = static_cast<int32_t>(opts.get_int("window"));
    if (cfg.window < 0) throw sy::plugin::Error("window must be >= 0", SY_INVALID_ARGUMENT);
    if (cfg.window > 0 && K == Kind::Contiguous) throw sy::plugin::Error("window needs a paged cache", SY_INVALID_ARGUMENT);
    cfg.dtype = dtype;
    if constexpr (K == Kind::Prefix) {
      cfg.disk_dir = opts.get_string("disk_dir");
      cfg.disk_bytes = opts.get_int("disk_mb") * 1024 * 1024;
      if (!cfg.disk_dir.empty() && cfg.disk_bytes <= 0) throw sy::plugin::Error("disk_mb must be positive", SY_INVALID_ARGUMENT);
      // A host before 1.7 passes no fingerprint (its struct ends earlier).
      if (c.struct_size >= offsetof(sy_cache_config, model_fingerprint) + sizeof(uint64_t)) cfg.model_fingerprint = c.model_fingerprint;
    }
    cfg.num_blocks = blocks_for_budget(&c, cfg.block_size, budget_mb, (cfg.head_dim + cfg.value_dim) * cfg.element_bytes);
    if (K != Kind::Contiguous) {
      const int64_t fixed = opts.get_int("num_blocks");
      if (fixed < 0) throw sy::plugin::Error("num_blocks must be >= 0", SY_INVALID_ARGUMENT);
      if (fixed > 0) cfg.num_blocks = fixed;
    }
    cache_ = std::make_unique<BlockCache>(cfg, sy::plugin::host(), device_copy);
    dims_ = {cfg.num_blocks, cfg.kv_heads, cfg.block_size, cfg.head_dim};
    value_dims_ = {cfg.num_blocks, cfg.kv_heads, cfg.block_size, cfg.value_dim};
    dtype_ = dtype;
  }

  bool allocate(uint64_t seq, int32_t n) { return cache_->allocate(seq, n); }
  void release(uint64_t seq) { cache_->release(seq); }
  const std::vector<int32_t>& block_table(uint64_t seq) { return cache_->table(seq); }
  void storage(int32_t layer, sy_tensor& k, sy_tensor& v) {
    if (layer < 0 || layer >= cache_->config().layers) throw sy::plugin::Error("no layer " + std::to_string(layer), SY_INVALID_ARGUMENT);
    const int32_t device = cache_->config().device;
    k = sy_tensor{dtype_, 4, dims_.data(), cache_->keys(layer), device, 0};
    v = sy_tensor{dtype_, 4, value_dims_.data(), cache_->values(layer), device, 0};
  }
  // Only the prefix-caching kind offers match_prefix: the host reads its
  // absence as "no prefix sharing" (KV export refuses, for one).
  int32_t match_prefix(uint64_t seq, const Tokens& t)
    requires(K == Kind::Prefix)
  {
    return cache_->match_prefix(seq, t.data, t.size);
  }
  void commit(uint64_t seq, const Tokens& t) { cache_->commit(seq, t.data, t.size); }
  void truncate(uint64_t seq, int32_t length) { cache_->truncate(seq, length); }
  void fork(uint64_t parent, uint64_t child) { cache_->fork(parent, child); }
  const std::vector<sy_cache_event>& take_events() { return cache_->take_events(); }
  void stats(sy_cache_stats& out) const {
    out.total_blocks = static_cast<int32_t>(cache_->config().num_blocks);
    out.free_blocks = static_cast<int32_t>(cache_->free_blocks());
    out.prefix_queries = cache_->prefix_queries;
    out.prefix_hits = cache_->prefix_hits;
  }


 private:
  std::unique_ptr<BlockCache> cache_;
  std::vector<int64_t> dims_, value_dims_;  // [num_blocks, kv_heads, block_size, row elements] of keys, of values
  int32_t dtype_ = SY_DTYPE_FLOAT32;
};

}  // namespace

SY_PLUGIN(builder) {
  using sy::plugin::option_int;
  using sy::plugin::option_string;
  auto dtype = option_string("dtype", "", "stored element type: fp32, fp16, bf16, int8 or fp8 (e4m3fn; int8 and fp8 rows carry a float16 scale) (default: the engine's, float32)");
  builder.info("switchyard-cache", "1.0.0", "KV-cache managers: contiguous, paged, prefix-caching");
  auto budget = option_int("budget_mb", "64", "KV memory for all layers, keys and values (MiB)");
  auto num_blocks = option_int("num_blocks", "0", "blocks of KV storage (0: as many as budget_mb holds)");
  auto window = option_int("window", "0", "sliding window of the attention (same as the pass's): free blocks outside it");
  builder.cache<KvCache<Kind::Contiguous>>("contiguous", "1.0.0", "one region of max_seq_len tokens per sequence",
                                          {option_int("max_seq_len", "1024", "tokens per sequence region"), budget, window, dtype});
  builder.cache<KvCache<Kind::Paged>>("paged", "1.0.0", "fixed-size blocks, free list, block tables, reference counts",
                                     {option_int("block_size", "16", "tokens per block"), budget, num_blocks, window, dtype});
  builder.cache<KvCache<Kind::Prefix>>(
      "prefix-caching", "1.1.0",
      "paged, with full blocks shared across requests by a hash chained with their prefix; LRU eviction; copy-on-write; "
      "optionally a disk tier that keeps blocks past eviction and restarts",
      {option_int("block_size", "16", "tokens per block"), budget, num_blocks, window, dtype,
       option_string("disk_dir", "", "directory of the disk tier (empty: none): committed blocks are written there, per model, "
                                     "and read back when a prompt needs them"),
       option_int("disk_mb", "4096", "size bound of the disk tier (MiB); least recently used blocks go first")});
}
