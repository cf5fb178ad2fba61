// The decoder interface by role, not by fixed name: the shared model with
// its inputs and outputs renamed the ways other exporters spell them (and
// reordered) runs exactly as the original in every mode; a graph whose
// token ids cannot be found is refused with the graph's inputs listed.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "engine/session.h"
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
