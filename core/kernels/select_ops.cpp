// Selection: TopK, the router of every mixture-of-experts export (the k
// experts of each token and their scores), and OneHot, the expert mask a
// traced Hugging Face MoE block builds from them.
#include <algorithm>
#include <numeric>
#include <type_traits>

#include "kernels/kernel_util.h"
#include "kernels/registry.h"

namespace sy {
namespace {

class TopKKernel : public Kernel {
 public:
  TopKKernel(const Node& n, int64_t opset)
      : axis_(n.attr_int("axis", -1)), largest_(n.attr_int("largest", 1) != 0), k_attr_(opset < 10 ? n.attr_int("k", -1) : -1) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    int64_t k = k_attr_;
    if (k < 0) {
      const auto ks = optional_ints(ctx, 1);
      SY_CHECK(ks && ks->size() == 1, "TopK: K must be a tensor of one int64");
      k = (*ks)[0];
    }
    const int ax = normalize_axis(axis_, x.rank(), "TopK");
    const int64_t dim = x.dim(ax);
    SY_CHECK(k >= 0 && k <= dim, "TopK: K = " << k << " is outside [0, " << dim << "], the size of axis " << ax);
    int64_t outer = 1, inner = 1;
    Shape out;
    for (int d = 0; d < x.rank(); ++d) {
      if (d < ax) outer *= x.dim(d);
      if (d > ax) inner *= x.dim(d);
      out.push_back(d == ax ? k : x.dim(d));
    }
    Tensor& values = ctx.allocate_output(0, x.dtype(), out);
    Tensor& indices = ctx.allocate_output(1, DType::I64, out);
    dispatch_type(x.dtype(), "TopK", [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, bool>) {
        SY_THROW("TopK: bool input");
      } else {
        const T* p = x.data<T>();
        T* v = values.data<T>();
        int64_t* ix = indices.data<int64_t>();
        std::vector<int64_t> order(static_cast<size_t>(dim));
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t i = 0; i < inner; ++i) {
            auto at = [&](int64_t j) { return p[(o * dim + j) * inner + i]; };
            // ONNX: among equal values the lower index comes first; the
            // result is always sorted (the order MoE routers rely on).
            auto before = [&](int64_t a, int64_t b) {
              const T va = at(a), vb = at(b);
              if (va != vb) return largest_ ? va > vb : va < vb;
              return a < b;
            };
            std::iota(order.begin(), order.end(), int64_t{0});
            std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
            for (int64_t j = 0; j < k; ++j) {
              v[(o * k + j) * inner + i] = at(order[static_cast<size_t>(j)]);
              ix[(o * k + j) * inner + i] = order[static_cast<size_t>(j)];
            }
          }
      }
    });
  }

 private:
  int64_t axis_;
  bool largest_;
  int64_t k_attr_;
};

// OneHot(indices, depth, values [off, on]): a new axis of `depth` entries,
// `on` where the entry is the index (negative indices count from the end),
// `off` elsewhere; an index outside [-depth, depth) gives a row of `off`.
class OneHotKernel : public Kernel {
 public:
  explicit OneHotKernel(const Node& n) : axis_(n.attr_int("axis", -1)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& idx = ctx.input(0);
    const Tensor& values = ctx.input(2);
    const auto depth_v = optional_ints(ctx, 1);
    SY_CHECK(depth_v && depth_v->size() == 1 && (*depth_v)[0] > 0, "OneHot: depth must be one positive integer");
    SY_CHECK(values.numel() == 2, "OneHot: values must be [off, on]");
    const int64_t depth = (*depth_v)[0];
    const int ax = normalize_axis(axis_, idx.rank() + 1, "OneHot");
    Shape out;
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < idx.rank(); ++d) {
      if (d == ax) out.push_back(depth);
      out.push_back(idx.dim(d));
      (d < ax ? outer : inner) *= idx.dim(d);
    }
    if (ax == idx.rank()) out.push_back(depth);
    std::vector<int64_t> ids(static_cast<size_t>(idx.numel()));
    dispatch_type(idx.dtype(), "OneHot", [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, bool>) {
        SY_THROW("OneHot: bool indices");
      } else {
        for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(idx.data<T>()[i]);
      }
    });
    Tensor& y = ctx.allocate_output(0, values.dtype(), out);
    dispatch_type(values.dtype(), "OneHot", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T off = values.data<T>()[0], on = values.data<T>()[1];
      T* py = y.data<T>();
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < depth; ++j)
          for (int64_t i = 0; i < inner; ++i) {
            int64_t k = ids[static_cast<size_t>(o * inner + i)];
            if (k < 0) k += depth;
            py[(o * depth + j) * inner + i] = k == j ? on : off;
          }
    });
  }

 private:
  int64_t axis_;
};

}  // namespace

void register_select_kernels(KernelRegistry& r) {
  KernelDef d;
  d.op_type = "TopK";
  d.dtypes = {DType::F32, DType::F64, DType::I64, DType::I32};
  d.create = [](const KernelCreateInfo& ci) -> std::unique_ptr<Kernel> { return std::make_unique<TopKKernel>(ci.node, ci.opset); };
  r.add(std::move(d));
  KernelDef oh;
  oh.op_type = "OneHot";
  oh.dtypes = {DType::I64, DType::I32, DType::F32};
  oh.create = [](const KernelCreateInfo& ci) -> std::unique_ptr<Kernel> { return std::make_unique<OneHotKernel>(ci.node); };
  r.add(std::move(oh));
}

}  // namespace sy
