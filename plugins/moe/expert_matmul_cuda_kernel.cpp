// ExpertMatMul's CUDA kernel object: checks the operands, uploads the
// expert stack once, launches expert_matmul_cuda.cu.
#include <cuda_runtime_api.h>

#include "expert_matmul_cuda.h"
#include "expert_rows.h"
#include "moe_plugin.h"

namespace sy_moe {

using sy::plugin::Error;

ExpertMatMulCudaKernel::ExpertMatMulCudaKernel(const sy::plugin::NodeRef& n)
    : name_("ExpertMatMul '" + n.graph.name(n.node) + "'"), columns_(n.graph.attr_int(n.node, "columns").value_or(0) != 0) {
  auto w = n.graph.constant(n.graph.input(n.node, 2));
  if (!w || w->dtype() != SY_DTYPE_FLOAT32 || w->rank() != 3)
    throw Error(name_ + " on CUDA needs a constant float32 [E, A, B] weight", SY_UNSUPPORTED);
  E_ = w->dim(0);
  K_ = columns_ ? w->dim(2) : w->dim(1);
  N_ = columns_ ? w->dim(1) : w->dim(2);
  weight_ = sy::plugin::DeviceBuffer(SY_DEVICE_CUDA, static_cast<size_t>(w->numel()) * sizeof(float));
  auto stream = static_cast<cudaStream_t>(sy::plugin::device_stream(SY_DEVICE_CUDA));
  if (cudaMemcpyAsync(weight_.get(), w->data<float>(), weight_.bytes(), cudaMemcpyHostToDevice, stream) != cudaSuccess ||
      cudaStreamSynchronize(stream) != cudaSuccess)
    throw Error(name_ + ": uploading the expert weights failed", SY_INVALID_ARGUMENT);
}

void ExpertMatMulCudaKernel::compute(sy::plugin::KernelIO& io) {
  auto x = io.input(0), idx = io.input(1);
  if (x.raw.device != SY_DEVICE_CUDA || idx.raw.device != SY_DEVICE_CUDA)
    throw Error(name_ + " on CUDA: x and the expert indices must be CUDA tensors", SY_INVALID_ARGUMENT);
  if (idx.dtype() != SY_DTYPE_INT64 && idx.dtype() != SY_DTYPE_INT32)
    throw Error(name_ + ": expert indices must be int64 or int32", SY_INVALID_ARGUMENT);
  const ExpertLayout l = expert_layout(x, idx.numel(), K_, N_, columns_, name_);
  auto y = io.allocate_output(0, SY_DTYPE_FLOAT32, l.out_dims);
  if (const char* err = cuda_expert_matmul(x.data<float>(), idx.raw.data, idx.dtype() == SY_DTYPE_INT64 ? 8 : 4, weight_.as<float>(), E_,
                                           l.entries, l.P, K_, N_, columns_, y.data<float>(), sy::plugin::device_stream(SY_DEVICE_CUDA)))
    throw Error(name_ + ": " + err, SY_INVALID_ARGUMENT);
}

}  // namespace sy_moe
