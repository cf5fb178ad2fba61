// MatMul and Gemm on CUDA through cuBLAS: weights (constant B) converted to
// bf16 (or fp16) once at load, activations converted on the device per call,
// fp32 accumulation and fp32 output (cublasGemmEx, CUBLAS_COMPUTE_32F), so
// the rest of the graph keeps its float32 contract. Nodes whose B is not a
// constant 2-D weight, and Gemm with transA, stay on the CPU (supports()).
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/half.h"
#include "device/cuda/cuda_backend.h"
#include "device/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/registry.h"

namespace sy {
namespace {

cuda::Half16 gemm_type() {
  const char* e = std::getenv("SWITCHYARD_CUDA_GEMM");
  return e && std::string(e) == "fp16" ? cuda::Half16::F16 : cuda::Half16::BF16;
}

cudaDataType_t cuda_type(cuda::Half16 t) { return t == cuda::Half16::BF16 ? CUDA_R_16BF : CUDA_R_16F; }

bool constant_2d_float(const Graph& g, const Node& n, int i) {
  if (static_cast<size_t>(i) >= n.inputs.size() || n.inputs[static_cast<size_t>(i)] == kNoValue) return false;
  const Value& v = g.values[static_cast<size_t>(n.inputs[static_cast<size_t>(i)])];
  return v.constant && v.constant->dtype() == DType::F32 && v.constant->rank() == 2;
}

// A constant weight [K, N] (or [N, K] with trans) in 16-bit device memory.
struct DeviceWeight {
  Tensor data;
  int64_t K = 0, N = 0;
  bool trans = false;
};

DeviceWeight upload_weight(DeviceBackend& dev, const Tensor& w, bool trans, cuda::Half16 type) {
  DeviceWeight d;
  d.trans = trans;
  d.K = trans ? w.dim(1) : w.dim(0);
  d.N = trans ? w.dim(0) : w.dim(1);
  Tensor host = Tensor::empty(type == cuda::Half16::BF16 ? DType::BF16 : DType::F16, w.shape());
  if (type == cuda::Half16::BF16) floats_to_bf16(w.data<float>(), host.data<uint16_t>(), static_cast<size_t>(w.numel()));
  else floats_to_half(w.data<float>(), host.data<uint16_t>(), static_cast<size_t>(w.numel()));
  d.data = dev.to_device(host);
  return d;
}

// y[rows, N] = alpha * x[rows, K] * W + beta * y, row-major. cuBLAS is
// column-major, so this computes y^T = W^T x^T.
void gemm_rows(CudaBackend& dev, const DeviceWeight& w, cuda::Half16 type, const float* x, int64_t rows, float alpha,
               float beta, float* y) {
  if (rows == 0 || w.N == 0) return;
  Tensor x16 = dev.allocate(type == cuda::Half16::BF16 ? DType::BF16 : DType::F16, Shape{rows, w.K});
  cuda::convert_f32_to_16(x, x16.raw(), rows * w.K, type, dev.cuda_stream());
  const int m = static_cast<int>(w.N), n = static_cast<int>(rows), k = static_cast<int>(w.K);
  SY_CUBLAS_CHECK(cublasGemmEx(dev.cublas(), w.trans ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha,
                               w.data.raw(), cuda_type(type), w.trans ? k : m, x16.raw(), cuda_type(type), k, &beta, y,
                               CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

class CublasMatMul : public Kernel {
 public:
  explicit CublasMatMul(const KernelCreateInfo& ci) : type_(gemm_type()) {
    w_ = upload_weight(*ci.backend, *ci.constant_input(1), false, type_);
  }
  void compute(KernelContext& ctx) override {
    CudaBackend& dev = cuda_backend_of(ctx.backend);
    const Tensor& a = ctx.input(0);
    SY_CHECK(a.device() == Device::CUDA && a.dtype() == DType::F32, "MatMul on CUDA takes a float32 device tensor");
    SY_CHECK(a.rank() >= 1 && a.dim(a.rank() - 1) == w_.K,
             "MatMul inner dimensions differ: " << a.shape().str() << " x [" << w_.K << "," << w_.N << "]");
    Shape out_shape = a.shape();
    out_shape[out_shape.rank() - 1] = w_.N;
    Tensor& y = ctx.allocate_output(0, DType::F32, out_shape);
    gemm_rows(dev, w_, type_, a.data<float>(), a.numel() / w_.K, 1.f, 0.f, y.data<float>());
  }

 private:
  cuda::Half16 type_;
  DeviceWeight w_;
};

class CublasGemm : public Kernel {
 public:
  explicit CublasGemm(const KernelCreateInfo& ci)
      : type_(gemm_type()), alpha_(ci.node.attr_float("alpha", 1.f)), beta_(ci.node.attr_float("beta", 1.f)) {
    w_ = upload_weight(*ci.backend, *ci.constant_input(1), ci.node.attr_int("transB", 0) != 0, type_);
    if (const Tensor* c = ci.constant_input(2); c && beta_ != 0.f) bias_ = ci.backend->to_device(*c);
  }
  void compute(KernelContext& ctx) override {
    CudaBackend& dev = cuda_backend_of(ctx.backend);
    const Tensor& a = ctx.input(0);
    SY_CHECK(a.device() == Device::CUDA && a.dtype() == DType::F32 && a.rank() == 2 && a.dim(1) == w_.K,
             "Gemm on CUDA: A must be a float32 [M, " << w_.K << "] device tensor, got " << a.shape().str());
    const int64_t M = a.dim(0);
    Tensor& y = ctx.allocate_output(0, DType::F32, Shape{M, w_.N});
    float beta = 0.f;
    if (bias_.defined()) {
      cuda::fill_rows(y.data<float>(), bias_.data<float>(), M, w_.N, bias_.numel() == w_.N ? 1 : M, dev.cuda_stream());
      beta = beta_;
    }
    gemm_rows(dev, w_, type_, a.data<float>(), M, alpha_, beta, y.data<float>());
  }

 private:
  cuda::Half16 type_;
  float alpha_, beta_;
  DeviceWeight w_;
  Tensor bias_;
};

// Gemm's C must be a constant bias of N values (or M x N with static M: left to the CPU).
bool gemm_supported(const Graph& g, const Node& n) {
  if (n.attr_int("transA", 0) != 0 || !constant_2d_float(g, n, 1)) return false;
  if (n.inputs.size() < 3 || n.inputs[2] == kNoValue) return true;
  const Value& c = g.values[static_cast<size_t>(n.inputs[2])];
  if (!c.constant || c.constant->dtype() != DType::F32) return false;
  const Tensor& b = *g.values[static_cast<size_t>(n.inputs[1])].constant;
  int64_t N = n.attr_int("transB", 0) != 0 ? b.dim(0) : b.dim(1);
  return c.constant->numel() == N;
}

}  // namespace

void register_cuda_kernels(KernelRegistry& r) {
  KernelDef mm;
  mm.op_type = "MatMul";
  mm.device = Device::CUDA;
  mm.dtypes = {DType::F32};
  mm.provider = "builtin";  // the core's own, like the CPU kernels
  mm.supports = [](const Graph& g, const Node& n) { return constant_2d_float(g, n, 1); };
  mm.create = [](const KernelCreateInfo& ci) -> std::unique_ptr<Kernel> { return std::make_unique<CublasMatMul>(ci); };
  r.add(std::move(mm));
  KernelDef gemm;
  gemm.op_type = "Gemm";
  gemm.device = Device::CUDA;
  gemm.dtypes = {DType::F32};
  gemm.provider = "builtin";  // the core's own, like the CPU kernels
  gemm.supports = gemm_supported;
  gemm.create = [](const KernelCreateInfo& ci) -> std::unique_ptr<Kernel> { return std::make_unique<CublasGemm>(ci); };
  r.add(std::move(gemm));
}

}  // namespace sy
