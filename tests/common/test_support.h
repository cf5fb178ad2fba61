// Paths and small helpers shared by the tests.
#pragma once
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <gtest/gtest.h>

#include "engine/request.h"

// The message contains the needle (printed in full when it does not).
#define EXPECT_HAS(haystack, needle) EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

namespace sy::test {

inline std::string shared_dir() {
  if (const char* e = std::getenv("SWITCHYARD_SHARED_DIR")) return e;
  return SWITCHYARD_SHARED_DIR;
}
inline std::string model_path(const std::string& file) { return shared_dir() + "/models/" + file; }
// The repository (manifests, examples); overridable for test binaries run from a bundle elsewhere.
inline std::string source_dir() {
  if (const char* e = std::getenv("SWITCHYARD_SOURCE_DIR")) return e;
  return SWITCHYARD_SOURCE_DIR;
}

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  return nlohmann::json::parse(in);
}

// A fresh directory under the system temp dir, removed at scope exit.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           ("switchyard-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  static int& counter() {
    static int c = 0;
    return c;
  }
};

// Runs f, expects sy::Error (or any exception deriving from
// std::exception), and returns its message; a test failure when none is thrown.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error was raised";
  return {};
}

// Runs a shell command (the CLI, a Python reference): its exit status and its
// output, stderr merged unless the caller parses stdout alone.
struct ShellResult {
  int status;
  std::string out;
};
inline ShellResult shell(const std::string& cmd, bool merge_stderr = true) {
  FILE* p = popen((merge_stderr ? cmd + " 2>&1" : cmd).c_str(), "r");
  if (!p) return {-1, "popen failed: " + cmd};
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

// A greedy request (the sampler's default) that runs all max_tokens.
inline GenerationRequest greedy(std::vector<int> prompt, int max_tokens) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.stop_at_eos = false;
  return r;
}

}  // namespace sy::test

#include <unistd.h>
