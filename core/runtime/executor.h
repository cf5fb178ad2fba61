// Plans a graph once (topological order, one kernel instance per node,
// the step after which each value is dead) and runs it many times. Shapes
// are resolved at run time from the actual inputs.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "device/device_backend.h"
#include "graph/graph.h"
#include "kernels/registry.h"
#include "runtime/transfer_plan.h"

namespace sy {

struct ExecutorOptions {
  // CPU: every node on the CPU. CUDA: every node that has a fitting CUDA
  // kernel runs on `backend`, the rest on the CPU, with copies where the
  // device changes (runtime/transfer_plan.h).
  Device device = Device::CPU;
  std::shared_ptr<DeviceBackend> backend;
  std::set<std::string> forbidden_providers;
  std::map<std::string, std::string> pinned_providers;  // op type -> provider
};

struct NodePlacement {
  std::string node;
  std::string op;       // "Domain::Op" or "Op"
  std::string provider;
  Device device = Device::CPU;
  uint32_t capabilities = 0;  // the chosen kernel's (KernelDef::capabilities)
};

class Executor {
 public:
  // Throws listing every node for which no kernel fits, all at once.
  Executor(std::shared_ptr<const Graph> graph, const KernelRegistry& registry, ThreadPool* threads,
           ExecutorOptions options = {});
  ~Executor();

  // Inputs in graph-input order; returns outputs in graph-output order.
  // Inputs that no node reads (e.g. past KV after attention fusion) may be
  // left undefined. `step` is the engine's sy_step_context in ragged mode.
  // Thread-safe (runs are serialised).
  std::vector<Tensor> run(std::span<const Tensor> inputs, const void* step = nullptr);
  bool input_used(size_t i) const { return input_used_[i]; }

  const Graph& graph() const { return *graph_; }
  int input_index(const std::string& name) const;   // -1 if absent
  int output_index(const std::string& name) const;  // -1 if absent
  const std::vector<NodePlacement>& placements() const { return placements_; }
  const TransferPlan& transfer_plan() const { return plan_; }
  DeviceBackend* backend() const { return backend_.get(); }

 private:
  struct Step {
    NodeId node;
    Device device = Device::CPU;
    std::unique_ptr<Kernel> kernel;
    std::vector<const Tensor*> inputs;  // into slots_ (null for omitted inputs)
    std::vector<ValueId> outputs;
  };
  void copy(const Transfer& t);
  void check_input(size_t i, const Tensor& t) const;

  std::shared_ptr<const Graph> graph_;
  ThreadPool* threads_;
  std::shared_ptr<BufferPool> pool_;
  std::shared_ptr<DeviceBackend> backend_;
  TransferPlan plan_;
  std::vector<Tensor> slots_;  // value ids first, then mirrors (copies on another device)
  std::vector<Step> steps_;
  std::vector<NodePlacement> placements_;
  std::vector<Tensor> scratch_outputs_;
  std::vector<bool> input_used_;
  std::mutex run_mu_;
};

}  // namespace sy
