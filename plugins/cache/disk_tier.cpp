#include "disk_tier.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <system_error>

namespace sy_cache {

namespace fs = std::filesystem;

namespace {

constexpr uint32_t kMagic = 0x564b5953;  // "SYKV"
constexpr uint32_t kVersion = 1;
// Writes waiting for the disk beyond this are skipped (the block stays in
// RAM; only its copy on disk is lost), so a slow disk never grows memory.
constexpr int64_t kMaxQueuedBytes = int64_t{256} << 20;

// The fixed part of a file; the block's tokens follow it, then the payload.
struct Header {
  uint32_t magic, version;
  uint64_t fingerprint;
  int32_t layers, kv_heads, row_elements, element_bytes, block_size, dtype;
  uint64_t hash, parent_hash, payload_bytes, checksum;
};

uint64_t fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

DiskTier::DiskTier(const fs::path& dir, int64_t max_bytes, const BlockGeometry& g, Log log)
    : dir_(dir / hex(g.model_fingerprint)), max_bytes_(max_bytes), g_(g), log_(std::move(log)) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw std::runtime_error("disk tier: cannot create " + dir_.string() + ": " + ec.message());
  // The index from what a previous process left: oldest modification first
  // in the LRU order; half-written temporaries are removed.
  std::vector<std::pair<fs::file_time_type, std::pair<uint64_t, int64_t>>> found;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const fs::path p = e.path();
    if (p.extension() == ".tmp") {
      fs::remove(p, ec);
      continue;
    }
    if (p.extension() != ".kv" || p.stem().string().size() != 16) continue;
    uint64_t hash = 0;
    if (std::sscanf(p.stem().string().c_str(), "%16llx", reinterpret_cast<unsigned long long*>(&hash)) != 1) continue;
    found.push_back({e.last_write_time(ec), {hash, static_cast<int64_t>(e.file_size(ec))}});
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [t, f] : found) add(f.first, f.second);
  evict_over_budget();
  thread_ = std::thread([this] { writer(); });
}

DiskTier::~DiskTier() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

fs::path DiskTier::file_of(uint64_t hash) const { return dir_ / (hex(hash) + ".kv"); }

void DiskTier::touch(uint64_t hash) {
  auto it = index_.find(hash);
  if (it != index_.end()) lru_.splice(lru_.end(), lru_, it->second.lru);
}

void DiskTier::add(uint64_t hash, int64_t bytes) {
  if (index_.count(hash)) return;
  lru_.push_back(hash);
  index_.emplace(hash, Entry{bytes, std::prev(lru_.end())});
  bytes_ += bytes;
}

void DiskTier::evict_over_budget() {
  std::error_code ec;
  while (bytes_ > max_bytes_ && !lru_.empty()) {
    const uint64_t h = lru_.front();
    lru_.pop_front();
    bytes_ -= index_.at(h).bytes;
    index_.erase(h);
    fs::remove(file_of(h), ec);  // a write still queued for it finds it gone from the index and is skipped
  }
}

void DiskTier::drop(uint64_t hash, const std::string& why) {
  std::error_code ec;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = index_.find(hash);
    if (it != index_.end()) {
      bytes_ -= it->second.bytes;
      lru_.erase(it->second.lru);
      index_.erase(it);
    }
  }
  fs::remove(file_of(hash), ec);
  ++dropped;
  if (log_) log_("KV disk tier: dropped " + file_of(hash).string() + ": " + why);
}

void DiskTier::store(uint64_t hash, uint64_t parent_hash, const int32_t* tokens, std::vector<uint8_t> payload) {
  if (payload.size() != g_.payload_bytes()) throw std::invalid_argument("disk tier: payload of the wrong size");
  std::unique_lock<std::mutex> l(mu_);
  if (index_.count(hash)) {
    touch(hash);
    return;
  }
  const size_t token_bytes = static_cast<size_t>(g_.block_size) * sizeof(int32_t);
  if (queued_bytes_ + static_cast<int64_t>(payload.size()) > kMaxQueuedBytes) return;
  l.unlock();
  Header h{kMagic, kVersion, g_.model_fingerprint, g_.layers, g_.kv_heads, g_.row_elements, g_.element_bytes, g_.block_size, g_.dtype,
           hash, parent_hash, payload.size(), fnv1a(payload.data(), payload.size())};
  std::vector<uint8_t> file(sizeof(Header) + token_bytes + payload.size());
  std::memcpy(file.data(), &h, sizeof h);
  std::memcpy(file.data() + sizeof h, tokens, token_bytes);
  std::memcpy(file.data() + sizeof h + token_bytes, payload.data(), payload.size());
  l.lock();
  if (index_.count(hash)) return;
  add(hash, static_cast<int64_t>(file.size()));
  queued_bytes_ += static_cast<int64_t>(file.size());
  queue_.push_back(Write{hash, std::move(file)});
  evict_over_budget();
  l.unlock();
  wake_.notify_one();
}

bool DiskTier::has(uint64_t hash) const {
  std::lock_guard<std::mutex> l(mu_);
  return index_.count(hash) > 0;
}

bool DiskTier::load(uint64_t hash, uint64_t parent_hash, const int32_t* tokens, std::vector<uint8_t>& payload) {
  const fs::path path = file_of(hash);
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    // Not written yet (still queued) or removed under us: not an error.
    std::lock_guard<std::mutex> l(mu_);
    const bool queued = std::any_of(queue_.begin(), queue_.end(), [&](const Write& w) { return w.hash == hash; }) || busy_;
    if (!queued) {
      auto it = index_.find(hash);
      if (it != index_.end()) {
        bytes_ -= it->second.bytes;
        lru_.erase(it->second.lru);
        index_.erase(it);
      }
    }
    return false;
  }
  auto fail = [&](const std::string& why) {
    drop(hash, why);
    return false;
  };
  Header h{};
  const size_t token_bytes = static_cast<size_t>(g_.block_size) * sizeof(int32_t);
  std::vector<int32_t> stored(static_cast<size_t>(g_.block_size));
  if (!in.read(reinterpret_cast<char*>(&h), sizeof h)) return fail("shorter than its header");
  if (h.magic != kMagic || h.version != kVersion) return fail("not a Switchyard KV block file of version 1");
  if (h.fingerprint != g_.model_fingerprint) return fail("written for another model (fingerprint " + hex(h.fingerprint) + ")");
  if (h.layers != g_.layers || h.kv_heads != g_.kv_heads || h.row_elements != g_.row_elements || h.element_bytes != g_.element_bytes ||
      h.block_size != g_.block_size || h.dtype != g_.dtype)
    return fail("KV geometry or dtype differs from this cache's");
  if (h.hash != hash || h.parent_hash != parent_hash) return fail("its block hash or its parent's differs from the name's");
  if (h.payload_bytes != g_.payload_bytes()) return fail("payload size differs from the geometry's");
  if (!in.read(reinterpret_cast<char*>(stored.data()), static_cast<std::streamsize>(token_bytes)))
    return fail("truncated in its tokens");
  if (!std::equal(stored.begin(), stored.end(), tokens)) return fail("holds other tokens than the prompt's block");
  payload.resize(g_.payload_bytes());
  if (!in.read(reinterpret_cast<char*>(payload.data()), static_cast<std::streamsize>(payload.size())))
    return fail("truncated in its payload");
  if (in.peek() != std::char_traits<char>::eof()) return fail("longer than its header says");
  if (fnv1a(payload.data(), payload.size()) != h.checksum) return fail("checksum mismatch (corrupted payload)");
  {
    std::lock_guard<std::mutex> l(mu_);
    touch(hash);
  }
  ++hits;
  return true;
}

void DiskTier::writer() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    wake_.wait(l, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) break;  // stopping, and every write is done
    Write w = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    l.unlock();
    const fs::path final_path = file_of(w.hash), tmp = final_path.string() + ".tmp";
    bool ok = false;
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      ok = out && out.write(reinterpret_cast<const char*>(w.file.data()), static_cast<std::streamsize>(w.file.size())) && out.flush();
    }
    std::error_code ec;
    l.lock();
    const bool wanted = index_.count(w.hash) > 0;  // not evicted while it waited
    if (ok && wanted) fs::rename(tmp, final_path, ec);
    if (!ok || !wanted || ec) fs::remove(tmp, ec);
    if ((!ok || ec) && wanted) {
      auto it = index_.find(w.hash);
      bytes_ -= it->second.bytes;
      lru_.erase(it->second.lru);
      index_.erase(it);
      if (log_) log_("KV disk tier: cannot write " + final_path.string());
    }
    queued_bytes_ -= static_cast<int64_t>(w.file.size());
    busy_ = false;
    idle_.notify_all();
  }
}

void DiskTier::flush() {
  std::unique_lock<std::mutex> l(mu_);
  idle_.wait(l, [&] { return queue_.empty() && !busy_; });
}

int64_t DiskTier::bytes() const {
  std::lock_guard<std::mutex> l(mu_);
  return bytes_;
}

}  // namespace sy_cache
