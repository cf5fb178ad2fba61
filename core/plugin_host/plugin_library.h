// One loaded plugin library: opened with Boost.DLL (RTLD_NOW | RTLD_LOCAL, so
// two plugins' symbols never meet), checked (sha256, ABI version, every
// descriptor), and kept alive by whoever holds a component from it. The last
// holder calls the plugin's shutdown and closes the library (one that links
// the CUDA runtime stays mapped: see pin_if_it_links_the_cuda_runtime).
#pragma once
#include <boost/dll/shared_library.hpp>
#include <memory>
#include <optional>
#include <string>

#include "switchyard/plugin.h"

namespace sy {

class PluginLibrary {
 public:
  // Throws sy::Error naming the path and the problem: missing file, sha256
  // mismatch, dlopen failure (with the loader's message), no entry point,
  // ABI major mismatch (both versions named), malformed descriptors, an
  // exception or error from the plugin's init.
  static std::shared_ptr<PluginLibrary> load(const std::string& path, const std::optional<std::string>& sha256);
  ~PluginLibrary();
  PluginLibrary(const PluginLibrary&) = delete;
  PluginLibrary& operator=(const PluginLibrary&) = delete;

  const std::string& path() const { return path_; }
  const std::string& name() const { return name_; }
  const std::string& version() const { return version_; }
  const std::string& description() const { return description_; }
  uint16_t abi_major() const { return abi_major_; }
  uint16_t abi_minor() const { return abi_minor_; }
  const std::string& sha256() const { return sha256_; }
  const sy_plugin_info& info() const { return *info_; }
  // 0 for a plugin built before ABI 1.4 (its description has no such list).
  int32_t num_logits_processors() const { return num_logits_processors_; }
  // True when the library links the CUDA runtime and so is never unmapped.
  bool pinned() const { return pinned_; }

 private:
  PluginLibrary() = default;
  void validate();
  static void pin_if_it_links_the_cuda_runtime(PluginLibrary& p);

  boost::dll::shared_library lib_;
  const sy_plugin_info* info_ = nullptr;
  std::string path_, name_, version_, description_, sha256_;
  uint16_t abi_major_ = 0, abi_minor_ = 0;
  int32_t num_logits_processors_ = 0;
  bool pinned_ = false;
};

// Lowercase hex SHA-256 of a file's bytes.
std::string sha256_file(const std::string& path);

}  // namespace sy
