// The 1.5 embedding API as an outside program sees it (libswitchyard.so and
// switchyard.h only): prefix-cache block hashes computed by the formula the
// header documents, KV-cache events that name exactly those hashes, KV
// export/import between two engines with outputs equal to one engine's,
// teacher-forced logits, tokenizers without an engine and the default
// manifest.
#include <gtest/gtest.h>
#include <switchyard/switchyard.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

const std::string kManifest = std::string(SY_SOURCE_DIR) + "/examples/manifests/stories.yaml";
const std::string kModel = std::string(SY_SHARED_DIR) + "/models/stories260K.onnx";
const std::string kTokenizer = std::string(SY_SHARED_DIR) + "/models/tok512.bin";

sy_engine* open_engine(const std::string& manifest, const char* profile) {
  sy_engine_options o{};
  o.struct_size = sizeof o;
  o.manifest = manifest.c_str();
  o.profile = profile;
  o.threads = 1;
  sy_engine* e = nullptr;
  if (sy_engine_create(&o, &e) != SY_API_OK) ADD_FAILURE() << sy_last_error();
  return e;
}

struct Engine {
  sy_engine* e;
  explicit Engine(const char* profile, const std::string& manifest = kManifest) : e(open_engine(manifest, profile)) {}
  ~Engine() { sy_engine_destroy(e); }
};

std::vector<int32_t> tokenize(sy_engine* e, const std::string& text) {
  std::vector<int32_t> ids(text.size() + 8);
  int32_t n = 0;
  EXPECT_EQ(sy_tokenize(e, text.c_str(), 1, ids.data(), static_cast<int32_t>(ids.size()), &n), SY_API_OK) << sy_last_error();
  ids.resize(static_cast<size_t>(n));
  return ids;
}

// A manifest for stories260K with the given cache line, in a fresh folder.
std::string write_manifest(const std::string& name, const std::string& cache) {
  const auto dir = std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string d = SY_PLUGIN_DIR;
  const std::string manifest = (dir / "m.yaml").string();
  std::ofstream(manifest) << "model: " << kModel << "\ntokenizer: " << kTokenizer << "\nplugins:\n  - " << d
                          << "/attention/libswitchyard_attention.so\n  - " << d << "/cache/libswitchyard_cache.so\n"
                          << "passes: [attention-fusion]\ncache: " << cache << "\n";
  return manifest;
}

struct Output {
  std::vector<int32_t> tokens;
  int32_t cached = 0;
};

Output greedy(sy_engine* e, const std::vector<int32_t>& prompt, int32_t max_tokens) {
  sy_request_params p{};
  p.struct_size = sizeof p;
  p.prompt_ids = prompt.data();
  p.num_prompt_ids = static_cast<int32_t>(prompt.size());
  p.max_tokens = max_tokens;
  p.ignore_eos = 1;
  sy_request* r = nullptr;
  Output out;
  EXPECT_EQ(sy_submit(e, &p, &r), SY_API_OK) << sy_last_error();
  if (!r) return out;
  sy_request_wait(r);
  out.tokens.resize(4096);
  int32_t n = 0;
  sy_request_poll(r, out.tokens.data(), static_cast<int32_t>(out.tokens.size()), &n);
  out.tokens.resize(static_cast<size_t>(n));
  sy_request_info info{};
  info.struct_size = sizeof info;
  sy_request_info_get(r, &info);
  out.cached = info.cached_tokens;
  sy_request_release(r);
  return out;
}

// The header's formula, written out independently of the library.
std::vector<uint64_t> reference_hashes(const std::vector<int32_t>& ids, int32_t block) {
  std::vector<uint64_t> out;
  uint64_t parent = 0;
  for (size_t b = 0; (b + 1) * static_cast<size_t>(block) <= ids.size(); ++b) {
    std::vector<uint8_t> bytes;
    for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<uint8_t>(parent >> (8 * i)));
    for (int32_t t = 0; t < block; ++t) {
      const auto v = static_cast<uint32_t>(ids[b * static_cast<size_t>(block) + static_cast<size_t>(t)]);
      for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<uint8_t>(v >> (8 * i)));
    }
    uint64_t h = 14695981039346656037ull;
    for (uint8_t c : bytes) {
      h ^= c;
      h *= 1099511628211ull;
    }
    out.push_back(h);
    parent = h;
  }
  return out;
}

std::vector<uint64_t> hashes(const std::vector<int32_t>& ids, int32_t block) {
  std::vector<uint64_t> out(ids.size() / static_cast<size_t>(block) + 1);
  int32_t n = -1;
  EXPECT_EQ(sy_block_hashes(block, ids.data(), static_cast<int32_t>(ids.size()), out.data(), static_cast<int32_t>(out.size()), &n),
            SY_API_OK)
      << sy_last_error();
  out.resize(static_cast<size_t>(std::max(n, 0)));
  return out;
}

struct Event {
  int32_t kind;
  uint64_t sequence, hash, parent;
  std::vector<int32_t> tokens;
};

std::vector<Event> poll_all(sy_engine* e) {
  std::vector<Event> out;
  for (;;) {
    const sy_kv_event* const* events = nullptr;
    int32_t n = 0;
    EXPECT_EQ(sy_kv_events_poll(e, 64, &events, &n), SY_API_OK) << sy_last_error();
    for (int32_t i = 0; i < n; ++i) {
      const sy_kv_event* ev = events[i];
      EXPECT_GE(ev->struct_size, sizeof(sy_kv_event));
      EXPECT_GT(ev->timestamp, 1.6e9);
      out.push_back({ev->kind, ev->sequence, ev->block_hash, ev->parent_hash,
                     ev->tokens ? std::vector<int32_t>(ev->tokens, ev->tokens + ev->num_tokens) : std::vector<int32_t>{}});
    }
    if (n < 64) return out;
  }
}

const char* kStory =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. "
    "One day, she saw a big red ball.";

TEST(CApiKv, BlockHashesFollowTheFormulaTheHeaderDocuments) {
  Engine eng("prefix");
  ASSERT_TRUE(eng.e);
  EXPECT_EQ(sy_engine_kv_block_size(eng.e), 16);
  const std::vector<int32_t> ids = tokenize(eng.e, kStory);
  ASSERT_GE(ids.size(), 40u);
  EXPECT_EQ(hashes(ids, 16), reference_hashes(ids, 16));
  EXPECT_EQ(hashes(ids, 16).size(), ids.size() / 16);
  EXPECT_EQ(hashes(ids, 7), reference_hashes(ids, 7));
  // A prefix's hashes are the prefix of the hashes: what routing relies on.
  std::vector<int32_t> other(ids.begin(), ids.begin() + 32);
  other.push_back(3);
  const auto h = hashes(ids, 16), ho = hashes(other, 16);
  ASSERT_EQ(ho.size(), 2u);
  EXPECT_TRUE(std::equal(ho.begin(), ho.end(), h.begin()));
  int32_t n = 0;
  EXPECT_EQ(sy_block_hashes(0, ids.data(), 3, nullptr, 0, &n), SY_API_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sy_last_error()).find("block_size"), std::string::npos) << sy_last_error();
}

TEST(CApiKv, EventsNameTheBlocksOfThePromptAndEveryRemovalWasStored) {
  // A small cache (24 blocks of 16 tokens) so that new prompts evict.
  const std::string manifest = write_manifest("sy-kv-events", "{name: prefix-caching, options: {block_size: 16, num_blocks: 24}}");
  Engine eng(nullptr, manifest);
  ASSERT_TRUE(eng.e);
  ASSERT_EQ(sy_kv_events_enable(eng.e, 4096), SY_API_OK) << sy_last_error();
  const std::vector<int32_t> prompt = tokenize(eng.e, kStory);
  greedy(eng.e, prompt, 8);
  std::vector<Event> events = poll_all(eng.e);
  // The prompt's full blocks were stored, with its hashes, parents and tokens.
  std::map<uint64_t, Event> stored;
  for (const Event& e : events)
    if (e.kind == SY_KV_BLOCK_STORED) stored[e.hash] = e;
  const auto want = hashes(prompt, 16);
  for (size_t b = 0; b < want.size(); ++b) {
    ASSERT_TRUE(stored.count(want[b])) << "block " << b << " of the prompt was not reported";
    const Event& e = stored[want[b]];
    EXPECT_EQ(e.parent, b == 0 ? 0u : want[b - 1]);
    EXPECT_EQ(e.tokens, std::vector<int32_t>(prompt.begin() + static_cast<long>(b * 16), prompt.begin() + static_cast<long>((b + 1) * 16)));
  }
  for (size_t i = 1; i < events.size(); ++i) EXPECT_EQ(events[i].sequence, events[i - 1].sequence + 1);

  // Different prompts until blocks are evicted: every removal names a block
  // that was stored and not yet removed.
  std::set<uint64_t> live;
  for (const Event& e : events)
    if (e.kind == SY_KV_BLOCK_STORED) live.insert(e.hash);
  int removed = 0;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> p = tokenize(eng.e, std::string("Story number ") + std::to_string(i) + ". " + kStory);
    greedy(eng.e, p, 8);
    for (const Event& e : poll_all(eng.e)) {
      if (e.kind == SY_KV_BLOCK_STORED) {
        EXPECT_TRUE(e.parent == 0 || live.count(e.parent)) << "a block stored before its parent";
        live.insert(e.hash);
      } else if (e.kind == SY_KV_BLOCK_REMOVED) {
        EXPECT_EQ(live.erase(e.hash), 1u) << "a removal of a block never stored";
        ++removed;
      }
    }
  }
  EXPECT_GT(removed, 0) << "24 blocks should not hold 7 prompts";
  // Enabling again starts with a snapshot: exactly the live blocks.
  ASSERT_EQ(sy_kv_events_enable(eng.e, 4096), SY_API_OK);
  std::set<uint64_t> snapshot;
  for (const Event& e : poll_all(eng.e)) {
    EXPECT_EQ(e.kind, SY_KV_BLOCK_STORED);
    snapshot.insert(e.hash);
  }
  EXPECT_EQ(snapshot, live);
  // A queue nobody drains ends in one LOST event.
  ASSERT_EQ(sy_kv_events_enable(eng.e, 2), SY_API_OK);
  const std::vector<Event> lost = poll_all(eng.e);
  ASSERT_FALSE(lost.empty());
  EXPECT_EQ(lost.back().kind, SY_KV_EVENTS_LOST);
  std::filesystem::remove_all(std::filesystem::path(manifest).parent_path());
}

TEST(CApiKv, ACacheWithoutEventsSaysSo) {
  Engine eng("paged");
  ASSERT_TRUE(eng.e);
  // The paged cache has the function but never stores a findable block; it
  // answers, with no events.
  if (sy_kv_events_enable(eng.e, 16) == SY_API_OK) {
    greedy(eng.e, tokenize(eng.e, kStory), 4);
    EXPECT_TRUE(poll_all(eng.e).empty());
  } else {
    EXPECT_NE(std::string(sy_last_error()).find("events"), std::string::npos) << sy_last_error();
  }
}

TEST(CApiKv, ExportedKvLetsAnotherEngineSkipThePrefillWithTheSameOutput) {
  Engine prefill("prefix"), decode("prefix"), single("paged");
  ASSERT_TRUE(prefill.e && decode.e && single.e);
  const std::vector<int32_t> prompt = tokenize(prefill.e, kStory);
  const size_t full = prompt.size() / 16 * 16;
  ASSERT_GE(full, 32u);
  // A request always computes its prompt's last token: at most the blocks before it come from the cache.
  const auto reusable = static_cast<int32_t>((prompt.size() - 1) / 16 * 16);
  // Nothing cached yet: an export of zero blocks.
  int64_t size = 0;
  ASSERT_EQ(sy_kv_export(prefill.e, prompt.data(), static_cast<int32_t>(prompt.size()), nullptr, 0, &size), SY_API_OK) << sy_last_error();
  const int64_t empty_size = size;
  greedy(prefill.e, prompt, 1);
  ASSERT_EQ(sy_kv_export(prefill.e, prompt.data(), static_cast<int32_t>(prompt.size()), nullptr, 0, &size), SY_API_OK) << sy_last_error();
  // 5 layers of keys and values, 4 kv heads x 16 tokens x 8 dims of float32 per block.
  // Per block: its tokens, hash, checksum and values.
  EXPECT_EQ(size - empty_size, static_cast<int64_t>(full / 16) * (16 * 4 + 8 + 8 + 5 * 2 * 4 * 16 * 8 * 4));
  std::vector<char> data(static_cast<size_t>(size));
  ASSERT_EQ(sy_kv_export(prefill.e, prompt.data(), static_cast<int32_t>(prompt.size()), data.data(), size, &size), SY_API_OK);

  int32_t cached = 0;
  ASSERT_EQ(sy_kv_import(decode.e, data.data(), size, &cached), SY_API_OK) << sy_last_error();
  EXPECT_EQ(cached, static_cast<int32_t>(full));
  const Output disaggregated = greedy(decode.e, prompt, 40);
  EXPECT_EQ(disaggregated.cached, reusable) << "the decode engine recomputed the prompt";
  EXPECT_EQ(disaggregated.tokens, greedy(single.e, prompt, 40).tokens);
  // Importing again keeps what is there.
  ASSERT_EQ(sy_kv_import(decode.e, data.data(), size, &cached), SY_API_OK) << sy_last_error();
  EXPECT_EQ(cached, static_cast<int32_t>(full));

  // Bad data is refused, naming the problem, and the engine serves on.
  std::vector<char> bad(data);
  bad[40] ^= 1;  // inside the tokens: their hashes no longer match
  EXPECT_EQ(sy_kv_import(decode.e, bad.data(), size, &cached), SY_API_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sy_last_error()).find("hash"), std::string::npos) << sy_last_error();
  std::vector<char> bad_value(data);
  bad_value[static_cast<size_t>(size) - 5] ^= 0x10;  // inside the last block's values
  EXPECT_EQ(sy_kv_import(single.e, bad_value.data(), size, &cached), SY_API_INVALID_ARGUMENT) << "a corrupted value was accepted";
  EXPECT_NE(std::string(sy_last_error()).find("checksum"), std::string::npos) << sy_last_error();
  EXPECT_EQ(sy_kv_import(decode.e, data.data(), size - 3, &cached), SY_API_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sy_last_error()).find("bytes of KV data"), std::string::npos) << sy_last_error();
  EXPECT_EQ(sy_kv_import(decode.e, "hello", 5, &cached), SY_API_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sy_last_error()).find("SYKV"), std::string::npos) << sy_last_error();
  // Another block size is another KV geometry; a cache without prefix
  // caching could never find the blocks.
  EXPECT_EQ(sy_kv_import(single.e, data.data(), size, &cached), SY_API_UNSUPPORTED);
  EXPECT_NE(std::string(sy_last_error()).find("prefix-caching"), std::string::npos) << sy_last_error();
  // Nor is there anything to export from it: refused, not an empty export.
  EXPECT_EQ(sy_kv_export(single.e, prompt.data(), static_cast<int32_t>(prompt.size()), nullptr, 0, &size), SY_API_UNSUPPORTED);
  EXPECT_NE(std::string(sy_last_error()).find("no prefix cache"), std::string::npos) << sy_last_error();
  EXPECT_EQ(greedy(decode.e, prompt, 40).tokens, disaggregated.tokens);
}

TEST(CApiKv, ImportRefusesAnotherKvGeometryNamingIt) {
  const std::string manifest = write_manifest("sy-kv-geom", "{name: prefix-caching, options: {block_size: 8}}");
  Engine a("prefix"), b(nullptr, manifest);
  ASSERT_TRUE(a.e && b.e);
  const std::vector<int32_t> prompt = tokenize(a.e, kStory);
  greedy(a.e, prompt, 1);
  int64_t size = 0;
  ASSERT_EQ(sy_kv_export(a.e, prompt.data(), static_cast<int32_t>(prompt.size()), nullptr, 0, &size), SY_API_OK);
  std::vector<char> data(static_cast<size_t>(size));
  ASSERT_EQ(sy_kv_export(a.e, prompt.data(), static_cast<int32_t>(prompt.size()), data.data(), size, &size), SY_API_OK);
  int32_t cached = 0;
  EXPECT_EQ(sy_kv_import(b.e, data.data(), size, &cached), SY_API_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sy_last_error()).find("block_size 16"), std::string::npos) << sy_last_error();
  std::filesystem::remove_all(std::filesystem::path(manifest).parent_path());
}

// int8 KV rows travel with their scales: an export from a prefix cache of
// int8 rows (stories260K: 8 codes + a 2-byte scale per row) lets another
// int8 engine skip the prefill with the output of an int8 engine that
// computed it, and a float32 engine refuses the blocks, naming the dtype.
TEST(CApiKv, QuantizedKvRowsExportAndImportWithTheirScales) {
  const std::string m8 = write_manifest("sy-kv-int8", "{name: prefix-caching, options: {block_size: 16, dtype: int8}}");
  const std::string single8 = write_manifest("sy-kv-int8-paged", "{name: paged, options: {block_size: 16, dtype: int8}}");
  Engine prefill(nullptr, m8), decode(nullptr, m8), single(nullptr, single8), f32("prefix");
  ASSERT_TRUE(prefill.e && decode.e && single.e && f32.e);
  const std::vector<int32_t> prompt = tokenize(prefill.e, kStory);
  const size_t full = prompt.size() / 16 * 16;
  int64_t empty_size = 0, size = 0;
  ASSERT_EQ(sy_kv_export(prefill.e, prompt.data(), static_cast<int32_t>(prompt.size()), nullptr, 0, &empty_size), SY_API_OK);
  greedy(prefill.e, prompt, 1);
  ASSERT_EQ(sy_kv_export(prefill.e, prompt.data(), static_cast<int32_t>(prompt.size()), nullptr, 0, &size), SY_API_OK) << sy_last_error();
  // Per block: its tokens, hash, checksum, and 5 layers x keys and values x 4 heads x 16 rows of (8 + 2) bytes.
  EXPECT_EQ(size - empty_size, static_cast<int64_t>(full / 16) * (16 * 4 + 8 + 8 + 5 * 2 * 4 * 16 * (8 + 2)));
  std::vector<char> data(static_cast<size_t>(size));
  ASSERT_EQ(sy_kv_export(prefill.e, prompt.data(), static_cast<int32_t>(prompt.size()), data.data(), size, &size), SY_API_OK);
  int32_t cached = 0;
  ASSERT_EQ(sy_kv_import(decode.e, data.data(), size, &cached), SY_API_OK) << sy_last_error();
  EXPECT_EQ(cached, static_cast<int32_t>(full));
  const Output imported = greedy(decode.e, prompt, 30);
  EXPECT_GT(imported.cached, 0) << "the decode engine recomputed the prompt";
  EXPECT_EQ(imported.tokens, greedy(single.e, prompt, 30).tokens);
  EXPECT_EQ(sy_kv_import(f32.e, data.data(), size, &cached), SY_API_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sy_last_error()).find("dtype"), std::string::npos) << sy_last_error();
  std::filesystem::remove_all(std::filesystem::path(m8).parent_path());
  std::filesystem::remove_all(std::filesystem::path(single8).parent_path());
}

// Latent attention (DeepSeek-V3's export, tests/models/real): the cache
// holds the latent (16 values) as keys and the rotary key (8) as values, and
// its blocks travel at those sizes: an engine importing them skips the
// prefill with the output of one that computed it.
TEST(CApiKv, LatentAttentionKvTravelsAtItsOwnRowSizes) {
  const auto dir = std::filesystem::temp_directory_path() / ("sy-kv-latent-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string d = SY_PLUGIN_DIR;
  auto manifest = [&](const std::string& name, const std::string& cache) {
    const std::string path = (dir / name).string();
    std::ofstream(path) << "model: " << SY_SOURCE_DIR << "/tests/models/real/deepseekv3-dynamo\nplugins:\n  - " << d
                        << "/attention/libswitchyard_attention.so\n  - " << d << "/cache/libswitchyard_cache.so\n"
                        << "passes: [attention-fusion]\ncache: " << cache << "\n";
    return path;
  };
  const std::string prefix = manifest("prefix.yaml", "{name: prefix-caching, options: {block_size: 8}}");
  const std::string paged = manifest("paged.yaml", "{name: paged, options: {block_size: 8}}");
  Engine prefill(nullptr, prefix), decode(nullptr, prefix), single(nullptr, paged);
  ASSERT_TRUE(prefill.e && decode.e && single.e);
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 37; ++i) prompt.push_back((i * 37 + 11) % 319 + 1);
  int64_t empty_size = 0, size = 0;
  ASSERT_EQ(sy_kv_export(prefill.e, prompt.data(), static_cast<int32_t>(prompt.size()), nullptr, 0, &empty_size), SY_API_OK);
  greedy(prefill.e, prompt, 1);
  ASSERT_EQ(sy_kv_export(prefill.e, prompt.data(), static_cast<int32_t>(prompt.size()), nullptr, 0, &size), SY_API_OK) << sy_last_error();
  // Per block: its tokens, hash, checksum, and 2 layers x 8 rows x (16 + 8) float32 values.
  EXPECT_EQ(size - empty_size, 4 * (8 * 4 + 8 + 8 + 2 * 8 * (16 + 8) * 4));
  std::vector<char> data(static_cast<size_t>(size));
  ASSERT_EQ(sy_kv_export(prefill.e, prompt.data(), static_cast<int32_t>(prompt.size()), data.data(), size, &size), SY_API_OK);
  int32_t cached = 0;
  ASSERT_EQ(sy_kv_import(decode.e, data.data(), size, &cached), SY_API_OK) << sy_last_error();
  EXPECT_EQ(cached, 32);
  const Output imported = greedy(decode.e, prompt, 20);
  EXPECT_EQ(imported.cached, 32) << "the decode engine recomputed the prompt";
  EXPECT_EQ(imported.tokens, greedy(single.e, prompt, 20).tokens);
  std::filesystem::remove_all(dir);
}

TEST(CApiKv, TeacherForcedLogitsAgreeWithGreedyDecoding) {
  Engine eng("paged");
  ASSERT_TRUE(eng.e);
  const int32_t vocab = sy_engine_vocab_size(eng.e);
  ASSERT_EQ(vocab, 512);
  std::vector<int32_t> ids = tokenize(eng.e, "Once upon a time");
  const Output run = greedy(eng.e, ids, 6);
  std::vector<int32_t> all(ids);
  all.insert(all.end(), run.tokens.begin(), run.tokens.end() - 1);
  std::vector<float> logits(all.size() * static_cast<size_t>(vocab));
  ASSERT_EQ(sy_logits(eng.e, all.data(), static_cast<int32_t>(all.size()), logits.data(), static_cast<int64_t>(logits.size())), SY_API_OK)
      << sy_last_error();
  // Row p predicts token p + 1: the prompt's last row onwards are the greedy tokens.
  for (size_t i = 0; i < run.tokens.size(); ++i) {
    const float* row = logits.data() + (ids.size() - 1 + i) * static_cast<size_t>(vocab);
    EXPECT_EQ(std::max_element(row, row + vocab) - row, run.tokens[i]) << "position " << i;
    EXPECT_TRUE(std::all_of(row, row + vocab, [](float v) { return std::isfinite(v); }));
  }
  EXPECT_EQ(sy_logits(eng.e, all.data(), static_cast<int32_t>(all.size()), logits.data(), 10), SY_API_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sy_last_error()).find("x 512"), std::string::npos) << sy_last_error();
}

TEST(CApiKv, ATokenizerWithoutAnEngineEncodesDecodesAndRendersChats) {
  Engine eng("paged");
  ASSERT_TRUE(eng.e);
  sy_tokenizer* tok = nullptr;
  ASSERT_EQ(sy_tokenizer_open(kTokenizer.c_str(), nullptr, &tok), SY_API_OK) << sy_last_error();
  EXPECT_EQ(sy_tokenizer_vocab_size(tok), 512);
  std::vector<int32_t> ids(256);
  int32_t n = 0;
  ASSERT_EQ(sy_tokenizer_encode(tok, kStory, 1, ids.data(), 256, &n), SY_API_OK);
  ids.resize(static_cast<size_t>(n));
  EXPECT_EQ(ids, tokenize(eng.e, kStory));
  std::string text(1024, '\0');
  int64_t len = 0;
  ASSERT_EQ(sy_tokenizer_decode(tok, ids.data(), n, 1, text.data(), 1024, &len), SY_API_OK);
  text.resize(static_cast<size_t>(len));
  EXPECT_EQ(text, kStory);
  const int32_t bad = 9999;
  EXPECT_EQ(sy_tokenizer_decode(tok, &bad, 1, 1, text.data(), 0, &len), SY_API_INVALID_ARGUMENT);
  int64_t m = 0;
  EXPECT_EQ(sy_tokenizer_chat_render(tok, R"({"messages": []})", nullptr, 0, &m), SY_API_UNSUPPORTED);
  EXPECT_NE(std::string(sy_last_error()).find("tok512.bin"), std::string::npos) << sy_last_error();
  sy_tokenizer_close(tok);

  // A Hugging Face folder's tokenizer.json, with a ChatML template.
  const std::string folder = std::string(SY_SOURCE_DIR) + "/tests/models/real/qwen2-optimum";
  const std::string chatml = std::string(SY_SOURCE_DIR) + "/tests/text/chat/templates/chatml_tools.jinja";
  ASSERT_EQ(sy_tokenizer_open(folder.c_str(), chatml.c_str(), &tok), SY_API_OK) << sy_last_error();
  const char* chat = R"({"messages": [{"role": "user", "content": "Hello there"}]})";
  ASSERT_EQ(sy_tokenizer_chat_render(tok, chat, nullptr, 0, &m), SY_API_OK) << sy_last_error();
  std::string rendered(static_cast<size_t>(m), '\0');
  ASSERT_EQ(sy_tokenizer_chat_render(tok, chat, rendered.data(), m, &m), SY_API_OK);
  EXPECT_NE(rendered.find("<|im_start|>user\nHello there<|im_end|>"), std::string::npos) << rendered;
  sy_tokenizer_close(tok);
  EXPECT_EQ(sy_tokenizer_open("/nonexistent/tok", nullptr, &tok), SY_API_NOT_FOUND);
  EXPECT_NE(std::string(sy_last_error()).find("/nonexistent/tok"), std::string::npos) << sy_last_error();
  EXPECT_NE(sy_engine_tokenizer(eng.e), nullptr);
}

TEST(CApiKv, WithoutAManifestTheDefaultOneBesideTheLibraryServesTheModel) {
  const std::string def = sy_default_manifest();
  ASSERT_FALSE(def.empty()) << "no share/switchyard/default.yaml beside libswitchyard";
  EXPECT_TRUE(std::filesystem::exists(def));
  sy_engine_options o{};
  o.struct_size = sizeof o;
  o.model = kModel.c_str();
  o.tokenizer = kTokenizer.c_str();
  o.threads = 1;
  sy_engine* e = nullptr;
  ASSERT_EQ(sy_engine_create(&o, &e), SY_API_OK) << sy_last_error();
  Engine paged("paged");
  const std::vector<int32_t> prompt = tokenize(e, kStory);
  EXPECT_EQ(greedy(e, prompt, 20).tokens, greedy(paged.e, prompt, 20).tokens);
  sy_engine_destroy(e);
  o.model = nullptr;
  EXPECT_EQ(sy_engine_create(&o, &e), SY_API_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sy_last_error()).find("options.model"), std::string::npos) << sy_last_error();
}

}  // namespace
