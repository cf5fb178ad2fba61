// Graph passes. The built-in simplifications below and plugin passes (through
// the C ABI) implement the same interface and run in one pipeline.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "kernels/registry.h"

namespace sy {

struct PassEnv;

struct PassContext {
  const KernelRegistry& registry;
  ThreadPool* threads = nullptr;
  std::function<void(const std::string&)> log;  // may be empty
  PassEnv* env = nullptr;  // model facts and probe records for plugin passes (plugin_host/host_api.h)
};

class GraphPass {
 public:
  virtual ~GraphPass() = default;
  virtual std::string name() const = 0;
  // Returns true when the graph changed.
  virtual bool run(Graph& g, PassContext& ctx) = 0;
  // Whether the pass host proves this pass's rewrites with the equivalence
  // probe (plugin passes; the built-in simplifications have their own tests).
  virtual bool probed() const { return false; }
};

std::unique_ptr<GraphPass> make_constant_folding_pass();
std::unique_ptr<GraphPass> make_shape_folding_pass();    // Shape/Gather(Shape) of static dims
std::unique_ptr<GraphPass> make_cse_pass();              // duplicate constants and nodes
std::unique_ptr<GraphPass> make_identity_elimination_pass();
std::unique_ptr<GraphPass> make_dead_node_elimination_pass();
// fp16/bf16 models computed in float32 (core/passes/half_to_float.cpp).
std::unique_ptr<GraphPass> make_half_to_float_pass();
// Step engine only: LM head on the selected tokens (new input logits_indices).
std::unique_ptr<GraphPass> make_select_logits_pass();
// The output the logits-selection pass adds: the LM head's input, every token.
inline constexpr const char* kHiddenStates = "switchyard.hidden_states";

// The load-time simplification: the passes above to a fixed point, then
// compaction. Returns the number of live nodes removed.
size_t simplify_graph(Graph& g, PassContext& ctx);

}  // namespace sy
