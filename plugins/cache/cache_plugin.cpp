// KV-cache managers behind the cache ABI: contiguous (one region per
// sequence), paged (fixed-size blocks) and prefix-caching (paged + shared
// prompt prefixes). One implementation, BlockCache, with three configurations.
#include <switchyard/plugin.hpp>

#include <memory>

#include "block_cache.h"

namespace {

using sy::plugin::guard;
using sy::plugin::Options;
using sy_cache::BlockCache;

struct State {
  std::unique_ptr<BlockCache> cache;
  std::vector<int64_t> dims;  // [num_blocks, kv_heads, block_size, head_dim]
  int32_t dtype = SY_DTYPE_FLOAT32;
};

// The stored element type: the option ("fp32", "fp16", "bf16"), else the
// engine's request.
int32_t kv_dtype(const Options& o, int32_t requested) {
  const std::string d = o.get_string("dtype");
  if (d.empty()) return requested;
  if (d == "fp32" || d == "float32") return SY_DTYPE_FLOAT32;
  if (d == "fp16" || d == "float16") return SY_DTYPE_FLOAT16;
  if (d == "bf16" || d == "bfloat16") return SY_DTYPE_BFLOAT16;
  throw sy::plugin::Error("dtype must be fp32, fp16 or bf16, got '" + d + "'", SY_INVALID_ARGUMENT);
}

enum class Kind { Contiguous, Paged, Prefix };

int64_t blocks_for_budget(const sy_cache_config* c, int32_t block_size, int64_t budget_mb, int32_t element_bytes) {
  int64_t per_block = 2LL * c->num_layers * c->kv_heads * block_size * c->head_dim * element_bytes;
  return std::max<int64_t>(1, budget_mb * 1024 * 1024 / per_block);
}

template <Kind K>
sy_status create(void*, const sy_cache_config* c, const sy_options* o, void** out) {
  return guard([&] {
    Options opts(o);
    const int32_t dtype = kv_dtype(opts, c->dtype);
    if (dtype != SY_DTYPE_FLOAT32 && dtype != SY_DTYPE_FLOAT16 && dtype != SY_DTYPE_BFLOAT16)
      throw sy::plugin::Error("KV caches hold float32, float16 or bfloat16", SY_UNSUPPORTED);
    if (dtype != SY_DTYPE_FLOAT32 && c->device != SY_DEVICE_CPU)
      throw sy::plugin::Error("a float16/bfloat16 KV cache is kept in host memory only (the CUDA attention reads float32)", SY_UNSUPPORTED);
    sy_cache::DeviceCopy device_copy = nullptr;
    if (c->device != SY_DEVICE_CPU) {
      device_copy = sy_cache::device_copy_for(c->device);
      if (!device_copy) throw sy::plugin::Error("this build of the cache plugin keeps KV in host memory only (built without CUDA)", SY_UNSUPPORTED);
    }
    sy_cache::Config cfg{c->num_layers, c->kv_heads, c->head_dim, 0, 0, K == Kind::Prefix};
    cfg.device = c->device;
    cfg.element_bytes = dtype == SY_DTYPE_FLOAT32 ? 4 : 2;
    int64_t budget_mb = opts.get_int("budget_mb");
    if (K == Kind::Contiguous) {
      cfg.block_size = static_cast<int32_t>(opts.get_int("max_seq_len"));
    } else {
      cfg.block_size = static_cast<int32_t>(opts.get_int("block_size"));
    }
    if (cfg.block_size <= 0) throw sy::plugin::Error("block size must be positive", SY_INVALID_ARGUMENT);
    cfg.window = static_cast<int32_t>(opts.get_int("window"));
    if (cfg.window < 0) throw sy::plugin::Error("window must be >= 0", SY_INVALID_ARGUMENT);
    if (cfg.window > 0 && K == Kind::Contiguous) throw sy::plugin::Error("window needs a paged cache", SY_INVALID_ARGUMENT);
    cfg.num_blocks = blocks_for_budget(c, cfg.block_size, budget_mb, cfg.element_bytes);
    if (K != Kind::Contiguous) {
      int64_t fixed = opts.get_int("num_blocks");
      if (fixed < 0) throw sy::plugin::Error("num_blocks must be >= 0", SY_INVALID_ARGUMENT);
      if (fixed > 0) cfg.num_blocks = fixed;
    }
    auto s = std::make_unique<State>();
    s->cache = std::make_unique<BlockCache>(cfg, sy::plugin::host(), device_copy);
    s->dims = {cfg.num_blocks, cfg.kv_heads, cfg.block_size, cfg.head_dim};
    s->dtype = dtype;
    *out = s.release();
  });
}

BlockCache& cache(void* s) { return *static_cast<State*>(s)->cache; }

sy_status allocate(void* s, uint64_t seq, int32_t n) {
  bool ok = false;
  sy_status st = guard([&] { ok = cache(s).allocate(seq, n); });
  if (st != SY_OK) return st;
  if (!ok) {
    sy::plugin::host()->set_error("KV cache full");
    return SY_OUT_OF_MEMORY;
  }
  return SY_OK;
}
sy_status match_prefix(void* s, uint64_t seq, const int32_t* t, int32_t n, int32_t* cached) {
  return guard([&] { *cached = cache(s).match_prefix(seq, t, n); });
}
sy_status commit(void* s, uint64_t seq, const int32_t* t, int32_t n) { return guard([&] { cache(s).commit(seq, t, n); }); }
sy_status truncate(void* s, uint64_t seq, int32_t len) { return guard([&] { cache(s).truncate(seq, len); }); }
sy_status fork(void* s, uint64_t p, uint64_t c) { return guard([&] { cache(s).fork(p, c); }); }
sy_status release(void* s, uint64_t seq) { return guard([&] { cache(s).release(seq); }); }
sy_status block_table(void* s, uint64_t seq, const int32_t** blocks, int32_t* n) {
  return guard([&] {
    const auto& t = cache(s).table(seq);
    *blocks = t.data();
    *n = static_cast<int32_t>(t.size());
  });
}
sy_status storage(void* s, int32_t layer, sy_tensor* k, sy_tensor* v) {
  return guard([&] {
    auto* st = static_cast<State*>(s);
    if (layer < 0 || layer >= st->cache->config().layers) throw sy::plugin::Error("no layer " + std::to_string(layer), SY_INVALID_ARGUMENT);
    const int32_t device = st->cache->config().device;
    *k = sy_tensor{st->dtype, 4, st->dims.data(), st->cache->keys(layer), device, 0};
    *v = sy_tensor{st->dtype, 4, st->dims.data(), st->cache->values(layer), device, 0};
  });
}
sy_status stats(void* s, sy_cache_stats* out) {
  return guard([&] {
    BlockCache& c = cache(s);
    out->total_blocks = static_cast<int32_t>(c.config().num_blocks);
    out->free_blocks = static_cast<int32_t>(c.free_blocks());
    out->prefix_queries = c.prefix_queries;
    out->prefix_hits = c.prefix_hits;
  });
}
void destroy(void* s) { delete static_cast<State*>(s); }

template <Kind K>
sy_cache_desc describe(sy::plugin::PluginBuilder& b, const char* name, const char* description,
                       const std::vector<sy::plugin::OptionSpec>& options) {
  sy_cache_desc d{};
  d.struct_size = sizeof(d);
  d.name = name;
  d.version = "1.0.0";
  d.description = description;
  d.options = b.options(options, d.num_options);
  d.create = create<K>;
  d.allocate = allocate;
  d.match_prefix = match_prefix;
  d.commit = commit;
  d.truncate = truncate;
  d.fork = fork;
  d.release = release;
  d.block_table = block_table;
  d.storage = storage;
  d.stats = stats;
  d.destroy = destroy;
  return d;
}

}  // namespace

SY_PLUGIN(builder) {
  using sy::plugin::option_int;
  using sy::plugin::option_string;
  auto dtype = option_string("dtype", "", "stored element type: fp32, fp16 or bf16 (default: the engine's, float32)");
  builder.info("switchyard-cache", "1.0.0", "KV-cache managers: contiguous, paged, prefix-caching");
  auto budget = option_int("budget_mb", "64", "KV memory for all layers, keys and values (MiB)");
  auto num_blocks = option_int("num_blocks", "0", "blocks of KV storage (0: as many as budget_mb holds)");
  auto window = option_int("window", "0", "sliding window of the attention (same as the pass's): free blocks outside it");
  builder.cache(describe<Kind::Contiguous>(builder, "contiguous", "one region of max_seq_len tokens per sequence",
                                           {option_int("max_seq_len", "1024", "tokens per sequence region"), budget, window, dtype}));
  builder.cache(describe<Kind::Paged>(builder, "paged", "fixed-size blocks, free list, block tables, reference counts",
                                      {option_int("block_size", "16", "tokens per block"), budget, num_blocks, window, dtype}));
  builder.cache(describe<Kind::Prefix>(builder, "prefix-caching",
                                       "paged, with full blocks shared across requests by a hash chained with their "
                                       "prefix; LRU eviction; copy-on-write",
                                       {option_int("block_size", "16", "tokens per block"), budget, num_blocks, window, dtype}));
}
