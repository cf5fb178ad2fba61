#include "block_cache.h"

#include <cstring>
#include <stdexcept>

namespace sy_cache {

BlockCache::BlockCache(const Config& c, const sy_host_api* host, DeviceCopy device_copy)
    : c_(c), host_(host), device_copy_(device_copy) {
  if (c.device != SY_DEVICE_CPU && !device_copy)
    throw std::invalid_argument("cache: a device KV cache needs a device copy function");
  if (c.block_size <= 0 || c.num_blocks <= 0 || c.layers <= 0 || c.kv_heads <= 0 || c.head_dim <= 0)
    throw std::invalid_argument("cache: layers, kv_heads, head_dim, block_size and num_blocks must be positive");
  if (c.num_blocks > INT32_MAX) throw std::invalid_argument("cache: too many blocks");
  if (c.element_bytes != 4 && c.element_bytes != 2 && c.element_bytes != 1) throw std::invalid_argument("cache: elements must be 4, 2 or 1 bytes");
  if (c.value_dim < 0) throw std::invalid_argument("cache: value_dim must be >= 0");
  auto block_bytes = [&](int32_t elements) {
    return static_cast<size_t>(c.kv_heads) * static_cast<size_t>(c.block_size) * static_cast<size_t>(elements) * static_cast<size_t>(c.element_bytes);
  };
  k_block_bytes_ = block_bytes(c.head_dim);
  v_block_bytes_ = block_bytes(c.value_dim > 0 ? c.value_dim : c.head_dim);
  for (int32_t l = 0; l < c.layers; ++l) {
    auto* k = static_cast<std::byte*>(storage_alloc(k_block_bytes_ * static_cast<size_t>(c.num_blocks)));
    auto* v = static_cast<std::byte*>(storage_alloc(v_block_bytes_ * static_cast<size_t>(c.num_blocks)));
    if (!k || !v) {
      storage_free(k);
      storage_free(v);
      for (size_t i = 0; i < k_.size(); ++i) {
        storage_free(k_[i]);
        storage_free(v_[i]);
      }
      throw std::bad_alloc();
    }
    k_.push_back(k);
    v_.push_back(v);
  }
  refs_.assign(static_cast<size_t>(c.num_blocks), 0);
  for (int64_t b = c.num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
  if (!c.disk_dir.empty()) {
    if (!c.prefix_caching) throw std::invalid_argument("cache: a disk tier holds prefix-cache blocks: use prefix-caching");
    if (c.device != SY_DEVICE_CPU) throw std::invalid_argument("cache: the disk tier keeps KV of host-memory caches only");
    if (c.model_fingerprint == 0) throw std::invalid_argument("cache: the disk tier needs the model's fingerprint (a host of ABI 1.7 or later)");
    const BlockGeometry g{c.layers, c.kv_heads, c.head_dim, c.element_bytes, c.block_size, c.dtype, c.model_fingerprint, c.value_dim};
    const sy_host_api* h = host_;
    disk_ = std::make_unique<DiskTier>(c.disk_dir, c.disk_bytes, g, [h](const std::string& m) {
      if (h && h->log) h->log(SY_LOG_WARNING, m.c_str());
    });
  }
}

BlockCache::~BlockCache() {
  disk_.reset();  // its queued writes copied their bytes; finish them first
  for (std::byte* p : k_) storage_free(p);
  for (std::byte* p : v_) storage_free(p);
}

void* BlockCache::storage_alloc(size_t bytes) {
  if (c_.device == SY_DEVICE_CPU) return host_->alloc(bytes, 64);
  void* p = nullptr;
  return host_->device_alloc(c_.device, bytes, &p) == SY_OK ? p : nullptr;
}

void BlockCache::storage_free(void* p) {
  if (!p) return;
  if (c_.device == SY_DEVICE_CPU) host_->free(p);
  else host_->device_free(c_.device, p);
}

uint64_t BlockCache::chain_hash(uint64_t parent, const int32_t* tokens, int32_t n) {
  uint64_t h = 1469598103934665603ull ^ (parent * 1099511628211ull);
  for (int32_t i = 0; i < n; ++i) {
    h ^= static_cast<uint32_t>(tokens[i]);
    h *= 1099511628211ull;
  }
  return h;
}

BlockCache::Seq& BlockCache::seq(uint64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) throw std::out_of_range("cache: unknown sequence " + std::to_string(id));
  return it->second;
}

const std::vector<int32_t>& BlockCache::table(uint64_t id) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) throw std::out_of_range("cache: unknown sequence " + std::to_string(id));
  return it->second.blocks;
}

void BlockCache::uncache(int32_t b) {
  auto it = cached_.find(b);
  if (it == cached_.end()) return;
  auto range = by_hash_.equal_range(it->second.hash);
  for (auto h = range.first; h != range.second; ++h)
    if (h->second == b) {
      by_hash_.erase(h);
      break;
    }
  if (it->second.in_lru) lru_.erase(it->second.lru);
  cached_.erase(it);
  if (events_wanted_) pending_events_.events.push_back(sy_cache_event{SY_CACHE_BLOCK_REMOVED, b, -1, 0, nullptr});
}

const std::vector<sy_cache_event>& BlockCache::take_events() {
  events_wanted_ = true;
  std::swap(taken_events_, pending_events_);
  pending_events_.events.clear();
  pending_events_.tokens.clear();
  return taken_events_.events;
}

int32_t BlockCache::take_block() {
  int32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else {
    b = lru_.front();  // callers checked free_blocks() first
    uncache(b);
  }
  refs_[static_cast<size_t>(b)] = 1;
  return b;
}

void BlockCache::drop_ref(int32_t b) {
  if (--refs_[static_cast<size_t>(b)] > 0) return;
  auto it = cached_.find(b);
  if (it != cached_.end()) {
    it->second.lru = lru_.insert(lru_.end(), b);
    it->second.in_lru = true;
  } else {
    free_.push_back(b);
  }
}

void BlockCache::copy_block(int32_t from, int32_t to) {
  const size_t kb = k_block_bytes_, vb = v_block_bytes_;
  auto copy = c_.device == SY_DEVICE_CPU ? [](void* d, const void* s, size_t n) { std::memcpy(d, s, n); } : device_copy_;
  for (int32_t l = 0; l < c_.layers; ++l) {
    copy(k_[static_cast<size_t>(l)] + static_cast<size_t>(to) * kb, k_[static_cast<size_t>(l)] + static_cast<size_t>(from) * kb, kb);
    copy(v_[static_cast<size_t>(l)] + static_cast<size_t>(to) * vb, v_[static_cast<size_t>(l)] + static_cast<size_t>(from) * vb, vb);
  }
}

void BlockCache::register_block(int32_t b, uint64_t hash, int32_t parent, const int32_t* tokens) {
  Cached c;
  c.hash = hash;
  c.parent = parent;
  c.tokens.assign(tokens, tokens + c_.block_size);
  if (events_wanted_) {
    const std::vector<int32_t>& t = pending_events_.tokens.emplace_back(c.tokens);
    pending_events_.events.push_back(sy_cache_event{SY_CACHE_BLOCK_STORED, b, c.parent, c_.block_size, t.data()});
  }
  cached_.emplace(b, std::move(c));
  by_hash_.emplace(hash, b);
}

void BlockCache::store_on_disk(int32_t b, uint64_t hash, uint64_t parent_hash, const int32_t* tokens) {
  const size_t kb = k_block_bytes_, vb = v_block_bytes_;
  std::vector<uint8_t> payload(static_cast<size_t>(c_.layers) * (kb + vb));
  uint8_t* out = payload.data();
  for (int32_t l = 0; l < c_.layers; ++l) {
    std::memcpy(out, k_[static_cast<size_t>(l)] + static_cast<size_t>(b) * kb, kb);
    std::memcpy(out + kb, v_[static_cast<size_t>(l)] + static_cast<size_t>(b) * vb, vb);
    out += kb + vb;
  }
  disk_->store(hash, parent_hash, tokens, std::move(payload));
}

bool BlockCache::load_from_disk(int32_t b, uint64_t hash, uint64_t parent_hash, const int32_t* tokens) {
  std::vector<uint8_t> payload;
  if (!disk_->load(hash, parent_hash, tokens, payload)) return false;
  const size_t kb = k_block_bytes_, vb = v_block_bytes_;
  const uint8_t* in = payload.data();
  for (int32_t l = 0; l < c_.layers; ++l) {
    std::memcpy(k_[static_cast<size_t>(l)] + static_cast<size_t>(b) * kb, in, kb);
    std::memcpy(v_[static_cast<size_t>(l)] + static_cast<size_t>(b) * vb, in + kb, vb);
    in += kb + vb;
  }
  return true;
}

bool BlockCache::allocate(uint64_t id, int32_t n) {
  if (n < 0) throw std::invalid_argument("cache: negative token count");
  bool fresh = !seqs_.count(id);
  Seq& s = seqs_[id];
  const int32_t B = c_.block_size;
  int64_t need = (static_cast<int64_t>(s.length) + n + B - 1) / B - static_cast<int64_t>(s.blocks.size());
  // Writing into a partly filled last block that another sequence shares: copy it first.
  bool cow = n > 0 && s.length % B != 0 && refs_[static_cast<size_t>(s.blocks.back())] > 1;
  int64_t required = std::max<int64_t>(need, 0) + (cow ? 1 : 0);
  if (required > free_blocks()) {
    if (fresh) seqs_.erase(id);
    return false;
  }
  if (cow) {
    int32_t old = s.blocks.back();
    int32_t nb = take_block();
    copy_block(old, nb);
    drop_ref(old);
    s.blocks.back() = nb;
  }
  for (int64_t i = 0; i < need; ++i) s.blocks.push_back(take_block());
  int32_t old_length = s.length;
  s.length += n;
  if (c_.window > 0) {
    // The earliest query of this step sits at old_length and sees keys from
    // old_length - window + 1 on: blocks wholly before that are never read again.
    int64_t first_needed = static_cast<int64_t>(old_length) - c_.window + 1;
    for (size_t i = 0; i < s.blocks.size() && static_cast<int64_t>(i + 1) * B <= first_needed; ++i)
      if (s.blocks[i] >= 0) {
        drop_ref(s.blocks[i]);
        s.blocks[i] = -1;
      }
  }
  return true;
}

int32_t BlockCache::match_prefix(uint64_t id, const int32_t* tokens, int32_t n) {
  if (!c_.prefix_caching || n <= 0) return 0;
  Seq& s = seqs_[id];
  if (!s.blocks.empty()) throw std::logic_error("cache: match_prefix on a sequence that already has blocks");
  prefix_queries += n;
  const int32_t B = c_.block_size;
  int32_t max_blocks = (n - 1) / B;  // at least one token is left to compute
  int32_t parent = -1;
  uint64_t h = 0;
  for (int32_t i = 0; i < max_blocks; ++i) {
    uint64_t hi = chain_hash(h, tokens + static_cast<ptrdiff_t>(i) * B, B);
    int32_t found = -1;
    auto range = by_hash_.equal_range(hi);
    for (auto it = range.first; it != range.second && found < 0; ++it) {
      const Cached& c = cached_.at(it->second);
      if (c.parent == parent && std::equal(c.tokens.begin(), c.tokens.end(), tokens + static_cast<ptrdiff_t>(i) * B)) found = it->second;
    }
    if (found < 0 && disk_ && disk_->has(hi) && free_blocks() > 0) {
      // Evicted from RAM (or written by an earlier process): read it back
      // into a block of its own, findable in RAM again.
      const int32_t b = take_block();
      if (!load_from_disk(b, hi, h, tokens + static_cast<ptrdiff_t>(i) * B)) {
        refs_[static_cast<size_t>(b)] = 0;
        free_.push_back(b);
        break;
      }
      register_block(b, hi, parent, tokens + static_cast<ptrdiff_t>(i) * B);
      disk_hits += B;
      s.blocks.push_back(b);  // take_block gave it its one reference
      parent = b;
      h = hi;
      continue;
    }
    if (found < 0) break;
    Cached& c = cached_.at(found);
    if (c.in_lru) {
      lru_.erase(c.lru);
      c.in_lru = false;
    }
    ++refs_[static_cast<size_t>(found)];
    s.blocks.push_back(found);
    parent = found;
    h = hi;
  }
  if (s.blocks.empty()) {
    seqs_.erase(id);  // nothing matched: the sequence starts with allocate
    return 0;
  }
  s.length = static_cast<int32_t>(s.blocks.size()) * B;
  s.committed = static_cast<int32_t>(s.blocks.size());
  s.last_hash = h;
  prefix_hits += s.length;
  return s.length;
}

void BlockCache::commit(uint64_t id, const int32_t* tokens, int32_t n) {
  if (!c_.prefix_caching) return;
  Seq& s = seq(id);
  const int32_t B = c_.block_size;
  int32_t full = std::min(n, s.length) / B;
  for (int32_t i = s.committed; i < full; ++i) {
    int32_t b = s.blocks[static_cast<size_t>(i)];
    if (b < 0) return;  // windowed-out blocks cannot be shared
    uint64_t h = chain_hash(s.last_hash, tokens + static_cast<ptrdiff_t>(i) * B, B);
    if (!cached_.count(b)) register_block(b, h, i > 0 ? s.blocks[static_cast<size_t>(i - 1)] : -1, tokens + static_cast<ptrdiff_t>(i) * B);
    if (disk_) store_on_disk(b, h, s.last_hash, tokens + static_cast<ptrdiff_t>(i) * B);
    s.last_hash = h;
    s.committed = i + 1;
  }
}

void BlockCache::truncate(uint64_t id, int32_t length) {
  Seq& s = seq(id);
  if (length < 0) throw std::invalid_argument("cache: negative length");
  if (length >= s.length) return;
  const int32_t B = c_.block_size;
  size_t keep = static_cast<size_t>((length + B - 1) / B);
  while (s.blocks.size() > keep) {
    if (s.blocks.back() >= 0) drop_ref(s.blocks.back());
    s.blocks.pop_back();
  }
  s.length = length;
  if (s.committed > length / B) {
    s.committed = length / B;
    s.last_hash = s.committed > 0 ? cached_.at(s.blocks[static_cast<size_t>(s.committed - 1)]).hash : 0;
  }
  // A registered block that this sequence alone will now overwrite must stop
  // being findable; a shared one is copied on the next allocate instead.
  if (length % B != 0) {
    int32_t last = s.blocks.back();
    if (refs_[static_cast<size_t>(last)] == 1) uncache(last);
  }
}

void BlockCache::fork(uint64_t parent, uint64_t child) {
  if (seqs_.count(child)) throw std::invalid_argument("cache: fork target " + std::to_string(child) + " exists");
  Seq copy = seq(parent);
  for (int32_t b : copy.blocks)
    if (b >= 0) ++refs_[static_cast<size_t>(b)];
  seqs_.emplace(child, std::move(copy));
}

void BlockCache::release(uint64_t id) {
  Seq& s = seq(id);
  for (auto it = s.blocks.rbegin(); it != s.blocks.rend(); ++it)
    if (*it >= 0) drop_ref(*it);
  seqs_.erase(id);
}

}  // namespace sy_cache
