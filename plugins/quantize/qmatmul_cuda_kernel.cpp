// The CUDA kernel of the quantize plugin: the stored weight is uploaded once
// at creation (codes, scales, zero points and bias as they are) and the
// product runs on the session's stream (qmatmul_cuda.cu).
#include <cuda_runtime_api.h>

#include "qmatmul_cuda.h"
#include "quantize_plugin.h"

namespace sy_quant {

using sy::plugin::DeviceBuffer;
using sy::plugin::Error;

namespace {

void cuda_check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) throw Error(what + ": " + cudaGetErrorString(e), SY_INVALID_ARGUMENT);
}

DeviceBuffer upload(const void* src, size_t bytes, cudaStream_t stream, const std::string& what) {
  DeviceBuffer b(SY_DEVICE_CUDA, bytes);
  if (bytes) cuda_check(cudaMemcpyAsync(b.get(), src, bytes, cudaMemcpyHostToDevice, stream), what);
  return b;
}

}  // namespace

QMatMulCudaKernel::QMatMulCudaKernel(const sy::plugin::NodeRef& n) {
  QuantizedWeight q = read_quantized_node(n, name_);
  auto stream = static_cast<cudaStream_t>(sy::plugin::device_stream(SY_DEVICE_CUDA));
  codes_ = upload(q.codes.data(), q.codes.size(), stream, name_ + ": uploading codes");
  scales_ = upload(q.scales.data(), q.scales.size() * sizeof(float), stream, name_ + ": uploading scales");
  if (!q.zero_points.empty()) zero_points_ = upload(q.zero_points.data(), q.zero_points.size(), stream, name_ + ": uploading zero points");
  if (!q.float_zero_points.empty())
    float_zero_points_ = upload(q.float_zero_points.data(), q.float_zero_points.size() * sizeof(float), stream, name_ + ": uploading zero points");
  if (n.graph.input_count(n.node) > 5) {
    if (auto b = n.graph.constant(n.graph.input(n.node, 5))) {
      if (b->dtype() != SY_DTYPE_FLOAT32 || b->numel() != q.N) throw Error(name_ + ": bias must be float32 [N]", SY_INVALID_ARGUMENT);
      bias_ = upload(b->data<float>(), static_cast<size_t>(q.N) * sizeof(float), stream, name_ + ": uploading bias");
    } else if (n.graph.input(n.node, 5) != SY_NO_VALUE) {
      throw Error(name_ + ": on CUDA the bias must be a constant", SY_UNSUPPORTED);
    }
  }
  // The host buffers of `q` are freed on return: wait for the copies.
  cuda_check(cudaStreamSynchronize(stream), name_ + ": uploading the weight");
  w_.codes = codes_.as<uint8_t>();
  w_.scales = scales_.as<float>();
  w_.zero_points = zero_points_.get() ? zero_points_.as<uint8_t>() : nullptr;
  w_.float_zero_points = float_zero_points_.get() ? float_zero_points_.as<float>() : nullptr;
  w_.K = q.K;
  w_.N = q.N;
  w_.block_size = q.block_size;
  w_.n_blocks = q.n_blocks;
  w_.bits = q.bits;
}

void QMatMulCudaKernel::compute(sy::plugin::KernelIO& io) {
  auto a = io.input(0);
  if (a.raw.device != SY_DEVICE_CUDA || a.dtype() != SY_DTYPE_FLOAT32 || a.rank() < 1 || a.dim(a.rank() - 1) != w_.K)
    throw Error(name_ + ": input A must be a float32 CUDA tensor [..., " + std::to_string(w_.K) + "]", SY_INVALID_ARGUMENT);
  auto dims = a.dims();
  dims.back() = w_.N;
  auto y = io.allocate_output(0, SY_DTYPE_FLOAT32, dims);
  const int64_t M = a.numel() / w_.K;
  if (const char* err = cuda_qmatmul(w_, a.data<float>(), M, bias_.get() ? bias_.as<float>() : nullptr, y.data<float>(),
                                     sy::plugin::device_stream(SY_DEVICE_CUDA)))
    throw Error(name_ + ": " + err, SY_INVALID_ARGUMENT);
}

}  // namespace sy_quant
