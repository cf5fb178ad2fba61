// Kernels keyed by (domain, op type, device, dtype), chosen by priority.
// Built-in kernels and plugin kernels register here alike.
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include "kernels/kernel.h"

namespace sy {

class KernelRegistry {
 public:
  void add(KernelDef def);

  // Best kernel for the node on `device` whose dtype constraint accepts
  // `dtype` (Undefined = type unknown until run time: any candidate fits).
  // Providers in `forbidden` are skipped; when `pinned` is non-empty only
  // that provider is eligible. Null if nothing fits.
  const KernelDef* find(const std::string& domain, const std::string& op_type, Device device, DType dtype,
                        const std::set<std::string>& forbidden = {}, const std::string& pinned = {}) const;
  // The kernel for a graph node: the dtype key is the type of the input the
  // kernels of that op dispatch on. `key` (optional) receives that type.
  const KernelDef* find_for_node(const Graph& g, const Node& n, Device device, const std::set<std::string>& forbidden = {},
                                 const std::string& pinned = {}, DType* key = nullptr) const;
  std::vector<const KernelDef*> all() const;
  const KernelDef* find_if(const std::string& domain, const std::string& op_type, Device device, DType dtype,
                           const std::set<std::string>& forbidden, const std::string& pinned,
                           const std::function<bool(const KernelDef&)>& accept) const;
  void remove_provider(const std::string& provider);

  // The registry with every built-in CPU kernel.
  static KernelRegistry with_builtins();

 private:
  std::map<std::pair<std::string, std::string>, std::vector<KernelDef>> defs_;
};

// Each built-in kernel file contributes one of these (explicit calls, not
// static initialisers: registration that silently does not run is a bug
// class we refuse to have).
void register_elementwise_kernels(KernelRegistry& r);
void register_matmul_kernels(KernelRegistry& r);
void register_shape_kernels(KernelRegistry& r);
void register_tensor_kernels(KernelRegistry& r);
void register_reduce_kernels(KernelRegistry& r);
void register_norm_kernels(KernelRegistry& r);
void register_index_kernels(KernelRegistry& r);
void register_attention_kernels(KernelRegistry& r);  // opset 23 Attention, RotaryEmbedding
void register_select_kernels(KernelRegistry& r);     // TopK, OneHot
// The core's kernels for `device` (views, cuBLAS MatMul/Gemm, pointwise and
// layout ops), added by a session that runs there: CPU sessions never see them.
void register_device_kernels(KernelRegistry& r, Device device);
// Reshape/Squeeze/Unsqueeze/Flatten/Identity on a device: views that never
// touch the bytes, so a device tensor keeps its place through them.
void register_device_view_kernels(KernelRegistry& r, Device device);
#ifdef SWITCHYARD_HAS_CUDA
void register_cuda_kernels(KernelRegistry& r);            // kernels/cuda: cuBLAS MatMul/Gemm
void register_cuda_pointwise_kernels(KernelRegistry& r);  // kernels/cuda: pointwise and layout ops
#endif

}  // namespace sy
