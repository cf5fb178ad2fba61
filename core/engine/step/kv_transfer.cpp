// KV transfer between engines (prefill/decode disaggregation): the blocks of
// a cached prompt prefix leave one engine as bytes and enter another's
// prefix cache, where the next request with that prompt finds them.
//
// Format, version 3 (little-endian; written and read on little-endian hosts):
//   "SYKV", u32 version = 3,
//   u32 layers, kv_heads, block_size, head_dim, dtype (ONNX code), vocab,
//   u32 num_blocks, value_dim (the value rows' size: latent attention caches
//   values of another size than keys),
//   i32 tokens[num_blocks * block_size],
//   u64 hashes[num_blocks]    (kv_block_hash chain over the tokens: checked on import),
//   u64 checksums[num_blocks] (of each block's KV bytes: checked on import,
//                              so corrupted values are never served),
//   then for each block, for each layer: keys, values
//   ([kv_heads, block_size, head_dim] and [.., value_dim] elements, as the
//   cache stores them).
// The engines must run the same model with the same KV geometry and dtype.
// Version 2 (no value_dim: values as wide as keys) is still read. Version 1
// had no checksums; it is refused (its values cannot be checked).
#include <bit>
#include <cstddef>
#include <cstring>

#include "engine/step_engine.h"

namespace sy {

static_assert(std::endian::native == std::endian::little, "the KV transfer format is written in the host's byte order");

namespace {

constexpr char kMagic[4] = {'S', 'Y', 'K', 'V'};
constexpr uint32_t kVersion = 3;

struct Header {
  uint32_t layers, kv_heads, block_size, head_dim, dtype, vocab, num_blocks, value_dim;
};
constexpr size_t kHeaderV2Bytes = offsetof(Header, value_dim);  // version 2 ended before value_dim

// This engine's KV geometry, as the header records it (num_blocks left 0).
Header geometry(const std::vector<sy_tensor>& keys, const std::vector<sy_tensor>& values, int32_t block_size, int64_t vocab) {
  const sy_tensor& k = keys[0];
  return Header{static_cast<uint32_t>(keys.size()), static_cast<uint32_t>(k.dims[1]), static_cast<uint32_t>(block_size),
                static_cast<uint32_t>(k.dims[3]),     static_cast<uint32_t>(k.dtype),   static_cast<uint32_t>(std::max<int64_t>(vocab, 0)),
                0,                                    static_cast<uint32_t>(values[0].dims[3])};
}

// Bytes of one layer's key (value) block.
size_t block_bytes(const sy_tensor& t) {
  return static_cast<size_t>(t.dims[1] * t.dims[2] * t.dims[3]) * dtype_size(static_cast<DType>(t.dtype));
}

// A 64-bit checksum of a block's KV bytes, 8 bytes at a time (a
// multiply-xorshift mix: not cryptographic, it catches corruption in
// transit and storage, not an attacker who recomputes it).
class Checksum {
 public:
  void add(const char* p, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      mix(w);
    }
    uint64_t tail = 0;
    std::memcpy(&tail, p + i, n - i);
    mix(tail ^ (static_cast<uint64_t>(n - i) << 56));
  }
  uint64_t value() const { return h_ ^ (h_ >> 29); }

 private:
  void mix(uint64_t w) {
    h_ = (h_ ^ (w * 0x9E3779B97F4A7C15ULL)) * 0xBF58476D1CE4E5B9ULL;
    h_ ^= h_ >> 31;
  }
  uint64_t h_ = 0x2545F4914F6CDD1DULL;
};

// ids and one token more: match_prefix then takes ids' last block when it
// is full (it always leaves a token to compute).
std::vector<int32_t> probe_for(const std::vector<int32_t>& ids) {
  std::vector<int32_t> probe(ids);
  probe.push_back(0);
  return probe;
}

template <typename T>
void put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

class Reader {
 public:
  explicit Reader(const std::string& s) : s_(s) {}
  const char* take(size_t n, const char* what) {
    SY_CHECK(n <= s_.size() - at_, "KV import: the data ends inside " << what << " (" << s_.size() << " bytes)");
    const char* p = s_.data() + at_;
    at_ += n;
    return p;
  }
  template <typename T>
  T get(const char* what) {
    T v;
    std::memcpy(&v, take(sizeof v, what), sizeof v);
    return v;
  }
  size_t left() const { return s_.size() - at_; }

 private:
  const std::string& s_;
  size_t at_ = 0;
};

}  // namespace


std::string StepEngine::export_kv(const std::vector<int32_t>& ids) {
  // Without prefix caching nothing is ever findable: an empty export would
  // look like a prompt not computed yet.
  SY_CHECK_KIND(cache_.caches_prefixes(), ErrorKind::Unsupported,
                "KV export: the cache manager keeps no prefix cache, so there are no blocks to export (select 'prefix-caching')");
  const auto layers = static_cast<int32_t>(runner_.key_cache().size());
  SY_CHECK_KIND(runner_.key_cache()[0].device == SY_DEVICE_CPU, ErrorKind::Unsupported,
                "KV export: the KV cache is in device memory; export reads host memory only");
  const size_t key_bytes = block_bytes(runner_.key_cache()[0]), value_bytes = block_bytes(runner_.value_cache()[0]);
  Header h = geometry(runner_.key_cache(), runner_.value_cache(), runner_.block_size(), model_.vocab_size());
  std::string out(kMagic, 4);
  put(out, kVersion);
  std::lock_guard<std::mutex> lock(model_mu_);
  const uint64_t seq = queue_.new_id();
  const int32_t cached = cache_.match_prefix(seq, probe_for(ids));
  std::vector<int32_t> table;
  if (cached > 0) {
    try {
      table = cache_.block_table(seq);
    } catch (...) {
      cache_.release(seq);
      throw;
    }
  }
  const auto blocks = static_cast<uint32_t>(std::min<size_t>(table.size(), static_cast<size_t>(cached / runner_.block_size())));
  h.num_blocks = blocks;
  put(out, h);
  out.append(reinterpret_cast<const char*>(ids.data()), static_cast<size_t>(blocks) * static_cast<size_t>(runner_.block_size()) * sizeof(int32_t));
  for (uint64_t hash : kv_block_hashes(ids.data(), static_cast<int64_t>(blocks) * runner_.block_size(), runner_.block_size())) put(out, hash);
  const size_t sums_at = out.size();
  out.append(static_cast<size_t>(blocks) * sizeof(uint64_t), '\0');
  out.reserve(out.size() + static_cast<size_t>(blocks) * static_cast<size_t>(layers) * (key_bytes + value_bytes));
  for (uint32_t b = 0; b < blocks; ++b) {
    Checksum sum;
    for (int32_t l = 0; l < layers; ++l)
      for (const sy_tensor* t : {&runner_.key_cache()[static_cast<size_t>(l)], &runner_.value_cache()[static_cast<size_t>(l)]}) {
        const size_t n = t == &runner_.key_cache()[static_cast<size_t>(l)] ? key_bytes : value_bytes;
        const char* block = static_cast<const char*>(t->data) + static_cast<size_t>(table[b]) * n;
        sum.add(block, n);
        out.append(block, n);
      }
    const uint64_t v = sum.value();
    std::memcpy(out.data() + sums_at + b * sizeof(uint64_t), &v, sizeof v);
  }
  if (cached > 0) cache_.release(seq);
  drain_cache_events();
  return out;
}

int32_t StepEngine::import_kv(const std::string& data) {
  Reader r(data);
  SY_CHECK(std::memcmp(r.take(4, "the magic number"), kMagic, 4) == 0, "KV import: not a Switchyard KV export (no SYKV magic)");
  const auto version = r.get<uint32_t>("the version");
  SY_CHECK(version == kVersion || version == 2, "KV import: format version " << version << " (this engine reads versions 2 and " << kVersion
                                                               << (version == 1 ? ", whose blocks carry checksums of their values)" : ")"));
  Header h{};
  std::memcpy(&h, r.take(version == 2 ? kHeaderV2Bytes : sizeof h, "the header"), version == 2 ? kHeaderV2Bytes : sizeof h);
  if (version == 2) h.value_dim = h.head_dim;
  const auto layers = static_cast<uint32_t>(runner_.key_cache().size());
  Header mine = geometry(runner_.key_cache(), runner_.value_cache(), runner_.block_size(), model_.vocab_size());
  mine.num_blocks = h.num_blocks;
  SY_CHECK(std::memcmp(&h, &mine, sizeof h) == 0,
           "KV import: the export's KV geometry (layers " << h.layers << ", kv_heads " << h.kv_heads << ", block_size " << h.block_size
                                                          << ", head_dim " << h.head_dim << "/" << h.value_dim << ", dtype " << h.dtype
                                                          << ", vocab " << h.vocab << ") is not this engine's (" << mine.layers << ", "
                                                          << mine.kv_heads << ", " << mine.block_size << ", " << mine.head_dim << "/"
                                                          << mine.value_dim << ", " << mine.dtype << ", " << mine.vocab
                                                          << "): another model or cache configuration");
  SY_CHECK_KIND(runner_.key_cache()[0].device == SY_DEVICE_CPU, ErrorKind::Unsupported,
                "KV import: the KV cache is in device memory; import writes host memory only");
  const size_t n_tokens = static_cast<size_t>(h.num_blocks) * h.block_size;
  SY_CHECK(n_tokens <= static_cast<size_t>(model_.max_context()), "KV import: " << n_tokens << " tokens, over the model's context");
  std::vector<int32_t> ids(n_tokens);
  std::memcpy(ids.data(), r.take(n_tokens * sizeof(int32_t), "the tokens"), n_tokens * sizeof(int32_t));
  const std::vector<uint64_t> expect = kv_block_hashes(ids.data(), static_cast<int64_t>(n_tokens), runner_.block_size());
  for (uint32_t b = 0; b < h.num_blocks; ++b)
    SY_CHECK(r.get<uint64_t>("the block hashes") == expect[b], "KV import: block " << b << "'s hash does not match its tokens (corrupted data)");
  std::vector<uint64_t> sums(h.num_blocks);
  for (uint32_t b = 0; b < h.num_blocks; ++b) sums[b] = r.get<uint64_t>("the block checksums");
  const size_t key_bytes = block_bytes(runner_.key_cache()[0]), value_bytes = block_bytes(runner_.value_cache()[0]);
  const size_t layer_bytes = key_bytes + value_bytes;  // one layer's keys then values, in a block
  const size_t payload = static_cast<size_t>(h.num_blocks) * layers * layer_bytes;
  SY_CHECK(r.left() == payload, "KV import: " << r.left() << " bytes of KV data, expected " << payload);
  const char* kv = r.take(payload, "the KV data");
  const size_t all_layers = static_cast<size_t>(layers) * layer_bytes;
  for (uint32_t b = 0; b < h.num_blocks; ++b) {
    Checksum sum;  // part by part, as the export added them
    for (size_t l = 0; l < layers; ++l) {
      sum.add(kv + b * all_layers + l * layer_bytes, key_bytes);
      sum.add(kv + b * all_layers + l * layer_bytes + key_bytes, value_bytes);
    }
    SY_CHECK(sum.value() == sums[b], "KV import: block " << b << "'s KV values do not match their checksum (corrupted data)");
  }
  if (h.num_blocks == 0) return 0;

  std::lock_guard<std::mutex> lock(model_mu_);
  const uint64_t seq = queue_.new_id();
  // Blocks this cache already holds stay; the rest are written and committed.
  const std::vector<int32_t> probe = probe_for(ids);
  const int32_t cached = cache_.match_prefix(seq, probe);
  const auto have = static_cast<uint32_t>(cached / runner_.block_size());
  bool holds = cached > 0;
  try {
    if (have < h.num_blocks) {
      const auto need = static_cast<int32_t>(n_tokens) - have * runner_.block_size();
      SY_CHECK_KIND(cache_.allocate(seq, need), ErrorKind::OutOfMemory,
                    "KV import: the KV cache has no room for " << (h.num_blocks - have) << " blocks ("
                                                              << cache_.last_refusal() << ")");
      holds = true;
      const std::vector<int32_t> table = cache_.block_table(seq);
      SY_CHECK_KIND(table.size() >= h.num_blocks, ErrorKind::PluginFailure, "KV import: the cache manager's block table is too short");
      for (uint32_t b = have; b < h.num_blocks; ++b)
        for (uint32_t l = 0; l < layers; ++l)
          for (int kvi = 0; kvi < 2; ++kvi) {
            const sy_tensor& t = kvi == 0 ? runner_.key_cache()[l] : runner_.value_cache()[l];
            const size_t n = kvi == 0 ? key_bytes : value_bytes;
            std::memcpy(static_cast<char*>(t.data) + static_cast<size_t>(table[b]) * n,
                        kv + b * all_layers + l * layer_bytes + (kvi == 0 ? 0 : key_bytes), n);
          }
      cache_.commit(seq, ids.data(), static_cast<int32_t>(n_tokens));
    }
  } catch (...) {
    if (holds) cache_.release(seq);
    throw;
  }
  if (holds) cache_.release(seq);
  // What a request with this prompt will now find (a cache manager without
  // prefix caching forgets the blocks on release).
  const uint64_t check = queue_.new_id();
  const int32_t found = cache_.match_prefix(check, probe);
  if (found > 0) cache_.release(check);
  drain_cache_events();
  SY_CHECK_KIND(found > 0, ErrorKind::Unsupported,
                "KV import: the cache manager keeps no prefix cache, so imported blocks cannot be found (select 'prefix-caching')");
  return found;
}

}  // namespace sy
