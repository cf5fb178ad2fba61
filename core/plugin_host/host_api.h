// The host side of the plugin ABI: the sy_host_api function table, the C
// handles it hands out (sy_graph, sy_options, sy_kernel_context), and the
// bookkeeping every call into a plugin goes through.
#pragma once
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/thread_pool.h"
#include "passes/pass_env.h"
#include "graph/graph.h"
#include "kernels/kernel.h"
#include "plugin_host/options.h"
#include "switchyard/plugin.h"

namespace sy {
class KernelRegistry;

}  // namespace sy

// The C handles are defined here, outside any namespace, to complete the
// opaque types plugin.h declares.
struct sy_graph {
  sy::Graph* graph;
  sy::PassEnv* env = nullptr;  // set while a pass runs
};
struct sy_options {
  const sy::OptionValues* values;
};
struct sy_kernel_context {
  sy::KernelContext* ctx;
};

namespace sy {
class DeviceBackend;

// What every call from the host into a plugin runs with: the calling
// session's thread pool (parallel_for) and device (device_alloc, device_free,
// device_stream). Each call carries its session's context for its duration
// (PluginCall), so two sessions on two devices in one process each reach
// their own device, whichever was opened last. Owned by the session.
struct HostContext {
  ThreadPool* threads = nullptr;
  std::shared_ptr<DeviceBackend> device;  // null: CPU only
};

const sy_host_api* host_api();

// Context of one call from the host into a plugin: names the plugin for
// log lines and error messages, provides the session's HostContext to the
// host functions the plugin calls back, and clears the per-thread error
// message the plugin may set. A null context keeps the enclosing call's.
class PluginCall {
 public:
  PluginCall(const std::string& plugin, const HostContext* host);
  ~PluginCall();
  PluginCall(const PluginCall&) = delete;
  PluginCall& operator=(const PluginCall&) = delete;
  // Throws sy::Error "plugin 'name': <what>: <message>" when status != SY_OK.
  void check(sy_status status, const std::string& what) const;

 private:
  std::string plugin_;
  const std::string* prev_plugin_;
  const HostContext* prev_host_;
};

// Throws sy::Error "plugin 'name': <what> failed (status N): <message>"
// when status != SY_OK, of the kind the status names (PluginFailure for
// SY_ERROR and unknown codes), with the message the plugin set.
void check_plugin_status(const std::string& plugin, sy_status status, const std::string& what);

// The message a plugin set with host->set_error on this thread.
std::string take_plugin_error();

// Every call from the host into a plugin goes through one of these two:
// they set up the PluginCall (plugin name, thread pool, error slot) and turn
// a C++ exception that escaped the plugin (an ABI violation) into an error
// of kind PluginFailure naming the plugin and the call.
//   call_plugin: a status other than SY_OK throws (see PluginCall::check).
//   call_plugin_status: returns the status for the caller to interpret
//     (SY_OUT_OF_MEMORY from a cache manager is an answer, not a failure);
//     the plugin's message stays readable with take_plugin_error().
template <typename F>
sy_status call_plugin_status(const std::string& plugin, const HostContext* host, const std::string& what, F&& f) {
  PluginCall call(plugin, host);
  try {
    return f();
  } catch (const std::exception& e) {
    SY_THROW_KIND(ErrorKind::PluginFailure,
                  "plugin '" << plugin << "': " << what << " threw a C++ exception across the ABI: " << e.what());
  } catch (...) {
    SY_THROW_KIND(ErrorKind::PluginFailure, "plugin '" << plugin << "': " << what << " threw across the ABI");
  }
}
template <typename F>
void call_plugin(const std::string& plugin, const HostContext* host, const std::string& what, F&& f) {
  PluginCall call(plugin, host);
  sy_status s;
  try {
    s = f();
  } catch (const std::exception& e) {
    SY_THROW_KIND(ErrorKind::PluginFailure,
                  "plugin '" << plugin << "': " << what << " threw a C++ exception across the ABI: " << e.what());
  } catch (...) {
    SY_THROW_KIND(ErrorKind::PluginFailure, "plugin '" << plugin << "': " << what << " threw across the ABI");
  }
  call.check(s, what);
}
// For destroy functions, which return nothing and must not throw: an
// exception that escapes one is swallowed (there is nothing left to tell).
template <typename F>
void call_plugin_noexcept(const std::string& plugin, const HostContext* host, F&& f) noexcept {
  try {
    PluginCall call(plugin, host);
    f();
  } catch (...) {
  }
}

}  // namespace sy
