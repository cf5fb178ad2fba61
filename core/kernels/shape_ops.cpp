// Ops that compute or change shapes. The view ops (Reshape, Squeeze,
// Unsqueeze, Flatten, Identity) return views of their input: no copies.
#include <cmath>

#include "kernels/kernel_util.h"
#include "kernels/registry.h"

namespace sy {
namespace {

Tensor int64_vector_tensor(KernelContext& ctx, int out, std::span<const int64_t> v) {
  Tensor& t = ctx.allocate_output(out, DType::I64, Shape{static_cast<int64_t>(v.size())});
  if (!v.empty()) std::memcpy(t.raw(), v.data(), v.size() * 8);
  return t;
}

class ShapeKernel : public Kernel {
 public:
  explicit ShapeKernel(const Node& n) : start_(n.attr_int("start", 0)), end_(n.attr_int("end", INT64_MAX)) {}
  void compute(KernelContext& ctx) override {
    const Shape& s = ctx.input(0).shape();
    int64_t r = s.rank();
    auto clampi = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + r : v, 0, r); };
    int64_t b = clampi(start_), e = clampi(end_);
    std::vector<int64_t> dims(s.begin() + b, s.begin() + std::max(b, e));
    int64_vector_tensor(ctx, 0, dims);
  }

 private:
  int64_t start_, end_;
};

class SizeKernel : public Kernel {
 public:
  void compute(KernelContext& ctx) override {
    Tensor& t = ctx.allocate_output(0, DType::I64, Shape{});
    t.data<int64_t>()[0] = ctx.input(0).numel();
  }
};

class ReshapeKernel : public Kernel {
 public:
  explicit ReshapeKernel(const Node& n) : allowzero_(n.attr_int("allowzero", 0) != 0) {}
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    std::vector<int64_t> req = ctx.input(1).to_int64_vector();
    Shape out;
    int infer = -1;
    int64_t known = 1;
    for (size_t i = 0; i < req.size(); ++i) {
      int64_t d = req[i];
      if (d == 0 && !allowzero_) {
        SY_CHECK(static_cast<int>(i) < x.rank(), "Reshape: 0 at position " << i << " but input rank is " << x.rank());
        d = x.dim(static_cast<int>(i));
      }
      if (d == -1) {
        SY_CHECK(infer < 0, "Reshape: more than one -1 in " << Shape(req).str());
        infer = static_cast<int>(i);
        d = 1;
      } else {
        SY_CHECK(d >= 0, "Reshape: invalid dimension " << d);
        // A hostile target shape must not overflow the element count.
        SY_CHECK(!__builtin_mul_overflow(known, d, &known), "Reshape: the target shape " << Shape(req).str() << " has more than 2^63 elements");
      }
      out.push_back(d);
    }
    int64_t total = known;
    if (infer >= 0) {
      SY_CHECK(known != 0 && x.numel() % known == 0,
               "Reshape: cannot infer -1 reshaping " << x.shape().str() << " to " << Shape(req).str());
      out[infer] = x.numel() / known;
      total = known * out[infer];
    }
    SY_CHECK(total == x.numel(), "Reshape: " << x.shape().str() << " has " << x.numel()
                                             << " elements, target " << Shape(req).str() << " has " << total);
    ctx.set_output(0, x.reshaped(out));
  }

 private:
  bool allowzero_;
};

// Axes come from an attribute (older opsets) or from input 1 (opset >= 13).
std::vector<int64_t> axes_from(const KernelContext& ctx, const std::optional<std::vector<int64_t>>& attr_axes) {
  if (auto in = optional_ints(ctx, 1)) return *in;
  return attr_axes.value_or(std::vector<int64_t>{});
}

class SqueezeKernel : public Kernel {
 public:
  explicit SqueezeKernel(const Node& n) : attr_axes_(n.attr_ints("axes")) {}
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    std::vector<int64_t> axes = axes_from(ctx, attr_axes_);
    std::vector<bool> drop(static_cast<size_t>(x.rank()), false);
    if (axes.empty()) {
      for (int i = 0; i < x.rank(); ++i) drop[static_cast<size_t>(i)] = x.dim(i) == 1;
    } else {
      for (int64_t a : axes) {
        int ax = normalize_axis(a, x.rank(), "Squeeze");
        SY_CHECK(x.dim(ax) == 1, "Squeeze: dimension " << ax << " of " << x.shape().str() << " is not 1");
        drop[static_cast<size_t>(ax)] = true;
      }
    }
    Shape out;
    for (int i = 0; i < x.rank(); ++i)
      if (!drop[static_cast<size_t>(i)]) out.push_back(x.dim(i));
    ctx.set_output(0, x.reshaped(out));
  }

 private:
  std::optional<std::vector<int64_t>> attr_axes_;
};

class UnsqueezeKernel : public Kernel {
 public:
  explicit UnsqueezeKernel(const Node& n) : attr_axes_(n.attr_ints("axes")) {}
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    std::vector<int64_t> axes = axes_from(ctx, attr_axes_);
    int out_rank = x.rank() + static_cast<int>(axes.size());
    SY_CHECK(out_rank <= Shape::kMaxRank, "Unsqueeze: result rank " << out_rank << " too large");
    std::vector<bool> inserted(static_cast<size_t>(out_rank), false);
    for (int64_t a : axes) {
      int ax = normalize_axis(a, out_rank, "Unsqueeze");
      SY_CHECK(!inserted[static_cast<size_t>(ax)], "Unsqueeze: axis " << a << " repeated");
      inserted[static_cast<size_t>(ax)] = true;
    }
    Shape out;
    int src = 0;
    for (int i = 0; i < out_rank; ++i) out.push_back(inserted[static_cast<size_t>(i)] ? 1 : x.dim(src++));
    ctx.set_output(0, x.reshaped(out));
  }

 private:
  std::optional<std::vector<int64_t>> attr_axes_;
};

class FlattenKernel : public Kernel {
 public:
  explicit FlattenKernel(const Node& n) : axis_(n.attr_int("axis", 1)) {}
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    int ax = axis_ == x.rank() ? x.rank() : normalize_axis(axis_, x.rank(), "Flatten");
    int64_t outer = 1;
    for (int i = 0; i < ax; ++i) outer *= x.dim(i);
    ctx.set_output(0, x.reshaped(Shape{outer, outer == 0 ? 0 : x.numel() / outer}));
  }

 private:
  int64_t axis_;
};

class IdentityKernel : public Kernel {
 public:
  void compute(KernelContext& ctx) override {
    ctx.set_output(0, ctx.input(0));
    // Dropout's optional mask output: all true at inference.
    if (ctx.num_outputs > 1) {
      Tensor& m = ctx.allocate_output(1, DType::Bool, ctx.input(0).shape());
      std::memset(m.raw(), 1, m.bytes());
    }
  }
};

class ExpandKernel : public Kernel {
 public:
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    std::vector<int64_t> req = ctx.input(1).to_int64_vector();
    Shape target(req);
    Broadcast bc({&x.shape(), &target}, "Expand");
    if (bc.out == x.shape()) {  // nothing to expand: a view
      ctx.set_output(0, x);
      return;
    }
    Tensor& out = ctx.allocate_output(0, x.dtype(), bc.out);
    size_t es = dtype_size(x.dtype());
    auto* src = static_cast<const std::byte*>(x.raw());
    auto* dst = static_cast<std::byte*>(out.raw());
    int64_t s = bc.strides[0][static_cast<size_t>(bc.rank - 1)];
    bc.for_each_run([&](int64_t o, int64_t len, const std::array<int64_t, 3>& off) {
      if (s == 1) {
        std::memcpy(dst + static_cast<size_t>(o) * es, src + static_cast<size_t>(off[0]) * es, static_cast<size_t>(len) * es);
      } else {
        for (int64_t i = 0; i < len; ++i)
          std::memcpy(dst + static_cast<size_t>(o + i) * es, src + static_cast<size_t>(off[0]) * es, es);
      }
    });
  }
};

class ConstantOfShapeKernel : public Kernel {
 public:
  explicit ConstantOfShapeKernel(const Node& n) {
    if (const Attribute* a = n.attr("value")) {
      value_ = std::get<Tensor>(*a);
      SY_CHECK(value_.numel() == 1, n.display_name() << ": 'value' must hold one element");
    } else {
      value_ = Tensor::from<float>(Shape{1}, {0.f});
    }
  }
  void compute(KernelContext& ctx) override {
    Shape s(ctx.input(0).to_int64_vector());
    Tensor& out = ctx.allocate_output(0, value_.dtype(), s);
    size_t es = dtype_size(value_.dtype());
    auto* dst = static_cast<std::byte*>(out.raw());
    for (int64_t i = 0; i < s.numel(); ++i) std::memcpy(dst + static_cast<size_t>(i) * es, value_.raw(), es);
  }

 private:
  Tensor value_;
};

class RangeKernel : public Kernel {
 public:
  void compute(KernelContext& ctx) override {
    DType t = ctx.input(0).dtype();
    dispatch_type(t, "Range", [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, bool>) {
        SY_THROW("Range on bool is not defined");
      } else {
        T start = ctx.input(0).data<T>()[0], limit = ctx.input(1).data<T>()[0], delta = ctx.input(2).data<T>()[0];
        SY_CHECK(delta != T(0), "Range: delta is zero");
        double count = std::ceil((static_cast<double>(limit) - static_cast<double>(start)) / static_cast<double>(delta));
        int64_t n = std::max<int64_t>(0, static_cast<int64_t>(count));
        Tensor& out = ctx.allocate_output(0, t, Shape{n});
        T* p = out.data<T>();
        for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(start + static_cast<T>(i) * delta);
      }
    });
  }
};

// Constant nodes are folded at load; this kernel exists so a graph that is
// run without simplification still works.
class ConstantKernel : public Kernel {
 public:
  explicit ConstantKernel(const Node& n) {
    if (const Attribute* a = n.attr("value")) value_ = std::get<Tensor>(*a);
    else if (const Attribute* f = n.attr("value_float")) value_ = Tensor::from<float>(Shape{}, {std::get<float>(*f)});
    else if (const Attribute* i = n.attr("value_int")) value_ = Tensor::from<int64_t>(Shape{}, {std::get<int64_t>(*i)});
    else if (const Attribute* fs = n.attr("value_floats")) {
      auto& v = std::get<std::vector<float>>(*fs);
      value_ = Tensor::from<float>(Shape{static_cast<int64_t>(v.size())}, std::span<const float>(v));
    } else if (const Attribute* is = n.attr("value_ints")) {
      auto& v = std::get<std::vector<int64_t>>(*is);
      value_ = Tensor::from<int64_t>(Shape{static_cast<int64_t>(v.size())}, std::span<const int64_t>(v));
    } else {
      SY_THROW(n.display_name() << ": no supported value attribute (value, value_float(s), value_int(s))");
    }
  }
  void compute(KernelContext& ctx) override { ctx.set_output(0, value_); }

 private:
  Tensor value_;
};

template <typename K>
KernelDef def_of(const std::string& op) {
  KernelDef d;
  d.op_type = op;
  d.create = [](const KernelCreateInfo& ci) -> std::unique_ptr<Kernel> {
    if constexpr (std::is_constructible_v<K, const Node&>) return std::make_unique<K>(ci.node);
    else return std::make_unique<K>();
  };
  return d;
}

template <typename K>
void add(KernelRegistry& r, const std::string& op, std::vector<int> shape_inputs = {}) {
  KernelDef d = def_of<K>(op);
  d.shape_inputs = std::move(shape_inputs);
  r.add(std::move(d));
}

// A view kernel on `device`: the output shares the input's device buffer;
// its shape/axes operand (input 1) is read on the host.
template <typename K>
void add_view(KernelRegistry& r, const std::string& op, Device device) {
  KernelDef d = def_of<K>(op);
  d.device = device;
  d.host_inputs = {1};
  d.follows_input = true;
  r.add(std::move(d));
}

}  // namespace

void register_device_view_kernels(KernelRegistry& r, Device device) {
  add_view<ReshapeKernel>(r, "Reshape", device);
  add_view<SqueezeKernel>(r, "Squeeze", device);
  add_view<UnsqueezeKernel>(r, "Unsqueeze", device);
  add_view<FlattenKernel>(r, "Flatten", device);
  KernelDef id = def_of<IdentityKernel>("Identity");
  id.device = device;
  id.follows_input = true;
  r.add(std::move(id));
}

void register_shape_kernels(KernelRegistry& r) {
  add<ShapeKernel>(r, "Shape", {0});  // never copies a device tensor to read its shape
  add<SizeKernel>(r, "Size", {0});
  add<ReshapeKernel>(r, "Reshape");
  add<SqueezeKernel>(r, "Squeeze");
  add<UnsqueezeKernel>(r, "Unsqueeze");
  add<FlattenKernel>(r, "Flatten");
  add<IdentityKernel>(r, "Identity");
  add<IdentityKernel>(r, "Dropout");
  add<ExpandKernel>(r, "Expand");
  add<ConstantOfShapeKernel>(r, "ConstantOfShape");
  add<RangeKernel>(r, "Range");
  add<ConstantKernel>(r, "Constant");
}

}  // namespace sy
