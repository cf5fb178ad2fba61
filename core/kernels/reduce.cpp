// Reductions (ReduceMean/Sum/Max/Min/Prod, ArgMax) and Softmax/LogSoftmax.
#include <cmath>
#include <limits>

#include "kernels/kernel_util.h"
#include "kernels/registry.h"

namespace sy {
namespace {

enum class Red { Mean, Sum, Max, Min, Prod, SumSquare };

class ReduceKernel : public Kernel {
 public:
  ReduceKernel(Red op, const Node& n, int64_t opset, bool axes_are_input)
      : op_(op), keepdims_(n.attr_int("keepdims", 1) != 0), noop_empty_(n.attr_int("noop_with_empty_axes", 0) != 0),
        axes_input_(axes_are_input) {
    (void)opset;
    if (!axes_are_input) attr_axes_ = n.attr_ints("axes");
  }
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    std::vector<int64_t> axes;
    if (axes_input_) {
      if (auto a = optional_ints(ctx, 1)) axes = *a;
    } else if (attr_axes_) {
      axes = *attr_axes_;
    }
    if (axes.empty() && noop_empty_) {
      ctx.set_output(0, x);
      return;
    }
    std::vector<bool> reduced(static_cast<size_t>(x.rank()), axes.empty());
    for (int64_t a : axes) reduced[static_cast<size_t>(normalize_axis(a, x.rank(), "Reduce"))] = true;
    Shape kept, out;
    int64_t count = 1;
    for (int d = 0; d < x.rank(); ++d) {
      bool r = reduced[static_cast<size_t>(d)];
      kept.push_back(r ? 1 : x.dim(d));
      if (r) count *= x.dim(d);
      if (!r || keepdims_) out.push_back(r ? 1 : x.dim(d));
    }
    SY_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::I64 || x.dtype() == DType::I32 || x.dtype() == DType::F64,
             "Reduce: unsupported type " << dtype_name(x.dtype()));
    dispatch_type(x.dtype(), "Reduce", [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, bool>) return;
      else run<T>(ctx, x, kept, out, count);
    });
  }

 private:
  template <typename T>
  void run(KernelContext& ctx, const Tensor& x, const Shape& kept, const Shape& out, int64_t count) {
    using Acc = std::conditional_t<std::is_floating_point_v<T>, double, T>;
    if ((op_ == Red::Max || op_ == Red::Min) && count == 0)
      SY_THROW("Reduce" << (op_ == Red::Max ? "Max" : "Min") << " over an empty set");
    int64_t n_out = kept.numel();
    std::vector<Acc> acc(static_cast<size_t>(n_out));
    Acc init = 0;
    if (op_ == Red::Prod) init = 1;
    if (op_ == Red::Max) init = std::numeric_limits<Acc>::lowest();
    if (op_ == Red::Min) init = std::numeric_limits<Acc>::max();
    std::fill(acc.begin(), acc.end(), init);
    const T* px = x.data<T>();
    // Walk the input once; input 1 of the broadcast maps each element to its
    // output slot (stride 0 along reduced dims).
    Broadcast bc({&x.shape(), &kept}, "Reduce");
    size_t last = static_cast<size_t>(bc.rank - 1);
    int64_t si = bc.strides[0][last], so = bc.strides[1][last];
    bc.for_each_run([&](int64_t, int64_t len, const std::array<int64_t, 3>& off) {
      for (int64_t i = 0; i < len; ++i) {
        Acc v = static_cast<Acc>(px[off[0] + i * si]);
        Acc& a = acc[static_cast<size_t>(off[1] + i * so)];
        switch (op_) {
          case Red::Mean: case Red::Sum: a += v; break;
          case Red::SumSquare: a += v * v; break;
          case Red::Prod: a *= v; break;
          case Red::Max: a = v > a ? v : a; break;
          case Red::Min: a = v < a ? v : a; break;
        }
      }
    });
    Tensor& y = ctx.allocate_output(0, x.dtype(), out);
    T* py = y.data<T>();
    for (int64_t i = 0; i < n_out; ++i) {
      Acc v = acc[static_cast<size_t>(i)];
      if (op_ == Red::Mean) v = count ? static_cast<Acc>(v / static_cast<Acc>(count)) : Acc(0);
      py[i] = static_cast<T>(v);
    }
  }

  Red op_;
  bool keepdims_, noop_empty_, axes_input_;
  std::optional<std::vector<int64_t>> attr_axes_;
};

class ArgMaxKernel : public Kernel {
 public:
  explicit ArgMaxKernel(const Node& n)
      : axis_(n.attr_int("axis", 0)), keepdims_(n.attr_int("keepdims", 1) != 0), last_(n.attr_int("select_last_index", 0) != 0) {}
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    SY_CHECK(x.dtype() == DType::F32, "ArgMax supports float32 only");
    int ax = normalize_axis(axis_, x.rank(), "ArgMax");
    int64_t outer = 1, inner = 1, dim = x.dim(ax);
    SY_CHECK(dim > 0, "ArgMax over an empty axis");
    Shape out;
    for (int d = 0; d < x.rank(); ++d) {
      if (d < ax) outer *= x.dim(d);
      if (d > ax) inner *= x.dim(d);
      if (d != ax) out.push_back(x.dim(d));
      else if (keepdims_) out.push_back(1);
    }
    Tensor& y = ctx.allocate_output(0, DType::I64, out);
    const float* p = x.data<float>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        int64_t best = 0;
        for (int64_t j = 1; j < dim; ++j) {
          float v = p[(o * dim + j) * inner + i], b = p[(o * dim + best) * inner + i];
          if (v > b || (last_ && v == b)) best = j;
        }
        y.data<int64_t>()[o * inner + i] = best;
      }
  }

 private:
  int64_t axis_;
  bool keepdims_, last_;
};

class SoftmaxKernel : public Kernel {
 public:
  SoftmaxKernel(const Node& n, int64_t opset, bool log)
      : axis_(n.attr_int("axis", opset >= 13 ? -1 : 1)), legacy_(opset < 13), log_(log) {}
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    SY_CHECK(x.dtype() == DType::F32, "Softmax supports float32 only");
    Tensor& y = ctx.allocate_output(0, DType::F32, x.shape());
    if (x.numel() == 0) return;
    int ax = normalize_axis(axis_, x.rank(), "Softmax");
    int64_t outer = 1, dim = 1, inner = 1;
    for (int d = 0; d < x.rank(); ++d) {
      if (d < ax) outer *= x.dim(d);
      else if (d == ax || legacy_) dim *= x.dim(d);  // opset < 13: softmax over the flattened tail
      else inner *= x.dim(d);
    }
    const float* px = x.data<float>();
    float* py = y.data<float>();
    auto rows = [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        int64_t o = r / inner, i = r % inner;
        const float* s = px + o * dim * inner + i;
        float* d = py + o * dim * inner + i;
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < dim; ++j) m = std::max(m, s[j * inner]);
        double sum = 0;
        for (int64_t j = 0; j < dim; ++j) {
          float e = std::exp(s[j * inner] - m);
          d[j * inner] = e;
          sum += e;
        }
        if (log_) {
          float ls = static_cast<float>(std::log(sum));
          for (int64_t j = 0; j < dim; ++j) d[j * inner] = s[j * inner] - m - ls;
        } else {
          float inv = static_cast<float>(1.0 / sum);
          for (int64_t j = 0; j < dim; ++j) d[j * inner] *= inv;
        }
      }
    };
    int64_t n_rows = outer * inner;
    if (ctx.threads && x.numel() >= kParallelElementThreshold) ctx.threads->parallel_for(n_rows, 16, rows);
    else rows(0, n_rows);
  }

 private:
  int64_t axis_;
  bool legacy_, log_;
};

void add_reduce(KernelRegistry& r, const std::string& op, Red red, int64_t axes_input_since) {
  KernelDef d;
  d.op_type = op;
  d.dtypes = {DType::F32, DType::F64, DType::I64, DType::I32};
  d.create = [red, axes_input_since](const KernelCreateInfo& ci) -> std::unique_ptr<Kernel> {
    return std::make_unique<ReduceKernel>(red, ci.node, ci.opset, ci.opset >= axes_input_since);
  };
  r.add(std::move(d));
}

}  // namespace

void register_reduce_kernels(KernelRegistry& r) {
  // ReduceSum took its axes as an input from opset 13, the others from 18.
  add_reduce(r, "ReduceMean", Red::Mean, 18);
  add_reduce(r, "ReduceSum", Red::Sum, 13);
  add_reduce(r, "ReduceMax", Red::Max, 18);
  add_reduce(r, "ReduceMin", Red::Min, 18);
  add_reduce(r, "ReduceProd", Red::Prod, 18);
  add_reduce(r, "ReduceSumSquare", Red::SumSquare, 18);
  KernelDef am;
  am.op_type = "ArgMax";
  am.dtypes = {DType::F32};
  am.create = [](const KernelCreateInfo& ci) -> std::unique_ptr<Kernel> { return std::make_unique<ArgMaxKernel>(ci.node); };
  r.add(std::move(am));
  for (bool log : {false, true}) {
    KernelDef d;
    d.op_type = log ? "LogSoftmax" : "Softmax";
    d.dtypes = {DType::F32};
    d.create = [log](const KernelCreateInfo& ci) -> std::unique_ptr<Kernel> {
      return std::make_unique<SoftmaxKernel>(ci.node, ci.opset, log);
    };
    r.add(std::move(d));
  }
}

}  // namespace sy
