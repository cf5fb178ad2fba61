// GGUF files: the block formulas against the gguf package's dequantization
// (what transformers loads), `convert` folders that ONNX Runtime runs to the
// engine's logits, and malformed files refused with the key or tensor named.
// (Whole models against transformers: test_real_models.cpp, *-gguf.)
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "engine/session.h"
#include "facade/engine.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_tensors.h"
#include "graph/gguf_model.h"
#include "manifest/manifest.h"
#include "test_support.h"
#include "text/gguf_vocab.h"
#include "text/tokenizer.h"

namespace sy {
namespace {

namespace fs = std::filesystem;

std::string real(const std::string& model) { return test::source_dir() + "/tests/models/real/" + model + "/model.gguf"; }
std::string seed(const std::string& name) { return test::source_dir() + "/tests/fuzz/corpus/gguf/" + name + ".gguf"; }

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Every type the reader takes, bit for bit the gguf package's float32.
TEST(Gguf, BlockFormulasMatchTheGgufPackage) {
  const std::string dir = test::source_dir() + "/tests/models/gguf-blocks";
  const auto ref = test::read_json(dir + "/blocks.json");
  const gguf::File f = gguf::File::open(dir + "/blocks.gguf");
  int checked = 0;
  for (const auto& [name, values] : ref.items()) {
    const gguf::TensorInfo& t = f.tensor(name);
    const std::vector<float> got = gguf::dequantize(t, f.read_raw(t));
    ASSERT_EQ(got.size(), values.size()) << name;
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], values[i].get<float>()) << name << " element " << i;
    // Where a block maps onto MatMulNBits, its (code - zero point) * scale
    // is the same value (Q4_1: within the float zero point's rounding).
    if (auto q = gguf::to_block_quant(t, f.read_raw(t))) {
      const int64_t blocks = q->K / q->block_size;
      for (int64_t n = 0; n < q->N; ++n)
        for (int64_t k = 0; k < q->K; ++k) {
          const int64_t b = n * blocks + k / q->block_size, at = n * q->K + k;
          const uint8_t byte = q->codes[static_cast<size_t>(n * q->K * q->bits / 8 + k * q->bits / 8)];
          const int code = q->bits == 8 ? byte : (k % 2 ? byte >> 4 : byte & 0xF);
          const float zp = q->float_zero_points.empty() ? static_cast<float>(1 << (q->bits - 1)) : q->float_zero_points[static_cast<size_t>(b)];
          const float v = (static_cast<float>(code) - zp) * q->scales[static_cast<size_t>(b)];
          ASSERT_NEAR(v, got[static_cast<size_t>(at)], 1e-6 + 1e-6 * std::abs(got[static_cast<size_t>(at)])) << name << " " << at;
        }
    }
    ++checked;
  }
  EXPECT_EQ(checked, 12);  // Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K..Q6_K F16 F32
}

EngineConfig baseline_config(const std::string& model) {
  EngineConfig c;
  ::setenv("SWITCHYARD_PLUGIN_DIR", SY_PLUGIN_DIR, 1);
  c = Manifest::load(SY_DEFAULT_MANIFEST).resolve("baseline");
  c.model = model;
  c.threads = 2;
  return c;
}

std::string shell_out(const std::string& cmd) {
  auto r = test::shell(cmd, false);
  EXPECT_EQ(r.status, 0) << cmd << "\n" << r.out;
  return r.out;
}

// The converted folder: ONNX Runtime's logits within 1e-4 of the engine's
// (quantized blocks as MatMulNBits, float zero points included), the engine
// gives the file's own logits from it, and its tokenizer.json the same ids.
// ONNX Runtime multiplies in float: the engine's quantized kernels take
// their float-activation path here (the int8-activation ones round the
// activations, by design).
TEST(Gguf, ConvertedFolderRunsInOnnxRuntime) {
  ::setenv("SWITCHYARD_QUANT_ISA", "scalar", 1);
  struct Restore {
    ~Restore() { ::unsetenv("SWITCHYARD_QUANT_ISA"); }
  } restore;
  for (const char* model : {"llama-gguf-q4_1", "qwen2-gguf", "gemma2-gguf"}) {
    test::TempDir dir;
    const std::string out = (dir.path / "folder").string();
    const auto summary = convert_gguf(real(model), out, false);
    for (const char* f : {"model.onnx", "model.onnx.data", "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"})
      EXPECT_TRUE(fs::exists(fs::path(out) / f)) << model << " " << f;
    const std::vector<int> prompt = {1, 17, 93, 4, 250, 31, 77};
    const auto from_gguf = Session::create(baseline_config(real(model)))->last_logits(prompt);
    const auto from_folder = Session::create(baseline_config(out))->last_logits(prompt);
    const auto ort = nlohmann::json::parse(shell_out(std::string(SWITCHYARD_PYTHON) + " " + SWITCHYARD_GENERATORS_DIR + "/ort_last_logits.py " + out +
                                                     "/model.onnx 1,17,93,4,250,31,77"))["last_logits"]
                         .get<std::vector<float>>();
    ASSERT_EQ(ort.size(), from_folder.size());
    for (size_t i = 0; i < ort.size(); ++i) {
      ASSERT_NEAR(from_folder[i], ort[i], 1e-4) << model << " logit " << i;
      ASSERT_EQ(from_folder[i], from_gguf[i]) << model << " logit " << i;
    }
    const auto a = load_tokenizer(real(model)), b = ModelFolder::load_tokenizer_file(ModelFolder::tokenizer_file_of(out));
    EXPECT_EQ(a->encode("hello world abc", false), b->encode("hello world abc", false)) << model;
    EXPECT_EQ(test::read_json(out + "/config.json")["num_hidden_layers"], 2) << model;
  }
}

// A file with its bytes changed at `at` (found by content), then parsed and
// imported: the error names what is wrong.
std::string error_of_bytes(const std::string& bytes) {
  return test::error_of([&] {
    const gguf::File f = gguf::File::parse(std::make_shared<gguf::MemorySource>(bytes), "bad.gguf");
    (void)import_gguf(f, "/nonexistent");
  });
}

size_t find(const std::string& bytes, const std::string& needle) {
  const size_t at = bytes.find(needle);
  EXPECT_NE(at, std::string::npos) << needle;
  return at;
}

TEST(Gguf, MalformedFilesAreRefusedNamingTheProblem) {
  const std::string good = read_bytes(seed("llama-f32-bpe"));
  EXPECT_HAS(error_of_bytes(good.substr(0, 3)), "truncated");
  EXPECT_HAS(error_of_bytes(good.substr(0, good.size() - 100)), "runs past the end of the file");
  std::string bad = good;
  bad[0] = 'X';
  EXPECT_HAS(error_of_bytes(bad), "not a GGUF file");
  bad = good;
  bad[4] = 7;  // version
  EXPECT_HAS(error_of_bytes(bad), "GGUF version 7 is not supported");
  // The architecture string "llama" -> "llamx".
  bad = good;
  const size_t arch = find(bad, "general.architecture") + std::strlen("general.architecture") + 4 + 8;
  ASSERT_EQ(bad.substr(arch, 5), "llama");
  bad[arch + 4] = 'x';
  EXPECT_HAS(error_of_bytes(bad), "general.architecture 'llamx' is not supported");
  // A tensor's type code -> 99 (after its name, rank and dims).
  bad = good;
  const std::string name = "output_norm.weight";
  const size_t info = find(bad, name) + name.size();
  uint32_t rank = 0;
  std::memcpy(&rank, bad.data() + info, 4);
  const uint32_t type = 99;
  std::memcpy(bad.data() + info + 4 + 8 * rank, &type, 4);
  EXPECT_HAS(error_of_bytes(bad), "tensor 'output_norm.weight' has ggml type type 99");
  // The metadata's width disagrees with the tensors.
  bad = good;
  const size_t width = find(bad, "llama.embedding_length") + std::strlen("llama.embedding_length") + 4;
  const uint32_t wrong = 48;
  std::memcpy(bad.data() + width, &wrong, 4);
  EXPECT_HAS(error_of_bytes(bad), "token_embd.weight");
  // Mixtral-style experts under the llama architecture (the key
  // llama.attention.head_count_kv renamed llama.expert_count, its length
  // prefix with it, bytes appended so the data keeps its place) without
  // the count of experts a token uses: refused naming the missing key.
  bad = good;
  const size_t key_at = find(bad, "llama.attention.head_count_kv");
  const uint64_t len = std::strlen("llama.expert_count");
  std::memcpy(bad.data() + key_at - 8, &len, 8);
  bad.replace(key_at, std::strlen("llama.attention.head_count_kv"), "llama.expert_count");
  bad.append(std::strlen("llama.attention.head_count_kv") - len, '\0');
  EXPECT_HAS(error_of_bytes(bad), "metadata 'llama.expert_used_count' is missing");
  // A mixture-of-experts file whose layer 0 lacks its stacked down
  // projections (the tensor's name changed in place): refused naming it.
  bad = read_bytes((fs::path(test::source_dir()) / "tests/models/real/qwen3moe-gguf/model.gguf").string());
  bad.replace(find(bad, "blk.0.ffn_down_exps"), std::strlen("blk.0.ffn_down_exps"), "blk.0.ffn_down_expx");
  EXPECT_HAS(error_of_bytes(bad), "blk.0.ffn_down_exps.weight");
  // Its layer 0 without a router: refused naming the router, not taken
  // for a dense layer (which would name a dense matrix it never had).
  bad = read_bytes((fs::path(test::source_dir()) / "tests/models/real/qwen3moe-gguf/model.gguf").string());
  bad.replace(find(bad, "blk.0.ffn_gate_inp"), std::strlen("blk.0.ffn_gate_inp"), "blk.0.ffn_gate_inx");
  EXPECT_HAS(error_of_bytes(bad), "blk.0.ffn_gate_inp.weight");
  // A metadata length past the end.
  bad = good;
  const uint64_t huge = uint64_t{1} << 40;
  std::memcpy(bad.data() + find(bad, "general.architecture") - 8, &huge, 8);
  EXPECT_HAS(error_of_bytes(bad), "truncated");
}

// Files the GGUF fuzzer found: refused with sy::Error naming the problem,
// never an exception of another type (a vocabulary piece that is not UTF-8
// made the tokenizer.json writer throw its own).
TEST(Gguf, FuzzerFindingsStayFixed) {
  const fs::path dir = fs::path(test::source_dir()) / "tests/fuzz/regressions";
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".gguf") continue;
    ++files;
    const std::string msg = test::error_of([&] {
      const gguf::File f = gguf::File::parse(std::make_shared<gguf::MemorySource>(read_bytes(entry.path().string())), "found.gguf");
      (void)gguf_tokenizer(f).tokenizer_json.dump();
      (void)import_gguf(f, "/nonexistent");
    });
    if (entry.path().filename() == "gguf-token-not-utf8.gguf") {
      EXPECT_HAS(msg, "is not valid UTF-8");
    }
  }
  EXPECT_GT(files, 0);
}

// The engine's view of a file: inspect says what became of its tensors, and
// --dequantize makes every matrix float32.
TEST(Gguf, InspectSaysWhatWasKeptQuantized) {
  ::setenv("SWITCHYARD_PLUGIN_DIR", SY_PLUGIN_DIR, 1);
  EngineOptions o;
  o.manifest = SY_DEFAULT_MANIFEST;
  o.profile = "baseline";
  o.model = real("llama-gguf-q4_1");
  auto j = Engine::open(o)->describe();
  EXPECT_EQ(j["gguf"]["architecture"], "llama");
  EXPECT_EQ(j["gguf"]["kept_quantized"], 15);  // 7 per layer and the head
  EXPECT_EQ(j["gguf"]["stored_types"]["Q4_1"], 16);  // and the embedding table, read as float32 rows
  o.gguf_dequantize = true;
  j = Engine::open(o)->describe();
  EXPECT_EQ(j["gguf"]["kept_quantized"], 0);
  EXPECT_EQ(j["kernels_used"].count("switchyard-quantize com.microsoft::MatMulNBits"), 0u);
}

// A mixture of experts stored in Q8_0 keeps its expert stacks in their
// blocks (ExpertMatMulNBits over the file's codes and scales, never a float
// copy of the stack), and on the float-activation path gives transformers'
// logits as closely as the float file does.
TEST(Gguf, QuantizedExpertStacksStayInTheirBlocks) {
  ::setenv("SWITCHYARD_PLUGIN_DIR", SY_PLUGIN_DIR, 1);
  struct Restore {  // the caller's choice of path, whatever this test does
    const char* was = std::getenv("SWITCHYARD_QUANT_ISA");
    std::string keep = was ? was : "";
    ~Restore() { was ? ::setenv("SWITCHYARD_QUANT_ISA", keep.c_str(), 1) : ::unsetenv("SWITCHYARD_QUANT_ISA"); }
  } restore;
  ::setenv("SWITCHYARD_QUANT_ISA", __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") ? "avx512" : __builtin_cpu_supports("avx2") ? "avx2" : "scalar", 1);
  EngineOptions o;
  o.manifest = SY_DEFAULT_MANIFEST;
  o.profile = "paged";
  o.model = real("qwen3moe-gguf-q8_0");
  auto engine = Engine::open(o);
  auto j = engine->describe();
  EXPECT_EQ(j["gguf"]["architecture"], "qwen3moe");
  EXPECT_EQ(j["gguf"]["kept_quantized"], 15);  // per layer 4 attention matrices and 3 stacks; the head
  EXPECT_EQ(j["kernels_used"].count("switchyard-quantize switchyard::ExpertMatMulNBits"), 1u) << j["kernels_used"].dump();
  const auto ref = test::read_json(test::source_dir() + "/tests/models/real/qwen3moe-gguf-q8_0/ref.json");
  std::vector<int> prompt;
  for (const auto& t : ref["prompt"]) prompt.push_back(t.get<int>());
  const auto got = engine->last_logits(prompt);
  const auto& want = ref["logits"][ref["logits"].size() - 1];
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i].get<double>()));
  EXPECT_LE(worst, 1e-4);
}

}  // namespace
}  // namespace sy
