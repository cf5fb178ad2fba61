// switchyard-quantize: weight-only int8/int4 quantization. The pass rewrites
// MatMul/Gemm nodes with constant weights (and weight-only QDQ,
// DequantizeLinear -> MatMul) into quantized matmul nodes; the kernel runs
// them, and ONNX Runtime's com.microsoft::MatMulNBits nodes, on the paths of
// qmatmul.h.
#pragma once
#include <switchyard/plugin.hpp>

#include "expert_rows.h"
#include "qmatmul.h"

namespace sy_quant {

// Emitted when the group is a power of two >= 16 (ONNX Runtime can run it too).
constexpr const char* kOrtDomain = SY_ORT_DOMAIN;
constexpr const char* kOrtOp = SY_ORT_OP_MATMUL_NBITS;
// Same inputs and attributes, any group (per-channel int8: block_size = K).
constexpr const char* kDomain = SY_OP_DOMAIN;
constexpr const char* kOp = SY_OP_QMATMUL;

struct QuantizePass {
  static bool run(sy::plugin::GraphRef& g, const sy::plugin::Options& options);
};

// Inputs: A [..., K], B codes, scales, zero_points (optional), g_idx (must be
// absent), bias [N] (optional). Attributes K, N, bits, block_size.
// The node's attributes and constant inputs, checked; `name` receives "Op 'node'" for messages.
// `first` is the codes' input index; `matrices` stacked weights of N rows
// each (ExpertMatMulNBits) come back as one weight of matrices * N rows.
QuantizedWeight read_quantized_node(const sy::plugin::NodeRef& node, std::string& name, int first = 1, int64_t matrices = 1);
// Rows [first_row, first_row + rows) of q as a weight of its own.
QuantizedWeight slice_rows(const QuantizedWeight& q, int64_t first_row, int64_t rows);

// Quantized experts, from the quantize pass on switchyard::ExpertMatMul:
//   switchyard::ExpertMatMulNBits(x, experts, codes, scales, zero_points?)
//   {K, N, bits, block_size, experts, columns}
// codes/scales/zero_points are MatMulNBits' layout over experts * N rows
// (expert e's output channels are rows e*N .. e*N+N-1, each expert's
// matrix as MatMul's B [K, N] transposed); x, experts, columns and the
// result as ExpertMatMul's (plugins/moe/moe_plugin.h).
constexpr const char* kExpertOp = "ExpertMatMulNBits";

class ExpertQMatMulKernel {
 public:
  explicit ExpertQMatMulKernel(const sy::plugin::NodeRef& node);
  void compute(sy::plugin::KernelIO& io);

 private:
  std::string name_;
  bool columns_;
  std::vector<PackedMatrix> experts_;
  Isa isa_;
  std::vector<float> scratch_;
  sy_moe::ExpertRows rows_;
};
// The optional bias input (index 5), checked against N; null when absent.
const float* read_bias(sy::plugin::KernelIO& io, int64_t N, const std::string& name);

class QMatMulKernel {
 public:
  explicit QMatMulKernel(const sy::plugin::NodeRef& node);
  void compute(sy::plugin::KernelIO& io);

 private:
  std::string name_;
  PackedMatrix w_;
  Isa isa_;
};

#ifdef SWITCHYARD_HAS_CUDA
}  // namespace sy_quant
#include "qmatmul_cuda.h"
namespace sy_quant {

// The same nodes on CUDA (qmatmul_cuda.h): the stored weight in device memory.
class QMatMulCudaKernel {
 public:
  explicit QMatMulCudaKernel(const sy::plugin::NodeRef& node);
  void compute(sy::plugin::KernelIO& io);

 private:
  std::string name_;
  sy::plugin::DeviceBuffer codes_, scales_, zero_points_, float_zero_points_, bias_;
  DeviceQWeight w_;
};
#endif

}  // namespace sy_quant
