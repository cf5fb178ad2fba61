// CPU kernels of the fused norm and activation: the reference for the CUDA
// ones, and on the CPU one pass over each row instead of seven. Built with
// -ffp-contract=off: each result is rounded where the unfused graph rounds.
#include <cmath>
#include <string>

#include "fused_plugin.h"

namespace sy_fused {

using sy::plugin::Error;

void rmsnorm_rows(const float* x, const float* weight, float eps, bool divide, int64_t begin, int64_t end, int64_t cols, float* y) {
  for (int64_t r = begin; r < end; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    // The unfused graph's arithmetic, step for step: Pow(x, 2) rounds each
    // square to float; ReduceMean sums them in double, in order, and rounds
    // sum / n to float; then float + eps, sqrt, and either 1 / s then x * inv
    // (Div(1, s) or Reciprocal) or x / s; then * w.
    double sum = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const float sq = xr[c] * xr[c];
      sum += static_cast<double>(sq);
    }
    const float mean = static_cast<float>(sum / static_cast<double>(cols));
    const float s = std::sqrt(mean + eps);
    if (divide) {
      for (int64_t c = 0; c < cols; ++c) {
        const float n = xr[c] / s;
        yr[c] = n * weight[c];
      }
    } else {
      const float inv = 1.f / s;
      for (int64_t c = 0; c < cols; ++c) {
        const float n = xr[c] * inv;
        yr[c] = n * weight[c];
      }
    }
  }
}

void silu_mul(const float* gate, const float* up, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    y[i] = g * (1.f / (1.f + std::exp(-g))) * up[i];
  }
}

RMSNormKernel::RMSNormKernel(const sy::plugin::NodeRef& n) {
  auto eps = n.graph.attr_float(n.node, "epsilon");
  if (!eps || !(*eps >= 0.f)) throw Error("RMSNorm needs a non-negative 'epsilon' attribute", SY_INVALID_ARGUMENT);
  eps_ = *eps;
  divide_ = n.graph.attr_int(n.node, "divide").value_or(0) != 0;
}

void RMSNormKernel::compute(sy::plugin::KernelIO& io) {
  auto x = io.input(0), w = io.input(1);
  if (x.dtype() != SY_DTYPE_FLOAT32 || w.dtype() != SY_DTYPE_FLOAT32 || x.rank() < 1 || w.numel() != x.dim(x.rank() - 1))
    throw Error("RMSNorm: x must be float32 [..., C] and weight float32 [C]", SY_INVALID_ARGUMENT);
  auto y = io.allocate_output(0, SY_DTYPE_FLOAT32, x.dims());
  const int64_t cols = w.numel(), rows = cols ? x.numel() / cols : 0;
  const float *px = x.data<float>(), *pw = w.data<float>();
  float* py = y.data<float>();
  if (rows * cols >= (1 << 16)) io.parallel_for(rows, 1, [&](int64_t b, int64_t e) { rmsnorm_rows(px, pw, eps_, divide_, b, e, cols, py); });
  else rmsnorm_rows(px, pw, eps_, divide_, 0, rows, cols, py);
}

SiluMulKernel::SiluMulKernel(const sy::plugin::NodeRef&) {}

void SiluMulKernel::compute(sy::plugin::KernelIO& io) {
  auto g = io.input(0), u = io.input(1);
  if (g.dtype() != SY_DTYPE_FLOAT32 || u.dtype() != SY_DTYPE_FLOAT32 || g.dims() != u.dims())
    throw Error("SiluMul: gate and up must be float32 tensors of the same shape", SY_INVALID_ARGUMENT);
  auto y = io.allocate_output(0, SY_DTYPE_FLOAT32, g.dims());
  const float *pg = g.data<float>(), *pu = u.data<float>();
  float* py = y.data<float>();
  const int64_t n = g.numel();
  if (n >= (1 << 16)) io.parallel_for(n, 4096, [&](int64_t b, int64_t e) { silu_mul(pg + b, pu + b, e - b, py + b); });
  else silu_mul(pg, pu, n, py);
}

}  // namespace sy_fused
