// The decoder interface by role, not by fixed name: the shared model with
// its inputs and outputs renamed the ways other exporters spell them (and
// reordered) runs exactly as the original in every mode; a graph whose
// token ids cannot be found is refused with the graph's inputs listed.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>
#include <cstring>
#include <map>

#include "engine/session.h"
#include "graph/onnx_import.h"
#include "manifest/manifest.h"
#include "test_support.h"

namespace sy {
namespace {

onnx::ModelProto load_proto(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  onnx::ModelProto m;
  EXPECT_TRUE(m.ParseFromIstream(&in));
  return m;
}

// Renames graph inputs/outputs (and every node input/output reading them).
void rename(onnx::ModelProto& m, const std::map<std::string, std::string>& names) {
  auto fix = [&](std::string* s) {
    auto it = names.find(*s);
    if (it != names.end()) *s = it->second;
  };
  onnx::GraphProto* g = m.mutable_graph();
  for (auto& v : *g->mutable_input()) fix(v.mutable_name());
  for (auto& v : *g->mutable_output()) fix(v.mutable_name());
  for (auto& v : *g->mutable_value_info()) fix(v.mutable_name());
  for (auto& n : *g->mutable_node()) {
    for (auto& i : *n.mutable_input()) fix(&i);
    for (auto& o : *n.mutable_output()) fix(&o);
  }
}

std::string save(const onnx::ModelProto& m, const test::TempDir& dir, const std::string& file) {
  std::string path = (dir.path / file).string();
  std::ofstream out(path, std::ios::binary);
  m.SerializeToOstream(&out);
  return path;
}

EngineConfig config_for(const std::string& model, const std::string& profile) {
  ::setenv("SWITCHYARD_PLUGIN_DIR", SY_PLUGIN_DIR, 1);
  EngineConfig c = Manifest::load(SY_DEFAULT_MANIFEST).resolve(profile);
  c.model = model;
  c.threads = 2;
  return c;
}

GenerationRequest greedy(std::vector<int> prompt, int n) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = n;
  r.stop_at_eos = false;
  return r;
}

// Weights are streamed once per decoded token: a large initializer is moved
// into a buffer that starts on a 2 MiB boundary (advised onto transparent
// huge pages), not left in the protobuf string; small ones stay zero-copy.
TEST(ModelIo, LargeInitializersLandInHugePageAlignedBuffersWithTheirValues) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("add");
  const int64_t big = (int64_t{3} << 20) / 4 + 5;  // just over 3 MiB of floats
  auto add_init = [&](const char* name, int64_t n) {
    onnx::TensorProto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_dims(n);
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i % 1000) * 0.5f;
    t->set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
  };
  add_init("w_big", big);
  add_init("w_small", 16);
  for (const char* name : {"w_big", "w_small"}) {
    onnx::NodeProto* n = g->add_node();
    n->set_op_type("Identity");
    n->add_input(name);
    n->add_output(std::string(name) + "_out");
    onnx::ValueInfoProto* o = g->add_output();
    o->set_name(std::string(name) + "_out");
    o->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
    o->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(name == std::string("w_big") ? big : 16);
  }
  std::string bytes;
  ASSERT_TRUE(m.SerializeToString(&bytes));
  Graph graph = import_onnx_bytes(bytes, "/nonexistent", "add.onnx");
  const Value& w = graph.values[static_cast<size_t>(*graph.find_value("w_big"))];
  ASSERT_TRUE(w.constant.has_value());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w.constant->raw()) % (uintptr_t{2} << 20), 0u);
  const float* v = w.constant->data<float>();
  for (int64_t i : {int64_t{0}, int64_t{999}, int64_t{1000}, big - 1}) EXPECT_EQ(v[i], static_cast<float>(i % 1000) * 0.5f) << i;
  const Value& s = graph.values[static_cast<size_t>(*graph.find_value("w_small"))];
  ASSERT_TRUE(s.constant.has_value());
  EXPECT_EQ(s.constant->data<float>()[15], 7.5f);
}

TEST(ModelIo, HostAllocationsOfTwoMibOrMoreStartOnAHugePageBoundary) {
  for (size_t bytes : {size_t{2} << 20, (size_t{5} << 20) + 3}) {
    void* p = host_alloc(bytes, 64);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (uintptr_t{2} << 20), 0u) << bytes;
    std::memset(p, 1, bytes);  // the whole requested size is usable
    std::free(p);
  }
  void* small = host_alloc(100, 256);
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small) % 256, 0u);
  std::free(small);
  Tensor t = Tensor::empty(DType::F32, Shape{1 << 20});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % (uintptr_t{2} << 20), 0u);
}

TEST(ModelIo, OtherSpellingsAndOrdersOfTheKvInputsRunIdentically) {
  test::TempDir dir;
  onnx::ModelProto m = load_proto(test::model_path("stories260K.onnx"));
  int layers = 0;
  for (const auto& in : m.graph().input()) layers += in.name().rfind("past_key_values.", 0) == 0 ? 1 : 0;
  layers /= 2;
  std::map<std::string, std::string> names;
  for (int l = 0; l < layers; ++l) {
    const std::string n = std::to_string(l);
    names["past_key_values." + n + ".key"] = "past_key_" + n;       // past_key_N
    names["past_key_values." + n + ".value"] = "past." + n + ".v";  // past.N.v
    names["present." + n + ".key"] = "present_key." + n;            // present_key.N
    names["present." + n + ".value"] = "present." + n + ".value";
  }
  rename(m, names);
  // Values before keys, last layer first: the order is not the interface.
  auto* inputs = m.mutable_graph()->mutable_input();
  std::reverse(inputs->begin(), inputs->end());
  const std::string path = save(m, dir, "renamed.onnx");
  const std::vector<int> prompt{1, 403, 407, 261, 378};
  for (const char* profile : {"baseline", "paged"}) {
    auto original = Session::create(config_for(test::model_path("stories260K.onnx"), profile));
    auto renamed = Session::create(config_for(path, profile));
    EXPECT_EQ(renamed->model().num_layers(), layers);
    EXPECT_EQ(renamed->last_logits(prompt), original->last_logits(prompt)) << profile;
    EXPECT_EQ(renamed->generate({greedy(prompt, 24)})[0].tokens, original->generate({greedy(prompt, 24)})[0].tokens) << profile;
  }
}

TEST(ModelIo, AGraphWithoutTokenIdsIsRefusedListingItsInputs) {
  test::TempDir dir;
  onnx::ModelProto m = load_proto(test::model_path("stories260K.onnx"));
  rename(m, {{"input_ids", "embeddings_in"}});
  const std::string path = save(m, dir, "no_ids.onnx");
  std::string msg = test::error_of([&] { Session::create(config_for(path, "baseline")); });
  EXPECT_HAS(msg, "no token-ids input");
  EXPECT_HAS(msg, "the graph's inputs are:");
  EXPECT_HAS(msg, "'embeddings_in'");
  EXPECT_HAS(msg, "'past_key_values.0.key'");
}

TEST(ModelIo, AnInputWithNoRoleIsNamed) {
  test::TempDir dir;
  onnx::ModelProto m = load_proto(test::model_path("stories260K.onnx"));
  rename(m, {{"position_ids", "rope_offsets"}});
  const std::string path = save(m, dir, "odd.onnx");
  std::string msg = test::error_of([&] { Session::create(config_for(path, "baseline")); });
  EXPECT_HAS(msg, "graph input 'rope_offsets' has no role");
}

TEST(ModelIo, AModelFolderIsFoundAndItsGenerationConfigGivesTheEosIds) {
  test::TempDir dir;
  std::filesystem::copy_file(test::model_path("stories260K.onnx"), dir.path / "model.onnx");
  std::ofstream(dir.path / "generation_config.json") << R"({"eos_token_id": [2, 7]})";
  auto s = Session::create(config_for(dir.path.string(), "baseline"));
  EXPECT_EQ(s->model().eos_ids(), (std::vector<int>{2, 7}));
  EXPECT_TRUE(s->model().is_eos(7, {}));
  EXPECT_FALSE(s->model().is_eos(7, {2}));
}

}  // namespace
}  // namespace sy
