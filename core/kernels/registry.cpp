#include "kernels/registry.h"

#include <algorithm>

#include "device/device_backend.h"

namespace sy {


const Tensor& KernelContext::input(int i) const {
  SY_CHECK(has_input(i), "required input " << i << " is missing");
  return *inputs[i];
}

// A node may declare fewer outputs than its kernel writes (a hostile or
// broken model: a Div with no output): an error, never a write past the end.
Tensor& KernelContext::allocate_output(int i, DType dtype, const Shape& shape) {
  SY_CHECK(i >= 0 && i < num_outputs, "output " << i << " does not exist: the node has " << num_outputs << " output(s)");
  outputs[i] = device == Device::CPU ? pool->allocate(dtype, shape) : backend->allocate(dtype, shape);
  return outputs[i];
}

void KernelContext::set_output(int i, Tensor t) {
  SY_CHECK(i >= 0 && i < num_outputs, "output " << i << " does not exist: the node has " << num_outputs << " output(s)");
  outputs[i] = std::move(t);
}

const Tensor* KernelCreateInfo::constant_input(int i) const {
  if (i >= static_cast<int>(node.inputs.size()) || node.inputs[static_cast<size_t>(i)] == kNoValue) return nullptr;
  const Value& v = graph.values[static_cast<size_t>(node.inputs[static_cast<size_t>(i)])];
  return v.constant ? &*v.constant : nullptr;
}

void KernelRegistry::add(KernelDef def) {
  SY_CHECK(def.create, "kernel " << def.op_type << " from '" << def.provider << "' has no factory");
  auto& list = defs_[{def.domain == "ai.onnx" ? "" : def.domain, def.op_type}];
  list.push_back(std::move(def));
  // Stable: among equal priorities the first registered wins.
  std::stable_sort(list.begin(), list.end(), [](const KernelDef& a, const KernelDef& b) { return a.priority > b.priority; });
}

const KernelDef* KernelRegistry::find(const std::string& domain, const std::string& op_type, Device device,
                                      DType dtype, const std::set<std::string>& forbidden,
                                      const std::string& pinned) const {
  return find_if(domain, op_type, device, dtype, forbidden, pinned, nullptr);
}

const KernelDef* KernelRegistry::find_if(const std::string& domain, const std::string& op_type, Device device, DType dtype,
                                         const std::set<std::string>& forbidden, const std::string& pinned,
                                         const std::function<bool(const KernelDef&)>& accept) const {
  auto it = defs_.find({domain == "ai.onnx" ? "" : domain, op_type});
  if (it == defs_.end()) return nullptr;
  for (const KernelDef& d : it->second) {
    if (d.device != device) continue;
    if (accept && !accept(d)) continue;
    if (forbidden.count(d.provider)) continue;
    if (!pinned.empty() && d.provider != pinned) continue;
    if (dtype != DType::Undefined && !d.dtypes.empty() &&
        std::find(d.dtypes.begin(), d.dtypes.end(), dtype) == d.dtypes.end())
      continue;
    return &d;
  }
  return nullptr;
}

const KernelDef* KernelRegistry::find_for_node(const Graph& g, const Node& n, Device device, const std::set<std::string>& forbidden,
                                               const std::string& pinned, DType* key) const {
  DType type = DType::Undefined;
  if (const KernelDef* any = find(n.domain, n.op_type, device, DType::Undefined)) {
    auto ti = static_cast<size_t>(any->type_input);
    if (ti < n.inputs.size() && n.inputs[ti] != kNoValue) type = g.values[static_cast<size_t>(n.inputs[ti])].dtype;
  }
  if (key) *key = type;
  return find_if(n.domain, n.op_type, device, type, forbidden, pinned,
                 [&](const KernelDef& d) { return !d.supports || d.supports(g, n); });
}

std::vector<const KernelDef*> KernelRegistry::all() const {
  std::vector<const KernelDef*> out;
  for (const auto& [key, list] : defs_)
    for (const KernelDef& d : list) out.push_back(&d);
  return out;
}

void KernelRegistry::remove_provider(const std::string& provider) {
  for (auto it = defs_.begin(); it != defs_.end();) {
    auto& list = it->second;
    list.erase(std::remove_if(list.begin(), list.end(), [&](const KernelDef& d) { return d.provider == provider; }),
               list.end());
    it = list.empty() ? defs_.erase(it) : std::next(it);
  }
}

KernelRegistry KernelRegistry::with_builtins() {
  KernelRegistry r;
  register_elementwise_kernels(r);
  register_matmul_kernels(r);
  register_shape_kernels(r);
  register_tensor_kernels(r);
  register_reduce_kernels(r);
  register_norm_kernels(r);
  register_index_kernels(r);
  register_attention_kernels(r);
  register_select_kernels(r);
  return r;
}

void register_device_kernels(KernelRegistry& r, Device device) {
  if (device == Device::CPU) return;
#ifdef SWITCHYARD_HAS_CUDA
  register_device_view_kernels(r, device);
  register_cuda_kernels(r);
  register_cuda_pointwise_kernels(r);
#else
  (void)r;
  SY_THROW("this build has no " << device_name(device) << " kernels (built without CUDA)");
#endif
}

}  // namespace sy
