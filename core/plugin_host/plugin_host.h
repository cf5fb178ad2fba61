// Loads plugin libraries and registers what they provide: kernels into the
// KernelRegistry the built-ins use, everything else into the
// ComponentRegistry. Unloading removes them again; a library stays mapped
// while any kernel instance or component made from it is alive.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/registry.h"
#include "plugin_host/components.h"

namespace sy {

class PluginHost {
 public:
  PluginHost(KernelRegistry& kernels, ComponentRegistry& components, const HostContext* host)
      : kernels_(kernels), components_(components), host_(host) {}
  ~PluginHost() { unload_all(); }
  PluginHost(const PluginHost&) = delete;
  PluginHost& operator=(const PluginHost&) = delete;

  // Loads and registers; on any error nothing of this plugin stays registered.
  const PluginLibrary& load(const std::string& path, const std::optional<std::string>& sha256 = std::nullopt);
  void unload(const std::string& plugin_name);
  void unload_all();
  const std::vector<std::shared_ptr<PluginLibrary>>& libraries() const { return libraries_; }

 private:
  KernelRegistry& kernels_;
  ComponentRegistry& components_;
  const HostContext* host_;
  std::vector<std::shared_ptr<PluginLibrary>> libraries_;
};

}  // namespace sy
