// LayerNormalization (ONNX opset 17): normalise over dims >= axis, then scale
// and bias; optional Mean and InvStdDev outputs. RMSNormalization (opset 23)
// and ONNX Runtime's SimplifiedLayerNormalization (default domain, what the
// onnxruntime-genai model builder emits): x / sqrt(mean(x^2) + eps) * scale.
#include <cmath>

#include "kernels/kernel_util.h"
#include "kernels/registry.h"

namespace sy {
namespace {

class LayerNormKernel : public Kernel {
 public:
  explicit LayerNormKernel(const Node& n) : axis_(n.attr_int("axis", -1)), eps_(n.attr_float("epsilon", 1e-5f)) {}
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& scale = ctx.input(1);
    SY_CHECK(x.dtype() == DType::F32 && scale.dtype() == DType::F32, "LayerNormalization supports float32 only");
    int ax = normalize_axis(axis_, x.rank(), "LayerNormalization");
    int64_t rows = 1, cols = 1;
    for (int d = 0; d < x.rank(); ++d) (d < ax ? rows : cols) *= x.dim(d);
    Shape tail(std::span<const int64_t>(x.shape().begin() + ax, static_cast<size_t>(x.rank() - ax)));
    auto expand_param = [&](const Tensor& p, const char* what) {
      // Scale and bias broadcast to the normalised tail.
      Broadcast bc({&tail, &p.shape()}, what);
      SY_CHECK(bc.out == tail, "LayerNormalization: " << what << " of shape " << p.shape().str()
                                                        << " does not broadcast to " << tail.str());
      std::vector<float> full(static_cast<size_t>(cols));
      int64_t s = bc.strides[1][static_cast<size_t>(bc.rank - 1)];
      bc.for_each_run([&](int64_t o, int64_t len, const std::array<int64_t, 3>& off) {
        for (int64_t i = 0; i < len; ++i) full[static_cast<size_t>(o + i)] = p.data<float>()[off[1] + i * s];
      });
      return full;
    };
    std::vector<float> g = expand_param(scale, "scale");
    std::vector<float> b = ctx.has_input(2) ? expand_param(ctx.input(2), "bias") : std::vector<float>(static_cast<size_t>(cols), 0.f);
    Tensor& y = ctx.allocate_output(0, DType::F32, x.shape());
    Shape stat_shape = x.shape();
    for (int d = ax; d < x.rank(); ++d) stat_shape[d] = 1;
    float* mean_out = ctx.num_outputs > 1 ? ctx.allocate_output(1, DType::F32, stat_shape).data<float>() : nullptr;
    float* inv_out = ctx.num_outputs > 2 ? ctx.allocate_output(2, DType::F32, stat_shape).data<float>() : nullptr;
    const float* px = x.data<float>();
    float* py = y.data<float>();
    for (int64_t r = 0; r < rows; ++r) {
      const float* s = px + r * cols;
      double sum = 0, sq = 0;
      for (int64_t j = 0; j < cols; ++j) sum += s[j];
      double mean = sum / static_cast<double>(cols);
      for (int64_t j = 0; j < cols; ++j) sq += (s[j] - mean) * (s[j] - mean);
      float inv = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(cols) + eps_));
      for (int64_t j = 0; j < cols; ++j)
        py[r * cols + j] = (s[j] - static_cast<float>(mean)) * inv * g[static_cast<size_t>(j)] + b[static_cast<size_t>(j)];
      if (mean_out) mean_out[r] = static_cast<float>(mean);
      if (inv_out) inv_out[r] = inv;
    }
  }

 private:
  int64_t axis_;
  float eps_;
};

class RmsNormKernel : public Kernel {
 public:
  explicit RmsNormKernel(const Node& n) : axis_(n.attr_int("axis", -1)), eps_(n.attr_float("epsilon", 1e-5f)) {}
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& scale = ctx.input(1);
    SY_CHECK(x.dtype() == DType::F32 && scale.dtype() == DType::F32, "RMS normalization supports float32 only");
    int ax = normalize_axis(axis_, x.rank(), "RMS normalization");
    int64_t rows = 1, cols = 1;
    for (int d = 0; d < x.rank(); ++d) (d < ax ? rows : cols) *= x.dim(d);
    SY_CHECK(scale.numel() == cols || scale.numel() == 1,
             "RMS normalization: scale of shape " << scale.shape().str() << " does not match the " << cols << " normalised elements");
    Tensor& y = ctx.allocate_output(0, DType::F32, x.shape());
    Shape stat_shape = x.shape();
    for (int d = ax; d < x.rank(); ++d) stat_shape[d] = 1;
    float* inv_out = ctx.num_outputs > 1 ? ctx.allocate_output(1, DType::F32, stat_shape).data<float>() : nullptr;
    const float* px = x.data<float>();
    const float* g = scale.data<float>();
    const int64_t gs = scale.numel() == 1 ? 0 : 1;
    float* py = y.data<float>();
    auto rows_fn = [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float* s = px + r * cols;
        double sq = 0;
        for (int64_t j = 0; j < cols; ++j) sq += static_cast<double>(s[j]) * s[j];
        float inv = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(cols) + eps_));
        for (int64_t j = 0; j < cols; ++j) py[r * cols + j] = s[j] * inv * g[j * gs];
        if (inv_out) inv_out[r] = inv;
      }
    };
    if (ctx.threads && rows * cols >= kParallelElementThreshold) ctx.threads->parallel_for(rows, 1, rows_fn);
    else rows_fn(0, rows);
  }

 private:
  int64_t axis_;
  float eps_;
};

}  // namespace

void register_norm_kernels(KernelRegistry& r) {
  for (const char* op : {"RMSNormalization", "SimplifiedLayerNormalization"}) {
    KernelDef rms;
    rms.op_type = op;
    rms.dtypes = {DType::F32};
    rms.create = [](const KernelCreateInfo& ci) -> std::unique_ptr<Kernel> { return std::make_unique<RmsNormKernel>(ci.node); };
    r.add(std::move(rms));
  }
  KernelDef d;
  d.op_type = "LayerNormalization";
  d.dtypes = {DType::F32};
  d.create = [](const KernelCreateInfo& ci) -> std::unique_ptr<Kernel> { return std::make_unique<LayerNormKernel>(ci.node); };
  r.add(std::move(d));
}

}  // namespace sy
