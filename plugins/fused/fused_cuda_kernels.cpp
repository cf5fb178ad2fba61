// CUDA kernels of the fused ops: RMSNorm's weight is uploaded once.
#include <cuda_runtime_api.h>

#include "fused_cuda.h"
#include "fused_plugin.h"

namespace sy_fused {

using sy::plugin::Error;

RMSNormCudaKernel::RMSNormCudaKernel(const sy::plugin::NodeRef& n) : cpu_(n) {
  auto w = n.graph.constant(n.graph.input(n.node, 1));
  if (!w || w->dtype() != SY_DTYPE_FLOAT32) throw Error("RMSNorm on CUDA needs a constant float32 weight", SY_UNSUPPORTED);
  cols_ = w->numel();
  weight_ = sy::plugin::DeviceBuffer(SY_DEVICE_CUDA, static_cast<size_t>(cols_) * sizeof(float));
  auto stream = static_cast<cudaStream_t>(sy::plugin::device_stream(SY_DEVICE_CUDA));
  if (cudaMemcpyAsync(weight_.get(), w->data<float>(), weight_.bytes(), cudaMemcpyHostToDevice, stream) != cudaSuccess ||
      cudaStreamSynchronize(stream) != cudaSuccess)
    throw Error("RMSNorm: uploading the weight failed", SY_INVALID_ARGUMENT);
}

void RMSNormCudaKernel::compute(sy::plugin::KernelIO& io) {
  auto x = io.input(0);
  if (x.raw.device != SY_DEVICE_CUDA || x.dtype() != SY_DTYPE_FLOAT32 || x.rank() < 1 || x.dim(x.rank() - 1) != cols_)
    throw Error("RMSNorm on CUDA: x must be a float32 CUDA tensor [..., " + std::to_string(cols_) + "]", SY_INVALID_ARGUMENT);
  auto y = io.allocate_output(0, SY_DTYPE_FLOAT32, x.dims());
  if (const char* err = cuda_rmsnorm(x.data<float>(), weight_.as<float>(), cpu_.epsilon(), cpu_.divide(), x.numel() / cols_, cols_, y.data<float>(),
                                     sy::plugin::device_stream(SY_DEVICE_CUDA)))
    throw Error(std::string("RMSNorm: ") + err, SY_INVALID_ARGUMENT);
}

SiluMulCudaKernel::SiluMulCudaKernel(const sy::plugin::NodeRef&) {}

void SiluMulCudaKernel::compute(sy::plugin::KernelIO& io) {
  auto g = io.input(0), u = io.input(1);
  if (g.raw.device != SY_DEVICE_CUDA || u.raw.device != SY_DEVICE_CUDA || g.dtype() != SY_DTYPE_FLOAT32 || g.dims() != u.dims())
    throw Error("SiluMul on CUDA: gate and up must be float32 CUDA tensors of the same shape", SY_INVALID_ARGUMENT);
  auto y = io.allocate_output(0, SY_DTYPE_FLOAT32, g.dims());
  if (const char* err = cuda_silu_mul(g.data<float>(), u.data<float>(), g.numel(), y.data<float>(), sy::plugin::device_stream(SY_DEVICE_CUDA)))
    throw Error(std::string("SiluMul: ") + err, SY_INVALID_ARGUMENT);
}

RotaryCudaKernel::RotaryCudaKernel(const sy::plugin::NodeRef& n) : cpu_(n) {}

void RotaryCudaKernel::compute(sy::plugin::KernelIO& io) {
  auto x = io.input(0), c = io.input(1), s = io.input(2);
  if (x.raw.device != SY_DEVICE_CUDA || c.raw.device != SY_DEVICE_CUDA || s.raw.device != SY_DEVICE_CUDA || x.dtype() != SY_DTYPE_FLOAT32 ||
      c.dtype() != SY_DTYPE_FLOAT32 || s.dtype() != SY_DTYPE_FLOAT32 || c.dims() != s.dims())
    throw Error("Rotary on CUDA: x, cos and sin must be float32 CUDA tensors, cos and sin of one shape", SY_INVALID_ARGUMENT);
  const RotaryBroadcast b = rotary_broadcast(x, c, cpu_.interleaved());
  auto y = io.allocate_output(0, SY_DTYPE_FLOAT32, x.dims());
  if (const char* err = cuda_rotary(x.data<float>(), c.data<float>(), s.data<float>(), b.rows, b.dim, cpu_.interleaved(),
                                    b.outer, y.data<float>(), sy::plugin::device_stream(SY_DEVICE_CUDA)))
    throw Error(std::string("Rotary: ") + err, SY_INVALID_ARGUMENT);
}

}  // namespace sy_fused
