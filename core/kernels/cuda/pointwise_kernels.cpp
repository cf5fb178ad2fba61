// The core's CUDA kernels for the float32 pointwise and layout ops between
// the matmuls (residual adds, RoPE's Mul/Neg/Slice/Concat, Transpose,
// Softmax, the embedding Gather), so a step's activations stay on the GPU.
// Constant operands are uploaded once at creation; shape and index operands
// are read on the host (KernelDef::host_inputs). Anything else (other
// dtypes, other axes) stays on the CPU through supports().
#include <numeric>

#include "device/cuda/cuda_backend.h"
#include "kernels/cuda/pointwise.h"
#include "kernels/kernel_util.h"
#include "kernels/registry.h"

namespace sy {
namespace {

using cuda::Strided;

bool is_float(const Graph& g, ValueId v) { return v != kNoValue && g.values[static_cast<size_t>(v)].dtype == DType::F32; }

bool float_inputs(const Graph& g, const Node& n, size_t count) {
  if (n.inputs.size() < count) return false;
  for (size_t i = 0; i < count; ++i)
    if (!is_float(g, n.inputs[i])) return false;
  return true;
}

bool no_constant_data(const Graph& g, const Node& n) {
  for (ValueId v : n.inputs)
    if (v != kNoValue && g.values[static_cast<size_t>(v)].constant) return false;
  return true;
}

Strided contiguous(const Shape& s) {
  Strided r;
  r.rank = s.rank();
  auto cs = contiguous_strides(s);
  for (int d = 0; d < s.rank(); ++d) {
    r.dims[d] = s[d];
    r.a[d] = cs[static_cast<size_t>(d)];
    r.b[d] = cs[static_cast<size_t>(d)];
  }
  return r;
}

cudaStream_t stream_of(KernelContext& ctx) { return cuda_backend_of(ctx.backend).cuda_stream(); }

// An operand: the device copy of a constant made at creation, else the input.
class Operands {
 public:
  Operands(const KernelCreateInfo& ci, size_t count) : device_(count) {
    for (size_t i = 0; i < count; ++i)
      if (const Tensor* c = ci.constant_input(static_cast<int>(i))) device_[i] = ci.backend->to_device(*c);
  }
  const Tensor& get(KernelContext& ctx, int i) const {
    const Tensor& t = device_[static_cast<size_t>(i)].defined() ? device_[static_cast<size_t>(i)] : ctx.input(i);
    SY_CHECK(t.device() == Device::CUDA && t.dtype() == DType::F32, "input " << i << " must be a float32 CUDA tensor");
    return t;
  }

 private:
  std::vector<Tensor> device_;
};

class BinaryKernel : public Kernel {
 public:
  BinaryKernel(const KernelCreateInfo& ci, cuda::BinaryOp op) : op_(op), in_(ci, 2) {}
  void compute(KernelContext& ctx) override {
    const Tensor& a = in_.get(ctx, 0);
    const Tensor& b = in_.get(ctx, 1);
    Broadcast bc({&a.shape(), &b.shape()}, "binary op");
    Strided s;
    s.rank = bc.rank;
    for (int d = 0; d < bc.rank; ++d) {
      s.dims[d] = bc.dims[static_cast<size_t>(d)];
      s.a[d] = bc.strides[0][static_cast<size_t>(d)];
      s.b[d] = bc.strides[1][static_cast<size_t>(d)];
    }
    Tensor& y = ctx.allocate_output(0, DType::F32, bc.out);
    cuda::binary(op_, a.data<float>(), b.data<float>(), y.data<float>(), s, stream_of(ctx));
  }

 private:
  cuda::BinaryOp op_;
  Operands in_;
};

class UnaryKernel : public Kernel {
 public:
  explicit UnaryKernel(cuda::UnaryOp op) : op_(op) {}
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.allocate_output(0, DType::F32, x.shape());
    cuda::unary(op_, x.data<float>(), y.data<float>(), x.numel(), stream_of(ctx));
  }

 private:
  cuda::UnaryOp op_;
};

class TransposeKernel : public Kernel {
 public:
  explicit TransposeKernel(const Node& n) : perm_(n.attr_ints("perm")) {}
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    std::vector<int64_t> perm = perm_.value_or(std::vector<int64_t>{});
    if (perm.empty())
      for (int d = x.rank() - 1; d >= 0; --d) perm.push_back(d);
    SY_CHECK(static_cast<int>(perm.size()) == x.rank(), "Transpose: perm has " << perm.size() << " entries for rank " << x.rank());
    Shape out;
    for (int64_t p : perm) out.push_back(x.dim(normalize_axis(p, x.rank(), "Transpose")));
    Tensor& y = ctx.allocate_output(0, x.dtype(), out);
    auto in_strides = contiguous_strides(x.shape());
    Strided s = contiguous(out);
    for (int d = 0; d < out.rank(); ++d) s.a[d] = in_strides[static_cast<size_t>(normalize_axis(perm[static_cast<size_t>(d)], x.rank(), "Transpose"))];
    cuda::strided_copy(x.raw(), 0, y.raw(), 0, s, 4, stream_of(ctx));
  }

 private:
  std::optional<std::vector<int64_t>> perm_;
};

class SliceKernel : public Kernel {
 public:
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    std::vector<int64_t> axes, steps;
    if (auto a = optional_ints(ctx, 3)) axes = *a;
    if (auto s = optional_ints(ctx, 4)) steps = *s;
    Shape start, step, out;
    resolve_slice(x.shape(), ctx.input(1).to_int64_vector(), ctx.input(2).to_int64_vector(), axes, steps, start, step, out);
    Tensor& y = ctx.allocate_output(0, x.dtype(), out);
    auto in_strides = contiguous_strides(x.shape());
    Strided s = contiguous(out);
    int64_t base = 0;
    for (int d = 0; d < out.rank(); ++d) {
      s.a[d] = in_strides[static_cast<size_t>(d)] * step[d];
      base += start[d] * in_strides[static_cast<size_t>(d)];
    }
    cuda::strided_copy(x.raw(), base, y.raw(), 0, s, 4, stream_of(ctx));
  }
};

class ConcatKernel : public Kernel {
 public:
  explicit ConcatKernel(const Node& n) : axis_(n.attr_int("axis", 0)) {}
  void compute(KernelContext& ctx) override {
    const Tensor& first = ctx.input(0);
    const int ax = normalize_axis(axis_, first.rank(), "Concat");
    Shape out = first.shape();
    out[ax] = 0;
    for (int i = 0; i < ctx.num_inputs; ++i) {
      const Tensor& t = ctx.input(i);
      SY_CHECK(t.rank() == first.rank(), "Concat: inputs differ in rank");
      for (int d = 0; d < t.rank(); ++d) SY_CHECK(d == ax || t.dim(d) == first.dim(d), "Concat: shapes differ outside the axis");
      out[ax] += t.dim(ax);
    }
    Tensor& y = ctx.allocate_output(0, first.dtype(), out);
    auto out_strides = contiguous_strides(out);
    int64_t at = 0;
    for (int i = 0; i < ctx.num_inputs; ++i) {
      const Tensor& t = ctx.input(i);
      Strided s = contiguous(t.shape());
      for (int d = 0; d < t.rank(); ++d) s.b[d] = out_strides[static_cast<size_t>(d)];
      cuda::strided_copy(t.raw(), 0, y.raw(), at * out_strides[static_cast<size_t>(ax)], s, 4, stream_of(ctx));
      at += t.dim(ax);
    }
  }

 private:
  int64_t axis_;
};

// Split into the sizes of input 1 (opset >= 13) or the `split` attribute,
// else equal parts: one strided copy per output (the quantize pass's joined
// q/k/v and gate/up matmuls end in one).
class SplitKernel : public Kernel {
 public:
  SplitKernel(const Node& n, int64_t opset) : axis_(n.attr_int("axis", 0)), num_outputs_(n.attr_int("num_outputs", 0)) {
    if (opset < 13) attr_split_ = n.attr_ints("split");
  }
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const int ax = normalize_axis(axis_, x.rank(), "Split");
    const std::vector<int64_t> split = resolve_split(ctx, x.dim(ax), attr_split_, num_outputs_);
    auto in_strides = contiguous_strides(x.shape());
    int64_t at = 0;
    for (int i = 0; i < ctx.num_outputs; ++i) {
      Shape out = x.shape();
      out[ax] = split[static_cast<size_t>(i)];
      Tensor& y = ctx.allocate_output(i, x.dtype(), out);
      Strided s = contiguous(out);
      for (int d = 0; d < out.rank(); ++d) s.a[d] = in_strides[static_cast<size_t>(d)];
      if (y.numel() > 0) cuda::strided_copy(x.raw(), at * in_strides[static_cast<size_t>(ax)], y.raw(), 0, s, 4, stream_of(ctx));
      at += out[ax];
    }
  }

 private:
  int64_t axis_, num_outputs_;
  std::optional<std::vector<int64_t>> attr_split_;
};

// Softmax and ReduceMean over the last axis only (supports() checks).
class RowsKernel : public Kernel {
 public:
  explicit RowsKernel(bool softmax) : softmax_(softmax) {}
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    SY_CHECK(x.rank() >= 1, "rank-0 input");
    const int64_t cols = x.dim(x.rank() - 1), rows = cols ? x.numel() / cols : 0;
    Shape out = x.shape();
    if (!softmax_) out[out.rank() - 1] = 1;
    Tensor& y = ctx.allocate_output(0, DType::F32, out);
    if (softmax_) cuda::softmax_rows(x.data<float>(), y.data<float>(), rows, cols, stream_of(ctx));
    else cuda::mean_rows(x.data<float>(), y.data<float>(), rows, cols, stream_of(ctx));
  }

 private:
  bool softmax_;
};

// Gather on axis 0 of a float table (an embedding) with host indices.
class GatherKernel : public Kernel {
 public:
  explicit GatherKernel(const KernelCreateInfo& ci) : table_(ci, 1) {}
  void compute(KernelContext& ctx) override {
    const Tensor& data = table_.get(ctx, 0);
    std::vector<int64_t> idx = ctx.input(1).to_int64_vector();
    const int64_t rows = data.dim(0);
    for (int64_t& i : idx) {
      SY_CHECK(i >= -rows && i < rows, "Gather: index " << i << " out of range for " << rows << " rows");
      if (i < 0) i += rows;
    }
    Shape out = ctx.input(1).shape();
    for (int d = 1; d < data.rank(); ++d) out.push_back(data.dim(d));
    const int64_t row = rows ? data.numel() / rows : 0;
    Tensor& y = ctx.allocate_output(0, DType::F32, out);
    Tensor host_idx = Tensor::from<int64_t>(Shape{static_cast<int64_t>(idx.size())}, std::span<const int64_t>(idx));
    Tensor dev_idx = ctx.backend->to_device(host_idx);
    cuda::gather_rows(data.data<float>(), dev_idx.data<int64_t>(), y.data<float>(), static_cast<int64_t>(idx.size()), row,
                      stream_of(ctx));
  }

 private:
  Operands table_;
};

KernelDef cuda_def(const std::string& op, std::function<bool(const Graph&, const Node&)> supports, KernelFactory make) {
  KernelDef d;
  d.op_type = op;
  d.device = Device::CUDA;
  d.dtypes = {DType::F32};
  d.provider = "builtin";
  d.supports = std::move(supports);
  d.create = std::move(make);
  return d;
}

bool last_axis(const Graph& g, const Node& n, int64_t axis) {
  if (axis == -1) return true;
  const Value& v = g.values[static_cast<size_t>(n.inputs[0])];
  return v.shape && axis == static_cast<int64_t>(v.shape->size()) - 1;
}

}  // namespace

void register_cuda_pointwise_kernels(KernelRegistry& r) {
  const std::pair<const char*, cuda::BinaryOp> binary[] = {{"Add", cuda::BinaryOp::Add}, {"Sub", cuda::BinaryOp::Sub},
                                                           {"Mul", cuda::BinaryOp::Mul}, {"Div", cuda::BinaryOp::Div},
                                                           {"Pow", cuda::BinaryOp::Pow}};
  for (auto [name, op] : binary)
    r.add(cuda_def(name, [](const Graph& g, const Node& n) { return float_inputs(g, n, 2); },
                   [op = op](const KernelCreateInfo& ci) -> std::unique_ptr<Kernel> { return std::make_unique<BinaryKernel>(ci, op); }));
  const std::pair<const char*, cuda::UnaryOp> unary[] = {
      {"Neg", cuda::UnaryOp::Neg}, {"Sqrt", cuda::UnaryOp::Sqrt}, {"Sigmoid", cuda::UnaryOp::Sigmoid}, {"Exp", cuda::UnaryOp::Exp},
      {"Cos", cuda::UnaryOp::Cos}, {"Sin", cuda::UnaryOp::Sin}, {"Reciprocal", cuda::UnaryOp::Reciprocal}, {"Tanh", cuda::UnaryOp::Tanh}};
  for (auto [name, op] : unary)
    r.add(cuda_def(name, [](const Graph& g, const Node& n) { return float_inputs(g, n, 1) && no_constant_data(g, n); },
                   [op = op](const KernelCreateInfo&) -> std::unique_ptr<Kernel> { return std::make_unique<UnaryKernel>(op); }));
  r.add(cuda_def("Transpose", [](const Graph& g, const Node& n) { return float_inputs(g, n, 1) && no_constant_data(g, n); },
                 [](const KernelCreateInfo& ci) -> std::unique_ptr<Kernel> { return std::make_unique<TransposeKernel>(ci.node); }));
  KernelDef slice = cuda_def(
      "Slice", [](const Graph& g, const Node& n) { return g.opset("") >= 10 && float_inputs(g, n, 1) && no_constant_data(g, n) && n.inputs.size() >= 3; },
      [](const KernelCreateInfo&) -> std::unique_ptr<Kernel> { return std::make_unique<SliceKernel>(); });
  slice.host_inputs = {1, 2, 3, 4};
  r.add(std::move(slice));
  KernelDef split = cuda_def(
      "Split", [](const Graph& g, const Node& n) { return float_inputs(g, n, 1) && no_constant_data(g, n); },
      [](const KernelCreateInfo& ci) -> std::unique_ptr<Kernel> { return std::make_unique<SplitKernel>(ci.node, ci.opset); });
  split.host_inputs = {1};
  r.add(std::move(split));
  r.add(cuda_def(
      "Concat",
      [](const Graph& g, const Node& n) { return float_inputs(g, n, n.inputs.size()) && no_constant_data(g, n) && !n.inputs.empty(); },
      [](const KernelCreateInfo& ci) -> std::unique_ptr<Kernel> { return std::make_unique<ConcatKernel>(ci.node); }));
  r.add(cuda_def(
      "Softmax",
      [](const Graph& g, const Node& n) { return g.opset("") >= 13 && float_inputs(g, n, 1) && last_axis(g, n, n.attr_int("axis", -1)); },
      [](const KernelCreateInfo&) -> std::unique_ptr<Kernel> { return std::make_unique<RowsKernel>(true); }));
  r.add(cuda_def(
      "ReduceMean",
      [](const Graph& g, const Node& n) {
        auto axes = n.attr_ints("axes");
        return g.opset("") < 18 && n.inputs.size() == 1 && float_inputs(g, n, 1) && n.attr_int("keepdims", 1) == 1 && axes &&
               axes->size() == 1 && last_axis(g, n, (*axes)[0]);
      },
      [](const KernelCreateInfo&) -> std::unique_ptr<Kernel> { return std::make_unique<RowsKernel>(false); }));
  KernelDef gather = cuda_def(
      "Gather",
      [](const Graph& g, const Node& n) { return n.attr_int("axis", 0) == 0 && float_inputs(g, n, 1) && n.inputs.size() == 2; },
      [](const KernelCreateInfo& ci) -> std::unique_ptr<Kernel> { return std::make_unique<GatherKernel>(ci); });
  gather.host_inputs = {1};
  r.add(std::move(gather));
}

}  // namespace sy
