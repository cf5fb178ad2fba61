// The host side of the plugin ABI: the sy_host_api function table, the C
// handles it hands out (sy_graph, sy_options, sy_kernel_context), and the
// bookkeeping every call into a plugin goes through.
#pragma once
#include <string>

#include "base/thread_pool.h"
#include "graph/graph.h"
#include "kernels/kernel.h"
#include "plugin_host/options.h"
#include "switchyard/plugin.h"

// The C handles are defined here, outside any namespace, to complete the
// opaque types plugin.h declares.
struct sy_graph {
  sy::Graph* graph;
};
struct sy_options {
  const sy::OptionValues* values;
};
struct sy_kernel_context {
  sy::KernelContext* ctx;
};

namespace sy {

const sy_host_api* host_api();

// Context of one call from the host into a plugin: names the plugin for
// log lines and error messages, provides the thread pool for parallel_for,
// and clears the per-thread error message the plugin may set.
class PluginCall {
 public:
  PluginCall(const std::string& plugin, ThreadPool* threads);
  ~PluginCall();
  PluginCall(const PluginCall&) = delete;
  PluginCall& operator=(const PluginCall&) = delete;
  // Throws sy::Error "plugin 'name': <what>: <message>" when status != SY_OK.
  void check(sy_status status, const std::string& what) const;

 private:
  std::string plugin_;
  const std::string* prev_plugin_;
  ThreadPool* prev_threads_;
};

// The message a plugin set with host->set_error on this thread.
std::string take_plugin_error();

}  // namespace sy
