// The C embedding API (switchyard.h) as a program outside the project sees
// it: linked against libswitchyard.so only, no core header. Error codes by
// kind, copy-out text while the engine appends to it, struct_size honoured
// both ways, and the growable sampling parameters.
#include <gtest/gtest.h>
#include <switchyard/switchyard.h>

#include <atomic>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace {

const std::string kManifest = std::string(SY_SOURCE_DIR) + "/examples/manifests/stories.yaml";

struct Engine {
  sy_engine* e = nullptr;
  explicit Engine(const std::string& manifest = kManifest, const char* profile = "paged") {
    sy_engine_options o{};
    o.struct_size = sizeof o;
    o.manifest = manifest.c_str();
    o.profile = profile;
    o.threads = 2;
    if (sy_engine_create(&o, &e) != SY_API_OK) ADD_FAILURE() << sy_last_error();
  }
  ~Engine() { sy_engine_destroy(e); }
};

sy_api_status create_status(const std::string& manifest, const char* profile, std::string* message) {
  sy_engine_options o{};
  o.struct_size = sizeof o;
  o.manifest = manifest.c_str();
  o.profile = profile;
  sy_engine* e = nullptr;
  sy_api_status s = sy_engine_create(&o, &e);
  *message = sy_last_error();
  sy_engine_destroy(e);
  return s;
}

std::string write_manifest(const std::filesystem::path& dir, const std::string& body) {
  std::filesystem::create_directories(dir);
  const auto path = dir / "manifest.yaml";
  std::ofstream(path) << body;
  return path.string();
}

std::string plugins_yaml() {
  const std::string d = SY_PLUGIN_DIR;
  return "plugins:\n  - " + d + "/attention/libswitchyard_attention.so\n  - " + d + "/cache/libswitchyard_cache.so\n";
}

std::vector<int32_t> run_ids(sy_engine* e, const sy_request_params& p) {
  sy_request* r = nullptr;
  EXPECT_EQ(sy_submit(e, &p, &r), SY_API_OK) << sy_last_error();
  if (!r) return {};
  sy_request_wait(r);
  std::vector<int32_t> ids(1024);
  int32_t n = 0;
  sy_request_poll(r, ids.data(), static_cast<int32_t>(ids.size()), &n);
  ids.resize(static_cast<size_t>(n));
  sy_request_release(r);
  return ids;
}

TEST(CApi, ErrorCodesSayWhatKindOfFailureItWas) {
  const auto dir = std::filesystem::temp_directory_path() / ("sy-capi-" + std::to_string(::getpid()));
  std::string msg;
  EXPECT_EQ(create_status("/nonexistent/manifest.yaml", nullptr, &msg), SY_API_NOT_FOUND) << msg;
  EXPECT_NE(msg.find("/nonexistent/manifest.yaml"), std::string::npos) << msg;

  std::string m = write_manifest(dir / "a", "model: " + std::string(SY_SHARED_DIR) + "/models/stories260K.onnx\nplugins:\n  - /nonexistent/libx.so\n");
  EXPECT_EQ(create_status(m, nullptr, &msg), SY_API_NOT_FOUND) << msg;
  EXPECT_NE(msg.find("/nonexistent/libx.so"), std::string::npos) << msg;

  m = write_manifest(dir / "b", "model: " + std::string(SY_SHARED_DIR) + "/models/stories260K.onnx\n" + plugins_yaml() +
                                    "passes: [attention-fusion]\ncache: {name: no-such-cache}\n");
  EXPECT_EQ(create_status(m, nullptr, &msg), SY_API_NOT_FOUND) << msg;
  EXPECT_NE(msg.find("no-such-cache"), std::string::npos) << msg;

  // A model whose attention the fusion pass cannot carry (ALiBi biases):
  // valid input this engine mode does not support.
  m = write_manifest(dir / "c", "model: " + std::string(SY_SOURCE_DIR) + "/tests/models/real/llama3-alibi/model.onnx\n" +
                                    plugins_yaml() + "passes: [attention-fusion]\ncache: {name: paged}\n");
  EXPECT_EQ(create_status(m, nullptr, &msg), SY_API_UNSUPPORTED) << msg;
  EXPECT_NE(msg.find("cannot be fused"), std::string::npos) << msg;

  m = write_manifest(dir / "d", "model: " + std::string(SY_SHARED_DIR) + "/models/stories260K.onnx\n" + plugins_yaml() +
                                    "passes: [attention-fusion]\ncache: {name: paged, options: {block_size: -3}}\n");
  EXPECT_EQ(create_status(m, nullptr, &msg), SY_API_INVALID_ARGUMENT) << msg;

  sy_engine_options o{};  // struct_size not set
  sy_engine* e = nullptr;
  EXPECT_EQ(sy_engine_create(&o, &e), SY_API_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sy_last_error()).find("struct_size"), std::string::npos) << sy_last_error();
  std::filesystem::remove_all(dir);
}

TEST(CApi, TextCopiedOutWhileTheEngineAppendsIsAlwaysAPrefixOfTheFinalText) {
  Engine eng;
  sy_request_params p{};
  p.struct_size = sizeof p;
  p.prompt_text = "Once upon a time";
  p.max_tokens = 200;
  p.ignore_eos = 1;
  sy_request* r = nullptr;
  ASSERT_EQ(sy_submit(eng.e, &p, &r), SY_API_OK) << sy_last_error();
  std::vector<std::string> seen;
  std::atomic<bool> done{false};
  std::thread reader([&] {
    std::vector<char> buf(1 << 16);
    while (!done.load()) {
      int32_t len = 0;
      ASSERT_EQ(sy_request_copy_text(r, buf.data(), static_cast<int32_t>(buf.size()), &len), SY_API_OK);
      ASSERT_LT(len, static_cast<int32_t>(buf.size()));
      ASSERT_EQ(buf[static_cast<size_t>(len)], '\0');
      if (seen.empty() || seen.back().size() != static_cast<size_t>(len)) seen.emplace_back(buf.data(), static_cast<size_t>(len));
    }
  });
  sy_request_wait(r);
  done = true;
  reader.join();
  int32_t len = 0;
  ASSERT_EQ(sy_request_copy_text(r, nullptr, 0, &len), SY_API_OK);  // length only
  std::string final_text(static_cast<size_t>(len), '\0');
  std::vector<char> small(8);
  ASSERT_EQ(sy_request_copy_text(r, small.data(), 8, &len), SY_API_OK);  // truncated, not terminated
  EXPECT_EQ(std::string(small.data(), 8), std::string(sy_request_text(r)).substr(0, 8));
  final_text = sy_request_text(r);
  EXPECT_EQ(final_text.size(), static_cast<size_t>(len));
  EXPECT_GT(final_text.size(), 100u);
  EXPECT_GT(seen.size(), 1u) << "the reader should have seen the text grow";
  for (const auto& s : seen) EXPECT_EQ(final_text.compare(0, s.size(), s), 0) << "'" << s << "' is not a prefix of the final text";
  sy_request_release(r);
}

TEST(CApi, OutputStructsFromOlderCallersAreFilledOnlyAsFarAsTheirStructSize) {
  Engine eng;
  sy_request_params p{};
  p.struct_size = sizeof p;
  p.prompt_text = "Once upon a time";
  p.max_tokens = 8;
  p.ignore_eos = 1;
  sy_request* r = nullptr;
  ASSERT_EQ(sy_submit(eng.e, &p, &r), SY_API_OK) << sy_last_error();
  sy_request_wait(r);

  // A caller whose sy_request_info ended before ttft_ms: the bytes after
  // its struct are its own and must stay untouched.
  const size_t old_size = offsetof(sy_request_info, ttft_ms);
  std::vector<unsigned char> buf(sizeof(sy_request_info) + 16, 0xAB);
  sy_request_info* old = reinterpret_cast<sy_request_info*>(buf.data());
  old->struct_size = static_cast<uint32_t>(old_size);
  ASSERT_EQ(sy_request_info_get(r, old), SY_API_OK) << sy_last_error();
  EXPECT_EQ(old->struct_size, old_size);
  EXPECT_EQ(old->completion_tokens, 8);
  EXPECT_EQ(old->finish_reason, SY_FINISH_LENGTH);
  for (size_t i = old_size; i < buf.size(); ++i) ASSERT_EQ(buf[i], 0xAB) << "byte " << i << " past the caller's struct was written";

  sy_request_info zero{};
  EXPECT_EQ(sy_request_info_get(r, &zero), SY_API_INVALID_ARGUMENT);
  EXPECT_EQ(sy_request_info_get(r, nullptr), SY_API_INVALID_ARGUMENT);
  sy_request_info full{};
  full.struct_size = sizeof full;
  ASSERT_EQ(sy_request_info_get(r, &full), SY_API_OK);
  EXPECT_GT(full.e2e_ms, 0);

  std::vector<unsigned char> mbuf(sizeof(sy_metrics) + 16, 0xCD);
  sy_metrics* m = reinterpret_cast<sy_metrics*>(mbuf.data());
  const size_t m_old = offsetof(sy_metrics, kv_blocks_total);
  m->struct_size = static_cast<uint32_t>(m_old);
  ASSERT_EQ(sy_engine_metrics(eng.e, m), SY_API_OK);
  EXPECT_EQ(m->finished, 1);
  for (size_t i = m_old; i < mbuf.size(); ++i) ASSERT_EQ(mbuf[i], 0xCD) << "byte " << i << " past the caller's metrics was written";
  sy_metrics mz{};
  EXPECT_EQ(sy_engine_metrics(eng.e, &mz), SY_API_INVALID_ARGUMENT);
  sy_request_release(r);
}

TEST(CApi, GrowableSamplingParametersEqualTheFrozenOnesAndOldParamsStillWork) {
  Engine eng;
  const int32_t prompt[] = {1, 403, 407, 261, 378};
  sy_request_params p{};
  p.struct_size = sizeof p;
  p.prompt_ids = prompt;
  p.num_prompt_ids = 5;
  p.max_tokens = 40;
  p.ignore_eos = 1;
  p.sampling = sy_sampling{sizeof(sy_sampling), 0.9f, 20, 0.95f, 1234};
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.3f;
  p.repetition_penalty = 1.1f;
  p.min_p = 0.01f;
  const auto frozen = run_ids(eng.e, p);

  sy_sampling_params sp{};
  sp.struct_size = sizeof sp;
  sp.temperature = 0.9f;
  sp.top_k = 20;
  sp.top_p = 0.95f;
  sp.min_p = 0.01f;
  sp.presence_penalty = 0.5f;
  sp.frequency_penalty = 0.3f;
  sp.repetition_penalty = 1.1f;
  sp.seed = 1234;
  sy_request_params q{};
  q.struct_size = sizeof q;
  q.prompt_ids = prompt;
  q.num_prompt_ids = 5;
  q.max_tokens = 40;
  q.ignore_eos = 1;
  q.sampling_params = &sp;
  EXPECT_EQ(run_ids(eng.e, q), frozen);
  sp.seed = 99;  // and it is really read
  EXPECT_NE(run_ids(eng.e, q), frozen);
  // Both sources for one setting: refused by name, not one silently dropped.
  q.min_p = 0.05f;
  sy_request* r = nullptr;
  EXPECT_EQ(sy_submit(eng.e, &q, &r), SY_API_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sy_last_error()).find("params.min_p is set together with params.sampling_params"), std::string::npos)
      << sy_last_error();
  q.min_p = 0.f;

  // A 1.0 caller's params end at `user`: the library reads no further.
  std::vector<unsigned char> buf(sizeof(sy_request_params), 0xFF);  // garbage after the 1.0 fields
  auto* old = reinterpret_cast<sy_request_params*>(buf.data());
  std::memset(old, 0, offsetof(sy_request_params, user) + sizeof(void*));
  old->struct_size = static_cast<uint32_t>(offsetof(sy_request_params, user) + sizeof(void*));
  old->prompt_ids = prompt;
  old->num_prompt_ids = 5;
  old->max_tokens = 20;
  old->ignore_eos = 1;
  sy_request_params greedy{};
  greedy.struct_size = sizeof greedy;
  greedy.prompt_ids = prompt;
  greedy.num_prompt_ids = 5;
  greedy.max_tokens = 20;
  greedy.ignore_eos = 1;
  EXPECT_EQ(run_ids(eng.e, *old), run_ids(eng.e, greedy));
}

TEST(CApi, ChatTemplatesAndTheModelFoldersSamplingDefaultsComeThroughTheApi) {
  // A model folder as Hugging Face lays one out: the model, its chat
  // template and generation_config.json (the tokenizer is the manifest's).
  const auto dir = std::filesystem::temp_directory_path() / ("sy_capi_chat_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(std::string(SY_SHARED_DIR) + "/models/stories260K.onnx", dir / "model.onnx",
                             std::filesystem::copy_options::overwrite_existing);
  std::ofstream(dir / "chat_template.jinja")
      << "{% for m in messages %}{% if m.role not in ['user', 'assistant'] %}{{ raise_exception('unknown role ' + m.role) }}"
         "{% endif %}<{{ m.role }}>{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}";
  std::ofstream(dir / "generation_config.json") << R"({"do_sample": true, "temperature": 0.6, "top_p": 0.9})";
  const std::string manifest = write_manifest(dir / "m", "model: " + (dir / "model.onnx").string() + "\ntokenizer: " + SY_SHARED_DIR +
                                                            "/models/tok512.bin\n" + plugins_yaml() +
                                                            "passes: [attention-fusion]\ncache: {name: paged}\n");
  Engine eng(manifest, nullptr);
  ASSERT_NE(eng.e, nullptr);
  EXPECT_NE(std::string(sy_engine_chat_template_name(eng.e)), "");
  const std::string defaults = sy_engine_sampling_defaults(eng.e);
  EXPECT_NE(defaults.find("\"temperature\":0.6"), std::string::npos) << defaults;
  EXPECT_NE(defaults.find("\"top_p\":0.9"), std::string::npos) << defaults;
  EXPECT_NE(defaults.find("generation_config.json"), std::string::npos) << defaults;

  const char* request = R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
                                          {"role": "user", "content": "Tell a story"}]})";
  const std::string expected = "<user>Hi\n<assistant>Hello\n<user>Tell a story\n<assistant>";
  char small[8];
  int64_t n = 0;
  ASSERT_EQ(sy_chat_render(eng.e, request, small, sizeof small, &n), SY_API_OK) << sy_last_error();
  ASSERT_EQ(n, static_cast<int64_t>(expected.size()));  // the full length, for a second call
  EXPECT_EQ(std::string(small, sizeof small), expected.substr(0, sizeof small));
  std::string text(static_cast<size_t>(n), '\0');
  ASSERT_EQ(sy_chat_render(eng.e, request, text.data(), n, &n), SY_API_OK);
  EXPECT_EQ(text, expected);
  // Without the generation prompt, as asked.
  ASSERT_EQ(sy_chat_render(eng.e, R"({"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": false})", text.data(),
                           static_cast<int64_t>(text.size()), &n),
            SY_API_OK);
  EXPECT_EQ(text.substr(0, static_cast<size_t>(n)), "<user>Hi\n");
  // The template's refusal and malformed input are errors that say so.
  EXPECT_EQ(sy_chat_render(eng.e, R"({"messages": [{"role": "tool", "content": "x"}]})", text.data(), 0, &n), SY_API_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sy_last_error()).find("unknown role tool"), std::string::npos) << sy_last_error();
  EXPECT_EQ(sy_chat_render(eng.e, "{not json", text.data(), 0, &n), SY_API_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sy_last_error()).find("request_json is not JSON"), std::string::npos) << sy_last_error();
  EXPECT_EQ(sy_chat_render(eng.e, R"({"prompt": "x"})", text.data(), 0, &n), SY_API_INVALID_ARGUMENT);
  EXPECT_EQ(sy_chat_render(eng.e, R"({"messages": [], "add_special_tokens": true})", text.data(), 0, &n), SY_API_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sy_last_error()).find("unknown key 'add_special_tokens'"), std::string::npos) << sy_last_error();

  // The shared model's folder has no template: nothing to render with.
  Engine plain;
  EXPECT_EQ(std::string(sy_engine_chat_template_name(plain.e)), "");
  EXPECT_EQ(std::string(sy_engine_sampling_defaults(plain.e)), "{}");
  EXPECT_EQ(sy_chat_render(plain.e, request, text.data(), 0, &n), SY_API_UNSUPPORTED);
  // A template file given explicitly replaces the folder's; a missing one is named.
  std::ofstream(dir / "other.jinja") << "{% for m in messages %}[{{ m.content }}]{% endfor %}";
  sy_engine_options o{};
  o.struct_size = sizeof o;
  o.manifest = manifest.c_str();
  const std::string other_template = (dir / "other.jinja").string();
  o.chat_template = other_template.c_str();
  sy_engine* other = nullptr;
  ASSERT_EQ(sy_engine_create(&o, &other), SY_API_OK) << sy_last_error();
  ASSERT_EQ(sy_chat_render(other, request, text.data(), static_cast<int64_t>(text.size()), &n), SY_API_OK);
  EXPECT_EQ(text.substr(0, static_cast<size_t>(n)), "[Hi][Hello][Tell a story]");
  sy_engine_destroy(other);
  const std::string missing = (dir / "missing.jinja").string();
  o.chat_template = missing.c_str();
  EXPECT_NE(sy_engine_create(&o, &other), SY_API_OK);
  EXPECT_NE(std::string(sy_last_error()).find("missing.jinja"), std::string::npos) << sy_last_error();
  std::filesystem::remove_all(dir);
}

TEST(CApi, EnginesCreatedOnSeveralThreadsAtOnceShareThePluginsSafely) {
  // Each engine loads the same plugin libraries; their entry points then run
  // on several threads at once (the fault tests found a description freed
  // under a concurrent init). Under TSan in CI.
  const int32_t prompt[] = {1, 403, 407, 261, 378};
  sy_request_params p{};
  p.struct_size = sizeof p;
  p.prompt_ids = prompt;
  p.num_prompt_ids = 5;
  p.max_tokens = 12;
  p.ignore_eos = 1;
  std::vector<int32_t> expected;
  {
    Engine one;
    expected = run_ids(one.e, p);
  }
  ASSERT_EQ(expected.size(), 12u);
  for (int round = 0; round < 3; ++round) {
    std::vector<std::vector<int32_t>> got(4);
    std::vector<std::thread> threads;
    for (size_t t = 0; t < got.size(); ++t)
      threads.emplace_back([&, t] {
        Engine e;
        if (e.e) got[t] = run_ids(e.e, p);
      });
    for (auto& th : threads) th.join();
    for (const auto& g : got) EXPECT_EQ(g, expected);
  }
}

}  // namespace

namespace {

// sy_embed against the engine's own numbers: the mean of the final hidden
// states, normalised, is a unit vector whose size is the model's width; the
// info says how it was pooled; bad ids are refused by name. (Against ONNX
// Runtime: tests/server/test_embeddings.py.)
TEST(CApi, EmbeddingsArePooledAsTheModelSaysAndBadIdsRefused) {
  Engine paged;
  const int32_t ids[] = {1, 403, 407, 261};
  int32_t dim = 0;
  ASSERT_EQ(sy_embed(paged.e, ids, 4, nullptr, 0, &dim), SY_API_OK) << sy_last_error();
  EXPECT_EQ(dim, 64);  // stories260K's width
  std::vector<float> v(static_cast<size_t>(dim));
  EXPECT_EQ(sy_embed(paged.e, ids, 4, v.data(), 3, &dim), SY_API_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sy_last_error()).find("holds 3 floats"), std::string::npos) << sy_last_error();
  ASSERT_EQ(sy_embed(paged.e, ids, 4, v.data(), dim, &dim), SY_API_OK) << sy_last_error();
  double norm = 0;
  for (float x : v) norm += static_cast<double>(x) * x;
  EXPECT_NEAR(norm, 1.0, 1e-5);
  // The same ids again: the same vector (no state kept between calls).
  std::vector<float> again(static_cast<size_t>(dim));
  ASSERT_EQ(sy_embed(paged.e, ids, 4, again.data(), dim, &dim), SY_API_OK);
  EXPECT_EQ(v, again);
  char info[256];
  int64_t n = 0;
  ASSERT_EQ(sy_engine_embedding_info(paged.e, info, sizeof info, &n), SY_API_OK) << sy_last_error();
  EXPECT_EQ(std::string(info, static_cast<size_t>(n)).rfind(R"({"pooling":"mean","normalize":true,"source":)", 0), 0u) << std::string(info, static_cast<size_t>(n));

  EXPECT_EQ(sy_embed(paged.e, ids, 0, v.data(), dim, &dim), SY_API_INVALID_ARGUMENT);
  const int32_t outside[] = {1, 100000};
  EXPECT_NE(sy_embed(paged.e, outside, 2, v.data(), dim, &dim), SY_API_OK);
  EXPECT_NE(std::string(sy_last_error()).find("100000"), std::string::npos) << sy_last_error();
}

}  // namespace
