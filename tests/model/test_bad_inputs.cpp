// Real broken inputs, each made from the shared model: every one gets an
// error that names the problem, and none crashes the process.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <fstream>

#include "text/chat_template.h"
#include "text/hf_tokenizer.h"
#include "engine/generator.h"
#include "test_support.h"

namespace sy {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}
onnx::ModelProto shared_model() {
  onnx::ModelProto m;
  EXPECT_TRUE(m.ParseFromString(read_file(test::model_path("stories260K.onnx"))));
  return m;
}

struct Env {
  ThreadPool threads{1};
  KernelRegistry registry = KernelRegistry::with_builtins();
  std::unique_ptr<DecoderModel> load(const std::string& path, ModelOptions o = {}) {
    return DecoderModel::load(path, registry, &threads, o);
  }
};

using test::error_of;

TEST(BadInputs, TruncatedFile) {
  test::TempDir dir;
  std::string bytes = read_file(test::model_path("stories260K.onnx"));
  write_file(dir.path / "cut.onnx", bytes.substr(0, bytes.size() / 2));
  Env env;
  std::string msg = error_of([&] { env.load((dir.path / "cut.onnx").string()); });
  EXPECT_NE(msg.find("cut.onnx"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated or corrupt"), std::string::npos) << msg;
}

TEST(BadInputs, MissingAndEmptyFiles) {
  test::TempDir dir;
  Env env;
  std::string msg = error_of([&] { env.load((dir.path / "nope.onnx").string()); });
  EXPECT_NE(msg.find("cannot open"), std::string::npos) << msg;
  write_file(dir.path / "empty.onnx", "");
  msg = error_of([&] { env.load((dir.path / "empty.onnx").string()); });
  EXPECT_NE(msg.find("empty"), std::string::npos) << msg;
}

TEST(BadInputs, UnknownOpsAreAllListed) {
  test::TempDir dir;
  auto m = shared_model();
  int renamed = 0;
  for (auto& n : *m.mutable_graph()->mutable_node()) {
    if (n.op_type() == "Sigmoid" && renamed == 0) n.set_op_type("Sigmoidd"), ++renamed;
    else if (n.op_type() == "Softmax" && renamed == 1) n.set_op_type("SoftMaxx"), ++renamed;
  }
  ASSERT_EQ(renamed, 2);
  write_file(dir.path / "ops.onnx", m.SerializeAsString());
  Env env;
  std::string msg = error_of([&] { env.load((dir.path / "ops.onnx").string()); });
  EXPECT_NE(msg.find("ai.onnx::Sigmoidd (opset 17)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ai.onnx::SoftMaxx (opset 17)"), std::string::npos) << msg;
}

TEST(BadInputs, OpsWithoutKernelAreAllListed) {
  // Valid ONNX the engine has no kernel for: every such node is named at once.
  test::TempDir dir;
  auto m = shared_model();
  int changed = 0;
  for (auto& n : *m.mutable_graph()->mutable_node())
    if ((n.op_type() == "Sqrt" || n.op_type() == "Sin") && changed < 2) {
      n.set_op_type(n.op_type() == "Sqrt" ? "Atanh" : "Asinh");
      ++changed;
    }
  write_file(dir.path / "nokernel.onnx", m.SerializeAsString());
  Env env;
  std::string msg = error_of([&] { env.load((dir.path / "nokernel.onnx").string()); });
  EXPECT_NE(msg.find("no cpu kernel for 2 node(s)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Atanh"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Asinh"), std::string::npos) << msg;
}

TEST(BadInputs, WrongInitializerSize) {
  test::TempDir dir;
  auto m = shared_model();
  auto* init = m.mutable_graph()->mutable_initializer(0);
  std::string name = init->name();
  init->mutable_raw_data()->resize(init->raw_data().size() - 4);
  write_file(dir.path / "size.onnx", m.SerializeAsString());
  Env env;
  std::string msg = error_of([&] { env.load((dir.path / "size.onnx").string()); });
  EXPECT_NE(msg.find(name), std::string::npos) << msg;
}

// Moves the embedding into an external data file at `location`.
void externalize(onnx::ModelProto& m, const std::string& location, const std::filesystem::path& data_file) {
  auto* init = m.mutable_graph()->mutable_initializer(0);
  write_file(data_file, init->raw_data());
  init->clear_raw_data();
  init->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* kv = init->add_external_data();
  kv->set_key("location");
  kv->set_value(location);
}

TEST(BadInputs, ExternalDataOutsideTheModelFolder) {
  test::TempDir dir;
  std::filesystem::create_directories(dir.path / "model");
  auto m = shared_model();
  externalize(m, "../weights.bin", dir.path / "weights.bin");
  write_file(dir.path / "model" / "ext.onnx", m.SerializeAsString());
  Env env;
  std::string msg = error_of([&] { env.load((dir.path / "model" / "ext.onnx").string()); });
  EXPECT_NE(msg.find("outside the model's folder"), std::string::npos) << msg;
  EXPECT_NE(msg.find("../weights.bin"), std::string::npos) << msg;
}

TEST(BadInputs, ExternalDataInsideTheFolderLoads) {
  test::TempDir dir;
  auto m = shared_model();
  externalize(m, "weights.bin", dir.path / "weights.bin");
  write_file(dir.path / "ext.onnx", m.SerializeAsString());
  Env env;
  auto ext = env.load((dir.path / "ext.onnx").string());
  auto base = env.load(test::model_path("stories260K.onnx"));
  BaselineGenerator a(*ext), b(*base);
  EXPECT_EQ(a.last_logits({1, 403, 407}), b.last_logits({1, 403, 407}));
}

TEST(BadInputs, MissingGraphInput) {
  test::TempDir dir;
  auto m = shared_model();
  auto* inputs = m.mutable_graph()->mutable_input();
  for (int i = 0; i < inputs->size(); ++i)
    if (inputs->Get(i).name() == "position_ids") {
      inputs->DeleteSubrange(i, 1);
      break;
    }
  write_file(dir.path / "noinput.onnx", m.SerializeAsString());
  Env env;
  std::string msg = error_of([&] { env.load((dir.path / "noinput.onnx").string()); });
  EXPECT_NE(msg.find("position_ids"), std::string::npos) << msg;
}

TEST(BadInputs, EmptyPromptAndPromptOverContext) {
  Env env;
  ModelOptions o;
  o.max_context = 8;
  auto model = env.load(test::model_path("stories260K.onnx"), o);
  BaselineGenerator gen(*model);
  EXPECT_NE(error_of([&] { gen.last_logits({}); }).find("the prompt is empty"), std::string::npos);
  GenerationRequest req;
  req.prompt = std::vector<int>(9, 300);
  std::string msg = error_of([&] { gen.generate({req}); });
  EXPECT_NE(msg.find("9 tokens, over the context limit of 8"), std::string::npos) << msg;
  req.prompt = {1, 9999};
  msg = error_of([&] { gen.generate({req}); });
  EXPECT_NE(msg.find("9999"), std::string::npos) << msg;
  // The model still serves a good request afterwards.
  req.prompt = {1, 403};
  req.max_tokens = 3;
  EXPECT_EQ(gen.generate({req})[0].tokens.size(), 3u);
}

TEST(BadInputs, HostileSizesAreRefusedWithoutAllocating) {
  test::TempDir dir;
  // An initializer whose header claims 100 GB, with no data behind it.
  auto m = shared_model();
  auto* init = m.mutable_graph()->add_initializer();
  init->set_name("huge");
  init->set_data_type(onnx::TensorProto::FLOAT);
  init->add_dims(25000000000LL);
  write_file(dir.path / "huge.onnx", m.SerializeAsString());
  Env env;
  std::string msg = error_of([&] { env.load((dir.path / "huge.onnx").string()); });
  EXPECT_NE(msg.find("huge"), std::string::npos) << msg;  // named, refused before any allocation
  // Dimensions whose product overflows.
  auto m2 = shared_model();
  auto* over = m2.mutable_graph()->add_initializer();
  over->set_name("overflow");
  over->set_data_type(onnx::TensorProto::FLOAT);
  for (int i = 0; i < 4; ++i) over->add_dims(1LL << 40);
  write_file(dir.path / "overflow.onnx", m2.SerializeAsString());
  msg = error_of([&] { env.load((dir.path / "overflow.onnx").string()); });
  EXPECT_NE(msg.find("more than 2^40 elements"), std::string::npos) << msg;
  // Not a file at all.
  msg = error_of([&] { env.load("/dev/zero"); });
  EXPECT_NE(msg.find("not a regular file"), std::string::npos) << msg;
  // A shape computed at run time that would need petabytes.
  EXPECT_THROW(Tensor::empty(DType::F32, Shape{1LL << 30, 1LL << 30}), Error);
  auto pool = BufferPool::create();
  EXPECT_THROW(pool->allocate(DType::F32, Shape{1LL << 62, 4}), Error);
}

TEST(BadInputs, WrongInputShapeAtRunTime) {
  Env env;
  auto model = env.load(test::model_path("stories260K.onnx"));
  std::vector<Tensor> inputs(model->graph().inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) inputs[i] = Tensor::empty(DType::I64, Shape{1, 1});
  std::string msg = error_of([&] { model->executor().run(inputs); });
  EXPECT_NE(msg.find("past_key_values.0.key"), std::string::npos) << msg;
}

}  // namespace
}  // namespace sy

namespace sy {
namespace {

// Inputs the fuzzers (tests/fuzz) found crashing, kept as regression tests:
// each must now end in a clean error or a loaded graph, under ASan/UBSan.
TEST(BadInputs, FuzzerFindingsStayFixed) {
  const std::filesystem::path dir = std::filesystem::path(SWITCHYARD_SOURCE_DIR) / "tests/fuzz/regressions";
  KernelRegistry registry = KernelRegistry::with_builtins();
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".onnx") continue;
    ++files;
    try {
      Graph g = import_onnx_bytes(read_file(entry.path().string()), "/nonexistent", entry.path().filename().string());
      PassContext ctx{registry, nullptr, {}};
      simplify_graph(g, ctx);
    } catch (const Error&) {
    }
  }
  EXPECT_GT(files, 0);
}

// tokenizer.json files the loader fuzzer found (a file, the 0xFF 0xFE
// marker, a text): refused with sy::Error or encoded, never undefined behaviour.
TEST(BadInputs, TokenizerJsonFuzzerFindingsStayFixed) {
  const std::filesystem::path dir = std::filesystem::path(SWITCHYARD_SOURCE_DIR) / "tests/fuzz/regressions";
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    ++files;
    const std::string bytes = read_file(entry.path().string());
    const size_t cut = bytes.find("\xFF\xFE");
    try {
      auto tok = HfTokenizer::parse(bytes.substr(0, cut), entry.path().filename().string());
      if (cut != std::string::npos) (void)tok->decode(tok->encode(bytes.substr(cut + 2), true), false);
    } catch (const Error&) {
    }
  }
  EXPECT_GT(files, 0);
}

// Chat templates the Jinja fuzzer found: each must be refused with sy::Error
// (or render), never crash.
TEST(BadInputs, ChatTemplateFuzzerFindingsStayFixed) {
  const std::filesystem::path dir = std::filesystem::path(SWITCHYARD_SOURCE_DIR) / "tests/fuzz/regressions";
  int files = 0;
  ChatRequest r;
  r.messages = OrderedJson::parse(R"([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}])");
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".jinja") continue;
    ++files;
    std::string text = read_file(entry.path().string());
    text = text.substr(0, text.find("\xFF\xFE"));
    try {
      (void)ChatTemplate::from_source(text, entry.path().filename().string()).apply(r);
    } catch (const Error&) {
    }
  }
  EXPECT_GT(files, 0);
}

}  // namespace
}  // namespace sy
