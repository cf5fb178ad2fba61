// Prefix-cache lookup cost against the number of cached blocks: the
// prefix-caching cache manager (plugins/cache) holding 10^2 .. 10^5 cached
// blocks, a 2048-token prompt whose first 90% is cached. The lookup follows
// the prompt's chained block hashes through a hash index, so its time should
// stay flat however many blocks are cached. The plugin is driven through
// the SDK's mock host (switchyard/plugin_testing.hpp), as the engine calls
// it. Prints a table and writes JSON (--out FILE, default prefix-lookup.json).
#include <switchyard/plugin_testing.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

namespace {

namespace pt = sy::plugin::testing;
using Clock = std::chrono::steady_clock;

void check(sy_status s, const char* what) {
  if (s != SY_OK) {
    std::fprintf(stderr, "%s failed: %s\n", what, pt::MockHost::error().c_str());
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string out = "prefix-lookup.json";
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
  constexpr int32_t kBlock = 16, kPrompt = 2048, kShared = kPrompt * 9 / 10;
  nlohmann::json rows = nlohmann::json::array();
  std::printf("prefix-caching lookup, %d-token prompt, %d tokens of it cached (block %d)\n", kPrompt, kShared, kBlock);
  std::printf("%14s %14s %16s %16s %12s\n", "cached blocks", "matched tok", "lookup us p50", "lookup us p90", "ns / block");
  for (int64_t cached : {100, 1000, 10000, 100000}) {
    pt::MockHost host;
    host.load(SY_CACHE_PLUGIN);
    const sy_cache_desc* d = host.cache("prefix-caching");
    sy_cache_config cfg{};
    cfg.struct_size = sizeof cfg;
    cfg.num_layers = 1;
    cfg.kv_heads = 1;
    cfg.head_dim = 8;
    cfg.dtype = SY_DTYPE_FLOAT32;
    cfg.device = SY_DEVICE_CPU;
    void* state = nullptr;
    const int64_t blocks = cached + 2 * kPrompt / kBlock + 8;
    check(d->create(nullptr, &cfg,
                    host.options(d->options, d->num_options, {{"block_size", std::to_string(kBlock)}, {"num_blocks", std::to_string(blocks)}}),
                    &state),
          "create");
    // The shared prefix, then `cached` blocks of other text, all committed
    // and released: cached, unreferenced, in the LRU.
    uint64_t id = 1;
    std::vector<int32_t> prompt(kPrompt);
    for (int32_t i = 0; i < kPrompt; ++i) prompt[static_cast<size_t>(i)] = 3 + (i * 7919) % 500;
    auto fill = [&](const std::vector<int32_t>& tokens) {
      const auto n = static_cast<int32_t>(tokens.size());
      check(d->allocate(state, id, n), "allocate");
      check(d->commit(state, id, tokens.data(), n), "commit");
      check(d->release(state, id), "release");
      ++id;
    };
    fill(std::vector<int32_t>(prompt.begin(), prompt.begin() + kShared));
    int64_t filled = kShared / kBlock;
    uint32_t salt = 1;
    while (filled < cached) {
      const int64_t n = std::min<int64_t>(64, cached - filled);
      std::vector<int32_t> other(static_cast<size_t>(n * kBlock));
      for (auto& t : other) t = static_cast<int32_t>(3 + (salt = salt * 1664525u + 1013904223u) % 50000u);
      fill(other);
      filled += n;
    }
    // Lookups: match, then release (the blocks go back to the LRU).
    std::vector<double> us;
    int32_t matched = 0;
    for (int rep = 0; rep < 400; ++rep) {
      const auto t0 = Clock::now();
      check(d->match_prefix(state, id, prompt.data(), kPrompt, &matched), "match_prefix");
      us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      check(d->release(state, id), "release");
      ++id;
    }
    std::sort(us.begin(), us.end());
    const double p50 = us[us.size() / 2], p90 = us[us.size() * 9 / 10];
    std::printf("%14lld %14d %16.2f %16.2f %12.1f\n", static_cast<long long>(filled), matched, p50, p90, 1000.0 * p50 / (matched / kBlock));
    rows.push_back({{"cached_blocks", filled}, {"matched_tokens", matched}, {"lookup_us_p50", p50}, {"lookup_us_p90", p90}});
    d->destroy(state);
  }
  nlohmann::json j;
  j["benchmark"] = "prefix-caching lookup vs cached blocks";
  j["prompt_tokens"] = kPrompt;
  j["shared_tokens"] = kShared;
  j["block_size"] = kBlock;
  j["rows"] = rows;
  std::ofstream(out) << j.dump(2) << "\n";
  std::printf("wrote %s\n", out.c_str());
  return 0;
}
