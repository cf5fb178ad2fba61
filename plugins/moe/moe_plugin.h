// switchyard-moe: the experts of a mixture-of-experts block read once per
// step, only the selected ones.
//
// Exporters write a block's experts as a gather of the stacked expert
// weights by each token's chosen indices, then a batched MatMul
// (transformers' batched experts: every (token, choice) pair copies its
// expert's whole matrix out of the stack before multiplying). The pass
// `fuse-experts` replaces each such pair with
//
//   switchyard::ExpertMatMul(x, experts, weight) {columns}
//     columns = 0: weight [E, K, N]; y[m] = x[m] @ weight[experts[m]],
//                  x [..., P, K] -> y [..., P, N]   (gpt-oss, Qwen3-MoE style)
//     columns = 1: weight [E, N, K]; y[m] = weight[experts[m]] @ x[m],
//                  x [..., K, P] -> y [..., N, P]   (Mixtral, DeepSeek-V3 style)
//   experts: int64/int32 with one index per leading entry of x (Gather's
//   [M] or GatherND's [M, 1]); negative indices count from the end.
//
// Its kernel groups the step's entries by expert across all sequences and
// runs one product per selected expert: at decode a token reads its k
// experts' weights once, not a copy of them and then the copy. The routing
// (softmax or sigmoid scores, TopK, group limits, bias corrections, weight
// normalisation) differs by family and stays as exported; it touches E
// values per token. The quantize pass turns ExpertMatMul into
// ExpertMatMulNBits (int8/int4 experts, quantize plugin).
//
// A gathered expert stack the pass cannot take (its weight not a constant
// float32 [E, A, B], the gathered copy read by another node, a Gather on
// another axis, operands whose ranks are unknown or differ) stays as
// exported, and the pass says which and why.
#pragma once
#include <switchyard/plugin.hpp>

#include <string>
#include <vector>

#include "expert_rows.h"

namespace sy_moe {

constexpr const char* kDomain = SY_OP_DOMAIN;
constexpr const char* kOp = "ExpertMatMul";

struct ExpertFusionPass {
  static bool run(sy::plugin::GraphRef& g, const sy::plugin::Options& options);
};

// One gathered-expert MatMul found in a graph, or why it was left alone.
struct ExpertMatch {
  sy_node_id matmul = -1, gather = -1;
  sy_value_id x = SY_NO_VALUE, experts = SY_NO_VALUE, weight = SY_NO_VALUE;
  bool columns = false;
  std::string refusal;  // empty when the pair can be fused
};
// The MatMuls of g that read a gather of a stacked (rank-3) constant.
std::vector<ExpertMatch> find_expert_matmuls(const sy::plugin::GraphReader& g);

class ExpertMatMulKernel {
 public:
  explicit ExpertMatMulKernel(const sy::plugin::NodeRef& node);
  void compute(sy::plugin::KernelIO& io);

 private:
  std::string name_;
  bool columns_;
  std::vector<float> scratch_;  // the grouped rows of x, then of y
  ExpertRows rows_;
};

#ifdef SWITCHYARD_HAS_CUDA
// The same op on CUDA (expert_matmul_cuda.cu): the stack uploaded once.
class ExpertMatMulCudaKernel {
 public:
  explicit ExpertMatMulCudaKernel(const sy::plugin::NodeRef& node);
  void compute(sy::plugin::KernelIO& io);

 private:
  std::string name_;
  bool columns_;
  int64_t E_ = 0, K_ = 0, N_ = 0;
  sy::plugin::DeviceBuffer weight_;
};
#endif

}  // namespace sy_moe
