// The cache managers through the cache ABI: block accounting, prefix reuse
// verified token by token, LRU eviction, copy-on-write, truncation.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "step_support.h"

namespace sy {
namespace {

struct Cache {
  ThreadPool threads{1};
  HostContext ctx{&threads, nullptr};
  KernelRegistry kernels = KernelRegistry::with_builtins();
  ComponentRegistry components = ComponentRegistry::with_builtins();
  PluginHost host{kernels, components, &ctx};
  std::unique_ptr<PluginCacheManager> cache;
  Cache(const std::string& name, int blocks, int block_size = 4, std::map<std::string, RawOption> extra = {}, uint64_t fingerprint = 0) {
    host.load(SY_CACHE_PLUGIN);
    const auto& e = components.get(ComponentKind::Cache, name, "t");
    sy_cache_config cfg{sizeof(sy_cache_config), 1, 1, 2, SY_DTYPE_FLOAT32, SY_DEVICE_CPU, block_size, 0, 0, fingerprint, 0};
    extra["block_size"] = {std::to_string(block_size), "t"};
    extra["num_blocks"] = {std::to_string(blocks), "t"};
    auto opts = OptionValues::validate(e.options, extra, e.label());
    cache = std::make_unique<PluginCacheManager>(e, cfg, opts, &ctx);
  }
  // Writes a recognisable value into every slot of seq's blocks.
  float* key_block(int32_t block) {
    auto [k, v] = cache->storage(0);
    return static_cast<float*>(k.data) + static_cast<int64_t>(block) * k.dims[1] * k.dims[2] * k.dims[3];
  }
};

// Value rows of another size than key rows (ABI 1.8: latent attention caches
// its latent as keys and the rotary key as values); a host before 1.8 passes
// a shorter config, whose values are as wide as its keys.
TEST(CacheManager, ValueRowsMayDifferInSizeFromKeyRows) {
  for (const bool host_1_8 : {true, false})
    for (const char* dtype : {"fp32", "int8"}) {
      ThreadPool threads{1};
      HostContext ctx{&threads, nullptr};
      KernelRegistry kernels = KernelRegistry::with_builtins();
      ComponentRegistry components = ComponentRegistry::with_builtins();
      PluginHost host{kernels, components, &ctx};
      host.load(SY_CACHE_PLUGIN);
      const auto& e = components.get(ComponentKind::Cache, "prefix-caching", "t");
      sy_cache_config cfg{sizeof(sy_cache_config), 2, 1, 16, SY_DTYPE_FLOAT32, SY_DEVICE_CPU, 0, 0, 0, 0, 8};
      if (!host_1_8) cfg.struct_size = offsetof(sy_cache_config, value_head_dim);
      auto opts = OptionValues::validate(e.options, {{"block_size", {"4", "t"}}, {"num_blocks", {"6", "t"}}, {"dtype", {dtype, "t"}}}, e.label());
      PluginCacheManager cache(e, cfg, opts, &ctx);
      const int64_t scale = std::string(dtype) == "int8" ? SY_KV_ROW_SCALE_BYTES : 0;
      for (int layer = 0; layer < 2; ++layer) {
        auto [k, v] = cache.storage(layer);
        EXPECT_EQ(k.dims[3], 16 + scale);
        EXPECT_EQ(v.dims[3], (host_1_8 ? 8 : 16) + scale) << dtype << (host_1_8 ? "" : ", a 1.7 host");
        EXPECT_EQ(v.dims[0], k.dims[0]);
      }
      // Copy-on-write copies each part at its own size: a forked sequence
      // that writes into a shared block sees its parent's keys and values.
      ASSERT_TRUE(cache.allocate(1, 3));
      auto [k, v] = cache.storage(1);
      const int32_t b = cache.block_table(1)[0];
      const int64_t kr = k.dims[1] * k.dims[2] * k.dims[3], vr = v.dims[1] * v.dims[2] * v.dims[3];
      auto* kb = static_cast<uint8_t*>(k.data) + b * kr * (scale ? 1 : 4);
      auto* vb = static_cast<uint8_t*>(v.data) + b * vr * (scale ? 1 : 4);
      for (int64_t i = 0; i < kr * (scale ? 1 : 4); ++i) kb[i] = static_cast<uint8_t>(i * 7 + 1);
      for (int64_t i = 0; i < vr * (scale ? 1 : 4); ++i) vb[i] = static_cast<uint8_t>(i * 5 + 3);
      cache.fork(1, 2);
      ASSERT_TRUE(cache.allocate(2, 1));  // writes into the shared partial block: copied first
      const int32_t c = cache.block_table(2)[0];
      ASSERT_NE(c, b);
      EXPECT_EQ(0, std::memcmp(static_cast<uint8_t*>(k.data) + c * kr * (scale ? 1 : 4), kb, static_cast<size_t>(kr * (scale ? 1 : 4))));
      EXPECT_EQ(0, std::memcmp(static_cast<uint8_t*>(v.data) + c * vr * (scale ? 1 : 4), vb, static_cast<size_t>(vr * (scale ? 1 : 4))));
    }
}

std::vector<int32_t> seq_tokens(int n, int base = 100) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(base + i);
  return t;
}

TEST(CacheManager, PagedAccountingAndFull) {
  Cache c("paged", 4);
  EXPECT_TRUE(c.cache->allocate(1, 5));  // 2 blocks
  EXPECT_EQ(c.cache->block_table(1).size(), 2u);
  EXPECT_TRUE(c.cache->allocate(1, 3));  // fills block 2 exactly
  EXPECT_EQ(c.cache->block_table(1).size(), 2u);
  EXPECT_TRUE(c.cache->allocate(2, 8));
  EXPECT_FALSE(c.cache->allocate(2, 1));  // full: nothing changes
  EXPECT_EQ(c.cache->block_table(2).size(), 2u);
  EXPECT_EQ(c.cache->stats().free_blocks, 0);
  c.cache->release(1);
  EXPECT_EQ(c.cache->stats().free_blocks, 2);
  EXPECT_TRUE(c.cache->allocate(2, 1));
}

TEST(CacheManager, PrefixReuseIsExactAndEvictsLeastRecentlyUsed) {
  Cache c("prefix-caching", 6);
  auto a = seq_tokens(9);
  ASSERT_EQ(c.cache->match_prefix(1, a), 0);
  ASSERT_TRUE(c.cache->allocate(1, 9));
  c.cache->commit(1, a.data(), 9);
  auto blocks_a = c.cache->block_table(1);
  c.cache->release(1);  // its two full blocks stay cached (unreferenced)
  // Same first 8 tokens: both full blocks reused.
  auto b = a;
  b[8] = 999;
  EXPECT_EQ(c.cache->match_prefix(2, b), 8);
  EXPECT_EQ(c.cache->block_table(2)[0], blocks_a[0]);
  EXPECT_EQ(c.cache->block_table(2)[1], blocks_a[1]);
  c.cache->release(2);
  // A different second block: only the first matches (token-verified chain).
  auto d = a;
  d[5] = 7;
  EXPECT_EQ(c.cache->match_prefix(3, d), 4);
  c.cache->release(3);
  // Filling the cache evicts unreferenced cached blocks; then nothing matches.
  ASSERT_TRUE(c.cache->allocate(4, 24));
  c.cache->release(4);
  EXPECT_EQ(c.cache->match_prefix(5, a), 0);
  auto s = c.cache->stats();
  EXPECT_EQ(s.prefix_hits, 12);
}

// The prefix cache's disk tier: committed blocks are written per model
// fingerprint, found by a new cache (a restart) with their bytes, never by
// another model's cache; a corrupted file is dropped with a logged reason
// and the match stops before it.
TEST(CacheManager, DiskTierKeepsBlocksAcrossARestartAndDropsCorruptFiles) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("sy-disk-tier-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::map<std::string, RawOption> disk{{"disk_dir", {dir.string(), "t"}}, {"disk_mb", {"16", "t"}}};
  const auto a = seq_tokens(9);
  std::vector<float> written;
  {
    Cache c("prefix-caching", 6, 4, disk, 42);
    ASSERT_TRUE(c.cache->allocate(1, 9));
    for (int32_t b : c.cache->block_table(1))
      for (int i = 0; i < 8; ++i) c.key_block(b)[i] = static_cast<float>(b * 100 + i);
    for (int j = 0; j < 2; ++j)
      for (int i = 0; i < 8; ++i) written.push_back(c.key_block(c.cache->block_table(1)[static_cast<size_t>(j)])[i]);
    c.cache->commit(1, a.data(), 9);
    c.cache->release(1);
  }  // the cache's end waits for its writes
  size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) files += e.path().extension() == ".kv";
  EXPECT_EQ(files, 2u);
  {
    Cache c("prefix-caching", 6, 4, disk, 42);  // a restart: RAM is empty
    ASSERT_EQ(c.cache->match_prefix(2, a), 8);
    for (int j = 0; j < 2; ++j)
      for (int i = 0; i < 8; ++i)
        EXPECT_EQ(c.key_block(c.cache->block_table(2)[static_cast<size_t>(j)])[i], written[static_cast<size_t>(j * 8 + i)]);
    c.cache->release(2);
  }
  {
    Cache other("prefix-caching", 6, 4, disk, 43);  // another model's fingerprint
    EXPECT_EQ(other.cache->match_prefix(3, a), 0);
  }
  // Flip a payload byte of the second block's file.
  fs::path second;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().extension() == ".kv" && (second.empty() || e.last_write_time() > fs::last_write_time(second))) second = e.path();
  {
    std::fstream f(second, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('\x5a');
  }
  Cache c("prefix-caching", 6, 4, disk, 42);
  testing::internal::CaptureStderr();
  const int32_t matched = c.cache->match_prefix(4, a);
  const std::string log = testing::internal::GetCapturedStderr();
  // Either block may be the one flipped: the match stops at it.
  EXPECT_LT(matched, 8);
  EXPECT_NE(log.find("KV disk tier: dropped"), std::string::npos) << log;
  EXPECT_NE(log.find("checksum mismatch"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(second));
  fs::remove_all(dir);
}

// A KV dtype the attention kernel of the cache's device cannot read is
// refused when the cache is made, naming the dtype and the kernel (the CUDA
// PagedAttention kernel reads float32 KV; no GPU is needed to be refused).
TEST(CacheManager, AKvDtypeTheKernelCannotReadIsRefusedNamingBoth) {
  ThreadPool threads{1};
  HostContext ctx{&threads, nullptr};
  KernelRegistry kernels = KernelRegistry::with_builtins();
  ComponentRegistry components = ComponentRegistry::with_builtins();
  PluginHost host{kernels, components, &ctx};
  host.load(SY_CACHE_PLUGIN);
  const auto& e = components.get(ComponentKind::Cache, "paged", "t");
  for (const char* dtype : {"int8", "fp8", "fp16"}) {
    sy_cache_config cfg{sizeof(sy_cache_config), 2, 2, 8, SY_DTYPE_FLOAT32, SY_DEVICE_CUDA, 0, 0, 0, 0, 0};
    auto opts = OptionValues::validate(e.options, {{"dtype", {dtype, "t"}}, {"num_blocks", {"4", "t"}}}, e.label());
    const std::string msg = test::error_of([&] { PluginCacheManager made(e, cfg, opts, &ctx); });
    EXPECT_NE(msg.find(std::string("cache dtype '") + dtype + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("CUDA PagedAttention kernel"), std::string::npos) << msg;
  }
}

TEST(CacheManager, CopyOnWriteAfterForkAndTruncate) {
  Cache c("paged", 8);
  ASSERT_TRUE(c.cache->allocate(1, 6));  // blocks: full + half
  auto parent = c.cache->block_table(1);
  c.key_block(parent[1])[0] = 42.f;
  c.cache->fork(1, 2);
  EXPECT_EQ(c.cache->block_table(2), parent);
  ASSERT_TRUE(c.cache->allocate(2, 1));  // writes into the shared half block: copied first
  auto child = c.cache->block_table(2);
  EXPECT_EQ(child[0], parent[0]);  // the full block stays shared
  EXPECT_NE(child[1], parent[1]);
  EXPECT_EQ(c.key_block(child[1])[0], 42.f);  // with the parent's data
  EXPECT_EQ(c.cache->block_table(1), parent);
  // Rolling back below a block boundary frees the blocks past it.
  size_t free_before = static_cast<size_t>(c.cache->stats().free_blocks);
  ASSERT_TRUE(c.cache->allocate(1, 10));  // 16 tokens: 4 blocks
  c.cache->truncate(1, 6);
  EXPECT_EQ(c.cache->block_table(1).size(), 2u);
  EXPECT_EQ(static_cast<size_t>(c.cache->stats().free_blocks), free_before);
}

}  // namespace
}  // namespace sy
