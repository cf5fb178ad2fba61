// Named components a manifest can select (passes, schedulers, KV-cache
// managers, drafters), from plugins or built in, and the host-side wrappers
// that call a plugin's C functions with its errors turned into sy::Error.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "passes/pass.h"
#include "plugin_host/options.h"
#include "plugin_host/plugin_library.h"

namespace sy {

enum class ComponentKind { Pass, Scheduler, Cache, Drafter };
const char* component_kind_name(ComponentKind k);  // "pass", "scheduler", "cache manager", "drafter"

struct ComponentEntry {
  ComponentKind kind = ComponentKind::Pass;
  std::string name, version, description;
  std::string provider = "builtin";  // plugin name or "builtin"
  std::vector<OptionSchema> options;
  std::shared_ptr<PluginLibrary> library;  // null for built-ins
  const void* desc = nullptr;              // the plugin's sy_*_desc
  // Built-in passes only.
  std::function<std::unique_ptr<GraphPass>(const OptionValues&)> builtin_pass;
  std::string label() const;  // "pass 'x' 1.0 (plugin y 2.0)"
};

class ComponentRegistry {
 public:
  // Refuses a second component of the same kind and name, naming both providers.
  void add(ComponentEntry e);
  // Throws "<where>: unknown <kind> 'x'; known <kind>s: a (provider), ..." for unknown names.
  const ComponentEntry& get(ComponentKind kind, const std::string& name, const std::string& where) const;
  std::vector<const ComponentEntry*> list(ComponentKind kind) const;
  void remove_provider(const std::string& provider);

  // A registry with the built-in simplification passes.
  static ComponentRegistry with_builtins();

 private:
  std::map<std::pair<ComponentKind, std::string>, ComponentEntry> entries_;
};

// An instance of a pass component with its options.
std::unique_ptr<GraphPass> instantiate_pass(const ComponentEntry& e, const OptionValues& options, ThreadPool* threads);

// Host-side handles for the other plugin kinds: each owns its plugin state
// and keeps the library loaded.
class PluginScheduler {
 public:
  PluginScheduler(const ComponentEntry& e, const OptionValues& options, ThreadPool* threads);
  ~PluginScheduler();
  std::vector<sy_sched_decision> plan(const sy_sched_input& input);

 private:
  std::shared_ptr<PluginLibrary> lib_;
  const sy_scheduler_desc* d_;
  OptionValues options_;
  void* state_ = nullptr;
  ThreadPool* threads_;
};

class PluginCacheManager {
 public:
  PluginCacheManager(const ComponentEntry& e, const sy_cache_config& config, const OptionValues& options, ThreadPool* threads);
  ~PluginCacheManager();
  // false when the cache is full (SY_OUT_OF_MEMORY); other errors throw.
  bool allocate(uint64_t seq, int32_t num_tokens);
  // What the cache manager said when it last refused an allocation ("" if nothing).
  const std::string& last_refusal() const { return last_refusal_; }
  int32_t match_prefix(uint64_t seq, const std::vector<int32_t>& tokens);
  void commit(uint64_t seq, const int32_t* tokens, int32_t count);
  void truncate(uint64_t seq, int32_t length);
  void fork(uint64_t parent, uint64_t child);
  void release(uint64_t seq);
  std::vector<int32_t> block_table(uint64_t seq);
  std::pair<sy_tensor, sy_tensor> storage(int32_t layer);
  sy_cache_stats stats();

 private:
  std::shared_ptr<PluginLibrary> lib_;
  const sy_cache_desc* d_;
  OptionValues options_;
  void* state_ = nullptr;
  ThreadPool* threads_;
  std::string last_refusal_;
};

class PluginDrafter {
 public:
  PluginDrafter(const ComponentEntry& e, const OptionValues& options, ThreadPool* threads);
  ~PluginDrafter();
  std::vector<int32_t> propose(uint64_t seq, const std::vector<int32_t>& tokens, int32_t k);
  void accepted(uint64_t seq, int32_t proposed, int32_t accepted);
  void release(uint64_t seq);

 private:
  std::shared_ptr<PluginLibrary> lib_;
  const sy_drafter_desc* d_;
  OptionValues options_;
  void* state_ = nullptr;
  ThreadPool* threads_;
};

}  // namespace sy
