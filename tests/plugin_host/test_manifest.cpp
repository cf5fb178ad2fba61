// The manifest: profiles, relative paths, environment variables, and errors
// that name the file, the line and the key.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "engine/session.h"
#include "manifest/manifest.h"
#include "test_support.h"

namespace sy {
namespace {

using test::error_of;

TEST(Manifest, ProfilesOverrideKeysAndPathsAreRelative) {
  Manifest m = Manifest::parse(
      "# a comment people keep\n"
      "model: models/a.onnx\n"
      "threads: 2\n"
      "passes: [cse]\n"
      "profiles:\n"
      "  fast:\n"
      "    model: /abs/b.onnx\n"
      "    passes:\n"
      "      - name: test-noop\n"
      "        options: {verbose: true}\n"
      "  empty:\n",
      "/etc/sy/m.yaml");
  EngineConfig top = m.resolve("");
  EXPECT_EQ(top.model, "/etc/sy/models/a.onnx");
  EXPECT_EQ(top.threads, 2);
  ASSERT_EQ(top.passes.size(), 1u);
  EXPECT_EQ(top.passes[0].name, "cse");
  EngineConfig fast = m.resolve("fast");
  EXPECT_EQ(fast.model, "/abs/b.onnx");
  EXPECT_EQ(fast.threads, 2);  // inherited
  ASSERT_EQ(fast.passes.size(), 1u);
  EXPECT_EQ(fast.passes[0].options.at("verbose").text, "true");
  EXPECT_EQ(fast.passes[0].options.at("verbose").where, "/etc/sy/m.yaml:10: profiles.fast.passes[0].options.verbose");
  EXPECT_EQ(m.resolve("empty").passes.size(), 1u);
  EXPECT_HAS(error_of([&] { m.resolve("slow"); }), "no profile 'slow'; profiles: fast empty");
}

TEST(Manifest, EnvironmentVariablesExpand) {
  ::setenv("SY_TEST_DIR", "/opt/models", 1);
  ::unsetenv("SY_TEST_UNSET");
  Manifest m = Manifest::parse("model: ${SY_TEST_DIR}/x.onnx\ntokenizer: ${SY_TEST_UNSET:-/default}/t.bin\n", "m.yaml");
  EXPECT_EQ(m.resolve("").model, "/opt/models/x.onnx");
  EXPECT_EQ(m.resolve("").tokenizer, "/default/t.bin");
  std::string msg = error_of([] { Manifest::parse("model: a.onnx\nplugins:\n  - ${SY_TEST_UNSET}/p.so\n", "m.yaml"); });
  EXPECT_HAS(msg, "m.yaml:3: plugins[0]: environment variable 'SY_TEST_UNSET' is not set");
}

TEST(Manifest, ErrorsNameFileLineAndKey) {
  EXPECT_HAS(error_of([] { Manifest::parse("model: a.onnx\nschedular: fcfs\n", "m.yaml"); }),
             "m.yaml:2: schedular: unknown key; allowed keys:");
  EXPECT_HAS(error_of([] { Manifest::parse("model: a.onnx\nthreads: many\n", "m.yaml"); }),
             "m.yaml:2: threads: expected an integer, got 'many'");
  EXPECT_HAS(error_of([] { Manifest::parse("model: [a\n", "m.yaml"); }), "m.yaml:2:1: YAML syntax error");
  EXPECT_HAS(error_of([] { Manifest::parse("model: a.onnx\nplugins:\n  - path: p.so\n    sha256: abc\n", "m.yaml"); }),
             "m.yaml:4: plugins[0].sha256: expected 64 hex digits");
  EXPECT_HAS(error_of([] { Manifest::parse("model: a\nprofiles:\n  x:\n    cache: {nam: paged}\n", "m.yaml"); }),
             "m.yaml:4: profiles.x.cache.nam: unknown key");
  EXPECT_HAS(error_of([] { Manifest::load("/nonexistent/m.yaml"); }), "/nonexistent/m.yaml: cannot open the manifest");
  EXPECT_HAS(error_of([] { Manifest::load("/dev/zero"); }), "/dev/zero: cannot open the manifest (not a regular file)");
  EXPECT_HAS(error_of([] { Manifest::parse("model: a\nthreads: {x: 1}\n", "m.yaml"); }), "m.yaml:2: threads: expected a value");
  EXPECT_HAS(error_of([] { Manifest::parse("[1, 2]", "m.yaml"); }), "must be a YAML map");
}

TEST(Manifest, OptionErrorsPointAtTheManifestLine) {
  test::TempDir dir;
  auto write = [&](const std::string& body, bool with_plugin = true) {
    std::ofstream(dir.path / "m.yaml") << "model: " << test::model_path("stories260K.onnx") << "\n"
                                       << (with_plugin ? "plugins: [" + std::string(SY_TEST_PLUGIN_GOOD) + "]\n" : "\n")
                                       << body;
    return Manifest::load((dir.path / "m.yaml").string()).resolve("");
  };
  std::string msg = error_of([&] { Session::create(write("passes:\n  - name: test-noop\n    options: {verbose: maybe}\n")); });
  EXPECT_HAS(msg, "m.yaml:5: passes[0].options.verbose: expected bool, got 'maybe'");
  msg = error_of([&] { Session::create(write("passes:\n  - name: test-noop\n    options: {loud: true}\n")); });
  EXPECT_HAS(msg, "unknown option 'loud' for pass 'test-noop'");
  EXPECT_HAS(msg, "its options are: verbose (bool)");
  msg = error_of([&] { Session::create(write("kernels: {forbid: [nobody]}\n")); });
  EXPECT_HAS(msg, "kernels.forbid: unknown kernel provider 'nobody'; known providers: builtin test-kernels");
  msg = error_of([&] { Session::create(write("plugins:\n  - path: /nonexistent/x.so\n", false)); });
  EXPECT_HAS(msg, "m.yaml:4: plugins[0]: plugin /nonexistent/x.so: no such file");
  msg = error_of([&] { write("plugins: []\n"); });
  EXPECT_HAS(msg, "m.yaml:3: plugins: duplicate key");
}

}  // namespace
}  // namespace sy
