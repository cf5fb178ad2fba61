// Engine configurations with the first-party attention and cache plugins.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "engine/session.h"
#include "test_support.h"

namespace sy::test {

// `cache` empty: baseline mode (no fusion). Options as "key=value".
inline EngineConfig paged_config(const std::string& model_stem, const std::string& cache,
                                 const std::map<std::string, std::string>& cache_options = {},
                                 const std::map<std::string, std::string>& pass_options = {}) {
  EngineConfig c;
  c.model = model_path(model_stem + ".onnx");
  c.threads = 2;
  c.plugins = {PluginSpec{SY_ATTENTION_PLUGIN, std::nullopt, "test"}, PluginSpec{SY_CACHE_PLUGIN, std::nullopt, "test"}};
#ifdef SY_SCHEDULER_PLUGIN
  c.plugins.push_back(PluginSpec{SY_SCHEDULER_PLUGIN, std::nullopt, "test"});
#endif
#ifdef SY_SPECULATIVE_PLUGIN
  c.plugins.push_back(PluginSpec{SY_SPECULATIVE_PLUGIN, std::nullopt, "test"});
#endif
  if (cache.empty()) return c;
  ComponentSelection pass{"attention-fusion", {}, "test: passes[0]"};
  for (const auto& [k, v] : pass_options) pass.options[k] = RawOption{v, "test: pass option " + k};
  c.passes.push_back(pass);
  ComponentSelection cs{cache, {}, "test: cache"};
  for (const auto& [k, v] : cache_options) cs.options[k] = RawOption{v, "test: cache option " + k};
  c.cache = cs;
  return c;
}

}  // namespace sy::test

namespace sy::test {
inline void set_scheduler(EngineConfig& c, const std::string& name, const std::map<std::string, std::string>& options = {}) {
  ComponentSelection s{name, {}, "test: scheduler"};
  for (const auto& [k, v] : options) s.options[k] = RawOption{v, "test: scheduler option " + k};
  c.scheduler = s;
}
}  // namespace sy::test

namespace sy::test {
// draft_length "fixed" by default: tests of verification want every decode
// step drafted; the speculation policy ("adaptive") has tests of its own.
inline void set_drafter(EngineConfig& c, const std::string& name, const std::map<std::string, std::string>& options = {},
                        const std::string& draft_length = "fixed") {
  ComponentSelection s{name, {}, "test: drafter"};
  s.draft_length = draft_length;
  for (const auto& [k, v] : options) s.options[k] = RawOption{v, "test: drafter option " + k};
  c.drafter = s;
}
}  // namespace sy::test
