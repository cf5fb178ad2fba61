// The kernel contract inside the core. Built-in kernels implement it directly;
// plugin kernels (C ABI) are wrapped into it by the plugin host, so the
// executor sees one kind of kernel and one registry.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/device.h"
#include "base/tensor.h"
#include "base/thread_pool.h"
#include "graph/graph.h"

namespace sy {

class DeviceBackend;


// What compute() gets for one node execution. Missing optional inputs are
// null. Outputs are filled by the kernel (allocate() or a view of an input).
struct KernelContext {
  const Tensor* const* inputs = nullptr;
  int num_inputs = 0;
  Tensor* outputs = nullptr;
  int num_outputs = 0;
  BufferPool* pool = nullptr;
  ThreadPool* threads = nullptr;
  // The engine's per-step batch layout (a sy_step_context from plugin.h) in
  // ragged mode; null in baseline mode.
  const void* step = nullptr;
  // Where this node runs. Device kernels allocate their outputs on `backend`
  // (allocate_output does) and order their work on backend->stream().
  // Constant inputs are always host tensors (see runtime/transfer_plan.h).
  Device device = Device::CPU;
  DeviceBackend* backend = nullptr;

  const Tensor& input(int i) const;
  bool has_input(int i) const { return i < num_inputs && inputs[i] && inputs[i]->defined(); }
  Tensor& allocate_output(int i, DType dtype, const Shape& shape);
  void set_output(int i, Tensor t);
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  // Throws sy::Error with a message naming the problem; the executor adds the
  // node's name and op type.
  virtual void compute(KernelContext& ctx) = 0;
};

// Everything a kernel factory may inspect when it is instantiated for a node
// (attributes, the opset the node was exported under, constant inputs).
struct KernelCreateInfo {
  const Graph& graph;
  const Node& node;
  int64_t opset;
  // The device backend the kernel will run on (null for CPU kernels): device
  // kernels upload and convert their constant inputs here, once.
  DeviceBackend* backend = nullptr;
  const Tensor* constant_input(int i) const;  // null unless input i is a constant
};

using KernelFactory = std::function<std::unique_ptr<Kernel>(const KernelCreateInfo&)>;

struct KernelDef {
  std::string domain;  // "" = ONNX default domain
  std::string op_type;
  Device device = Device::CPU;
  std::vector<DType> dtypes;  // accepted types of input `type_input`; empty = any
  int type_input = 0;
  int priority = 0;  // higher wins; built-ins use 0
  std::string provider = "builtin";
  KernelFactory create;
  // Optional: whether this kernel handles this particular node (a device
  // kernel may take only some shapes or attribute values). The executor
  // falls back to the next candidate, and at last to the CPU, when it says no.
  std::function<bool(const Graph&, const Node&)> supports;
  // Inputs this kernel reads on the host whatever its device (shape and axes
  // operands, like ONNX Runtime's CPU-input memory type), and inputs it reads
  // only the shape of (never copied between devices for that).
  std::vector<int> host_inputs;
  std::vector<int> shape_inputs;
  // A device kernel that is worth running only where input 0 already is
  // (a view): the executor places the node on the CPU when input 0 lives there.
  bool follows_input = false;
  // What a plugin kernel declares it handles beyond its op's 1.0 contract
  // (SY_KERNEL_CAP_* of plugin.h: token trees in a PagedAttention kernel).
  uint32_t capabilities = 0;
};

}  // namespace sy
