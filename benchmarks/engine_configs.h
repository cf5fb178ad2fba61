// Engine configurations the benchmarks compare: baseline mode and fused
// attention over each cache manager (first-party plugins of this build).
#pragma once
#include <map>
#include <string>

#include "engine/session.h"

namespace sy::bench {

inline std::string shared_model(const std::string& stem) { return std::string(SWITCHYARD_SHARED_DIR) + "/models/" + stem + ".onnx"; }

inline EngineConfig mode_config(const std::string& model_path, const std::string& cache,
                                const std::map<std::string, std::string>& cache_options = {},
                                const std::map<std::string, std::string>& pass_options = {}, int threads = 2) {
  EngineConfig c;
  c.model = model_path;
  c.threads = threads;
  c.max_context = 8192;
  c.plugins = {PluginSpec{SY_ATTENTION_PLUGIN, std::nullopt, "bench"}, PluginSpec{SY_CACHE_PLUGIN, std::nullopt, "bench"}};
  if (cache.empty()) return c;
  ComponentSelection pass{"attention-fusion", {}, "bench"};
  for (const auto& [k, v] : pass_options) pass.options[k] = RawOption{v, "bench"};
  c.passes.push_back(pass);
  ComponentSelection cs{cache, {}, "bench"};
  for (const auto& [k, v] : cache_options) cs.options[k] = RawOption{v, "bench"};
  c.cache = cs;
  return c;
}

}  // namespace sy::bench
