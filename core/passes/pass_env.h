// What a pass run may ask of the host beyond the graph (ABI 1.1), as the
// passes layer sees it: plugin_host fills it and hands it to plugin passes
// through sy_graph; the equivalence probe reads what the pass recorded.
#pragma once
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/tensor.h"
#include "base/thread_pool.h"
#include "graph/graph.h"
#include "graph/model_io.h"

namespace sy {
class KernelRegistry;

// What a pass run may ask of the host beyond the graph itself (ABI 1.1): the
// model's roles and facts, evaluation of subgraphs, and what the pass did
// that the equivalence probe checks afterwards.
struct PassEnv {
  const KernelRegistry* registry = nullptr;
  ThreadPool* threads = nullptr;
  std::string model_path;
  const GenaiConfig* genai = nullptr;
  std::optional<ModelIO> io;  // the interface by role, when the graph has one
  std::string io_error;       // why not
  int64_t max_context = 0, vocab_size = 0;
  std::deque<Tensor> arena;   // graph_evaluate results, alive until the pass returns (stable addresses)
  std::vector<std::pair<ValueId, ValueId>> replaced;  // graph_replace_all_uses (from, to)
  std::string approximate;    // set by graph_mark_approximate
};
}  // namespace sy
