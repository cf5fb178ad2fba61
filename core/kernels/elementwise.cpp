// Elementwise ONNX ops: arithmetic, comparison and logic with numpy
// broadcasting, unary math, and Where.
#include <cmath>
#include <functional>
#include <limits>
#include <cstring>
#include <type_traits>

#include "kernels/kernel_util.h"
#include "kernels/registry.h"

namespace sy {
namespace {

const std::vector<DType> kNumeric = {DType::F32, DType::F64, DType::I64, DType::I32, DType::I8, DType::U8};
const std::vector<DType> kFloat = {DType::F32, DType::F64};

// Runs `run(out_off, len, in_offsets)` over the broadcast, in parallel when large.
template <typename F>
void broadcast_loop(const Broadcast& b, ThreadPool* threads, F&& run) {
  int64_t total = b.out.numel();
  if (total == 0) return;
  int64_t inner = b.dims[static_cast<size_t>(b.rank - 1)];
  if (total < kParallelElementThreshold || b.rank != 1 || !threads) {
    b.for_each_run(run);
    return;
  }
  // One long coalesced run: split it.
  threads->parallel_for(inner, 4096, [&](int64_t begin, int64_t end) {
    std::array<int64_t, Broadcast::kMaxInputs> off{};
    for (int k = 0; k < b.n; ++k) off[static_cast<size_t>(k)] = b.strides[static_cast<size_t>(k)][0] * begin;
    run(begin, end - begin, off);
  });
}

template <typename TIn, typename TOut, typename Op>
void binary_typed(KernelContext& ctx, Op op) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  Broadcast bc({&a.shape(), &b.shape()}, "binary op");
  Tensor& out = ctx.allocate_output(0, DTypeOf<TOut>::value, bc.out);
  const TIn* pa = a.data<TIn>();
  const TIn* pb = b.data<TIn>();
  TOut* po = out.data<TOut>();
  int64_t sa = bc.strides[0][static_cast<size_t>(bc.rank - 1)];
  int64_t sb = bc.strides[1][static_cast<size_t>(bc.rank - 1)];
  broadcast_loop(bc, ctx.threads, [&](int64_t o, int64_t len, const std::array<int64_t, 3>& off) {
    const TIn* x = pa + off[0];
    const TIn* y = pb + off[1];
    TOut* z = po + o;
    // Specialised inner loops so the common cases vectorise.
    if (sa == 1 && sb == 1) {
      for (int64_t i = 0; i < len; ++i) z[i] = op(x[i], y[i]);
    } else if (sa == 1) {
      const TIn c = *y;
      for (int64_t i = 0; i < len; ++i) z[i] = op(x[i], c);
    } else if (sb == 1) {
      const TIn c = *x;
      for (int64_t i = 0; i < len; ++i) z[i] = op(c, y[i]);
    } else {
      z[0] = op(*x, *y);
      for (int64_t i = 1; i < len; ++i) z[i] = z[0];
    }
  });
}

template <typename T>
T checked_int_div(T x, T y) {
  if constexpr (std::is_integral_v<T>) {
    if (y == 0) throw Error("integer division by zero");
    // ONNX integer Div truncates toward zero like C++.
  }
  return x / y;
}

enum class Arith { Add, Sub, Mul, Div, Max, Min, Mod };

// Integer Add, Sub and Mul wrap around as numpy's and onnxruntime's do; in
// C++ a signed overflow is undefined (the fuzzer found 687865856 squared in
// int32), so integers go through uint64 arithmetic, modular by definition,
// and back (a modular conversion since C++20). Floats are left as they are.
template <typename T, typename Op>
T wrapping(T x, T y, Op op) {
  if constexpr (std::is_integral_v<T>) return static_cast<T>(op(static_cast<uint64_t>(x), static_cast<uint64_t>(y)));
  else return static_cast<T>(op(x, y));
}

class ArithKernel : public Kernel {
 public:
  ArithKernel(Arith op, bool fmod) : op_(op), fmod_(fmod) {}
  void compute(KernelContext& ctx) override {
    if (ctx.num_inputs != 2) return compute_variadic(ctx);
    compute_binary(ctx);
  }

 private:
  // Max, Min (and Sum) take 1..N inputs: a left fold of the binary op, each
  // partial result broadcast against the next input.
  void compute_variadic(KernelContext& ctx) {
    SY_CHECK(ctx.num_inputs >= 1, "needs at least one input");
    if (ctx.num_inputs == 1) {
      const Tensor& x = ctx.input(0);
      Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
      if (x.bytes()) std::memcpy(y.raw(), x.raw(), x.bytes());
      return;
    }
    Tensor acc = ctx.input(0);
    for (int i = 1; i < ctx.num_inputs; ++i) {
      const Tensor* pair[2] = {&acc, &ctx.input(i)};
      Tensor partial;
      KernelContext sub = ctx;
      sub.inputs = pair;
      sub.num_inputs = 2;
      sub.outputs = &partial;
      sub.num_outputs = 1;
      compute_binary(sub);
      acc = partial;
    }
    ctx.set_output(0, acc);
  }

  void compute_binary(KernelContext& ctx) {
    SY_CHECK(ctx.input(0).dtype() == ctx.input(1).dtype(), "operands have different types ("
                                                               << dtype_name(ctx.input(0).dtype()) << " vs "
                                                               << dtype_name(ctx.input(1).dtype()) << ")");
    dispatch_type(ctx.input(0).dtype(), "arithmetic", [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, bool>) {
        SY_THROW("arithmetic on bool tensors is not defined");
      } else {
        switch (op_) {
          case Arith::Add: binary_typed<T, T>(ctx, [](T x, T y) { return wrapping<T>(x, y, std::plus<>()); }); break;
          case Arith::Sub: binary_typed<T, T>(ctx, [](T x, T y) { return wrapping<T>(x, y, std::minus<>()); }); break;
          case Arith::Mul: binary_typed<T, T>(ctx, [](T x, T y) { return wrapping<T>(x, y, std::multiplies<>()); }); break;
          case Arith::Div: binary_typed<T, T>(ctx, [](T x, T y) { return static_cast<T>(checked_int_div(x, y)); }); break;
          case Arith::Max: binary_typed<T, T>(ctx, [](T x, T y) { return x > y ? x : y; }); break;
          case Arith::Min: binary_typed<T, T>(ctx, [](T x, T y) { return x < y ? x : y; }); break;
          case Arith::Mod:
            if constexpr (std::is_floating_point_v<T>) {
              SY_CHECK(fmod_, "Mod on floating point tensors needs fmod=1");
              binary_typed<T, T>(ctx, [](T x, T y) { return static_cast<T>(std::fmod(x, y)); });
            } else if (fmod_) {
              binary_typed<T, T>(ctx, [](T x, T y) { return static_cast<T>(y == 0 ? 0 : x % y); });
            } else {
              // Python-style modulo: the result takes the sign of the divisor.
              binary_typed<T, T>(ctx, [](T x, T y) {
                if (y == 0) return T(0);
                T r = static_cast<T>(x % y);
                return static_cast<T>((r != 0 && ((r < 0) != (y < 0))) ? r + y : r);
              });
            }
            break;
        }
      }
    });
  }

  Arith op_;
  bool fmod_;
};

// Gelu (opset 20): exact (erf) or the tanh approximation.
class GeluKernel : public Kernel {
 public:
  explicit GeluKernel(const Node& n) {
    std::string a = n.attr_string("approximate", "none");
    SY_CHECK(a == "none" || a == "tanh", "Gelu: unknown approximate='" << a << "'");
    tanh_ = a == "tanh";
  }
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    SY_CHECK(x.dtype() == DType::F32, "Gelu supports float32, got " << dtype_name(x.dtype()));
    Tensor& y = ctx.allocate_output(0, DType::F32, x.shape());
    const float* p = x.data<float>();
    float* o = y.data<float>();
    const int64_t n = x.numel();
    if (tanh_) {
      const float k = std::sqrt(2.0f / 3.14159265358979323846f);
      for (int64_t i = 0; i < n; ++i) o[i] = 0.5f * p[i] * (1.0f + std::tanh(k * (p[i] + 0.044715f * p[i] * p[i] * p[i])));
    } else {
      for (int64_t i = 0; i < n; ++i) o[i] = 0.5f * p[i] * (1.0f + std::erf(p[i] * 0.70710678118654752f));
    }
  }

 private:
  bool tanh_ = false;
};

// IsNaN, and IsInf with its detect_negative / detect_positive attributes.
class FloatClassKernel : public Kernel {
 public:
  FloatClassKernel(bool nan, bool neg_inf, bool pos_inf) : nan_(nan), neg_(neg_inf), pos_(pos_inf) {}
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.allocate_output(0, DType::Bool, x.shape());
    bool* out = y.data<bool>();
    auto run = [&](auto* p) {
      for (int64_t i = 0, n = x.numel(); i < n; ++i) {
        auto v = p[i];
        out[i] = nan_ ? std::isnan(v) : (std::isinf(v) && ((v > 0 && pos_) || (v < 0 && neg_)));
      }
    };
    if (x.dtype() == DType::F32) run(x.data<float>());
    else if (x.dtype() == DType::F64) run(x.data<double>());
    else SY_THROW("expected a float tensor, got " << dtype_name(x.dtype()));
  }

 private:
  bool nan_, neg_, pos_;
};

// Pow's exponent may have another type than its base (ONNX allows it).
class PowKernel : public Kernel {
 public:
  void compute(KernelContext& ctx) override {
    const Tensor& base = ctx.input(0);
    const Tensor& ex = ctx.input(1);
    if (base.dtype() == DType::F32 && ex.dtype() == DType::F32 && ex.numel() == 1 && ex.data<float>()[0] == 2.0f) {
      // x^2 is RMSNorm's hot path: avoid std::pow.
      Tensor& out = ctx.allocate_output(0, DType::F32, base.shape());
      const float* x = base.data<float>();
      float* y = out.data<float>();
      for (int64_t i = 0, n = base.numel(); i < n; ++i) y[i] = x[i] * x[i];
      return;
    }
    Tensor exc = ex;
    if (ex.dtype() != base.dtype()) {
      // Convert the exponent to the base type first.
      exc = Tensor::empty(base.dtype(), ex.shape());
      dispatch_type(ex.dtype(), "Pow exponent", [&](auto etag) {
        using E = typename decltype(etag)::type;
        dispatch_type(base.dtype(), "Pow", [&](auto btag) {
          using B = typename decltype(btag)::type;
          for (int64_t i = 0; i < ex.numel(); ++i) exc.data<B>()[i] = static_cast<B>(ex.data<E>()[i]);
        });
      });
    }
    const Tensor* ins[2] = {&base, &exc};
    KernelContext sub = ctx;
    sub.inputs = ins;
    dispatch_type(base.dtype(), "Pow", [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, bool>) {
        SY_THROW("Pow on bool tensors is not defined");
      } else {
        binary_typed<T, T>(sub, [](T x, T y) { return static_cast<T>(std::pow(static_cast<double>(x), static_cast<double>(y))); });
      }
    });
  }
};

enum class Cmp { Eq, Lt, Gt, Le, Ge };

class CompareKernel : public Kernel {
 public:
  explicit CompareKernel(Cmp op) : op_(op) {}
  void compute(KernelContext& ctx) override {
    SY_CHECK(ctx.input(0).dtype() == ctx.input(1).dtype(), "operands have different types");
    dispatch_type(ctx.input(0).dtype(), "comparison", [&](auto tag) {
      using T = typename decltype(tag)::type;
      switch (op_) {
        case Cmp::Eq: binary_typed<T, bool>(ctx, [](T x, T y) { return x == y; }); break;
        case Cmp::Lt: binary_typed<T, bool>(ctx, [](T x, T y) { return x < y; }); break;
        case Cmp::Gt: binary_typed<T, bool>(ctx, [](T x, T y) { return x > y; }); break;
        case Cmp::Le: binary_typed<T, bool>(ctx, [](T x, T y) { return x <= y; }); break;
        case Cmp::Ge: binary_typed<T, bool>(ctx, [](T x, T y) { return x >= y; }); break;
      }
    });
  }

 private:
  Cmp op_;
};

enum class Logic { And, Or, Xor };

class LogicKernel : public Kernel {
 public:
  explicit LogicKernel(Logic op) : op_(op) {}
  void compute(KernelContext& ctx) override {
    SY_CHECK(ctx.input(0).dtype() == DType::Bool && ctx.input(1).dtype() == DType::Bool, "logical ops need bool inputs");
    switch (op_) {
      case Logic::And: binary_typed<bool, bool>(ctx, [](bool x, bool y) { return x && y; }); break;
      case Logic::Or: binary_typed<bool, bool>(ctx, [](bool x, bool y) { return x || y; }); break;
      case Logic::Xor: binary_typed<bool, bool>(ctx, [](bool x, bool y) { return x != y; }); break;
    }
  }

 private:
  Logic op_;
};

// Unary ops: one functor per (op, type); float ops compute in float.
template <typename T, typename Op>
void unary_typed(KernelContext& ctx, DType out_type, Op op) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.allocate_output(0, out_type, x.shape());
  const T* px = x.data<T>();
  auto* py = y.data<T>();
  int64_t n = x.numel();
  auto run = [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) py[i] = op(px[i]);
  };
  if (n >= kParallelElementThreshold && ctx.threads) ctx.threads->parallel_for(n, 8192, run);
  else run(0, n);
}

enum class Unary { Sqrt, Reciprocal, Exp, Log, Cos, Sin, Tanh, Erf, Sigmoid, Relu, Floor, Ceil, Round, Neg, Abs, Not, Softplus, Sign };

class UnaryKernel : public Kernel {
 public:
  explicit UnaryKernel(Unary op) : op_(op) {}
  void compute(KernelContext& ctx) override {
    DType t = ctx.input(0).dtype();
    if (op_ == Unary::Not) {
      SY_CHECK(t == DType::Bool, "Not needs a bool input, got " << dtype_name(t));
      unary_typed<bool>(ctx, t, [](bool v) { return !v; });
      return;
    }
    if (op_ == Unary::Neg || op_ == Unary::Abs || op_ == Unary::Sign) {
      dispatch_type(t, "Neg/Abs", [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (std::is_same_v<T, bool> || std::is_unsigned_v<T>) {
          SY_THROW("Neg/Abs/Sign need a signed type, got " << dtype_name(t));
        } else if (op_ == Unary::Neg) {
          unary_typed<T>(ctx, t, [](T v) { return static_cast<T>(-v); });
        } else if (op_ == Unary::Abs) {
          unary_typed<T>(ctx, t, [](T v) { return static_cast<T>(v < 0 ? -v : v); });
        } else {
          unary_typed<T>(ctx, t, [](T v) { return static_cast<T>((v > 0) - (v < 0)); });
        }
      });
      return;
    }
    if (t == DType::F64) return run_float<double>(ctx);
    SY_CHECK(t == DType::F32, "expected a float tensor, got " << dtype_name(t));
    run_float<float>(ctx);
  }

 private:
  template <typename T>
  void run_float(KernelContext& ctx) {
    DType t = DTypeOf<T>::value;
    switch (op_) {
      case Unary::Sqrt: unary_typed<T>(ctx, t, [](T v) { return std::sqrt(v); }); break;
      case Unary::Reciprocal: unary_typed<T>(ctx, t, [](T v) { return T(1) / v; }); break;
      case Unary::Exp: unary_typed<T>(ctx, t, [](T v) { return std::exp(v); }); break;
      case Unary::Log: unary_typed<T>(ctx, t, [](T v) { return std::log(v); }); break;
      case Unary::Cos: unary_typed<T>(ctx, t, [](T v) { return std::cos(v); }); break;
      case Unary::Sin: unary_typed<T>(ctx, t, [](T v) { return std::sin(v); }); break;
      case Unary::Tanh: unary_typed<T>(ctx, t, [](T v) { return std::tanh(v); }); break;
      case Unary::Erf: unary_typed<T>(ctx, t, [](T v) { return std::erf(v); }); break;
      case Unary::Sigmoid: unary_typed<T>(ctx, t, [](T v) { return T(1) / (T(1) + std::exp(-v)); }); break;
      case Unary::Relu: unary_typed<T>(ctx, t, [](T v) { return v > T(0) ? v : T(0); }); break;
      case Unary::Floor: unary_typed<T>(ctx, t, [](T v) { return std::floor(v); }); break;
      case Unary::Ceil: unary_typed<T>(ctx, t, [](T v) { return std::ceil(v); }); break;
      case Unary::Round: unary_typed<T>(ctx, t, [](T v) { return std::nearbyint(v); }); break;  // half to even
      case Unary::Softplus: unary_typed<T>(ctx, t, [](T v) { return std::log1p(std::exp(v)); }); break;
      default: SY_THROW("internal: unary op not handled");
    }
  }
  Unary op_;
};

class WhereKernel : public Kernel {
 public:
  void compute(KernelContext& ctx) override {
    const Tensor& c = ctx.input(0);
    const Tensor& x = ctx.input(1);
    const Tensor& y = ctx.input(2);
    SY_CHECK(c.dtype() == DType::Bool, "Where: condition must be bool, got " << dtype_name(c.dtype()));
    SY_CHECK(x.dtype() == y.dtype(), "Where: X and Y have different types");
    Broadcast bc({&c.shape(), &x.shape(), &y.shape()}, "Where");
    Tensor& out = ctx.allocate_output(0, x.dtype(), bc.out);
    size_t es = dtype_size(x.dtype());
    const bool* pc = c.data<bool>();
    auto* px = static_cast<const std::byte*>(x.raw());
    auto* py = static_cast<const std::byte*>(y.raw());
    auto* po = static_cast<std::byte*>(out.raw());
    size_t last = static_cast<size_t>(bc.rank - 1);
    int64_t sc = bc.strides[0][last], sx = bc.strides[1][last], sy = bc.strides[2][last];
    bc.for_each_run([&](int64_t o, int64_t len, const std::array<int64_t, 3>& off) {
      for (int64_t i = 0; i < len; ++i) {
        bool cond = pc[off[0] + i * sc];
        const std::byte* src = cond ? px + static_cast<size_t>(off[1] + i * sx) * es : py + static_cast<size_t>(off[2] + i * sy) * es;
        std::memcpy(po + static_cast<size_t>(o + i) * es, src, es);
      }
    });
  }
};

template <typename K, typename... Args>
KernelFactory make(Args... args) {
  return [=](const KernelCreateInfo&) -> std::unique_ptr<Kernel> { return std::make_unique<K>(args...); };
}

void add(KernelRegistry& r, const std::string& op, std::vector<DType> types, KernelFactory f) {
  KernelDef d;
  d.op_type = op;
  d.dtypes = std::move(types);
  d.create = std::move(f);
  r.add(std::move(d));
}

}  // namespace

// Clip: bounds from inputs 1 and 2 (opset 11 on, each optional) or the
// min/max attributes (before). NaN passes through, as in ONNX Runtime.
class ClipKernel : public Kernel {
 public:
  ClipKernel(const Node& n, int64_t opset)
      : attr_min_(opset < 11 ? n.attr_float("min", -std::numeric_limits<float>::max()) : -std::numeric_limits<float>::infinity()),
        attr_max_(opset < 11 ? n.attr_float("max", std::numeric_limits<float>::max()) : std::numeric_limits<float>::infinity()) {}
  void compute(KernelContext& ctx) override {
    const DType t = ctx.input(0).dtype();
    dispatch_type(t, "Clip", [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, bool>) {
        SY_THROW("Clip: bool input");
      } else {
        auto bound = [&](int i, float fallback, T limit) {
          if (!ctx.has_input(i)) return std::isinf(fallback) ? limit : static_cast<T>(fallback);
          const Tensor& b = ctx.input(i);
          SY_CHECK(b.numel() == 1 && b.dtype() == t, "Clip: input " << i << " must be a scalar of the input's type");
          return b.data<T>()[0];
        };
        const T lo = bound(1, attr_min_, std::numeric_limits<T>::lowest()), hi = bound(2, attr_max_, std::numeric_limits<T>::max());
        unary_typed<T>(ctx, t, [lo, hi](T v) { return v < lo ? lo : (hi < v ? hi : v); });
      }
    });
  }

 private:
  float attr_min_, attr_max_;
};

void register_elementwise_kernels(KernelRegistry& r) {
  add(r, "Add", kNumeric, make<ArithKernel>(Arith::Add, false));
  add(r, "Sub", kNumeric, make<ArithKernel>(Arith::Sub, false));
  add(r, "Mul", kNumeric, make<ArithKernel>(Arith::Mul, false));
  add(r, "Div", kNumeric, make<ArithKernel>(Arith::Div, false));
  add(r, "Max", kNumeric, make<ArithKernel>(Arith::Max, false));
  add(r, "Min", kNumeric, make<ArithKernel>(Arith::Min, false));
  add(r, "Sum", kNumeric, make<ArithKernel>(Arith::Add, false));
  add(r, "Gelu", {DType::F32}, [](const KernelCreateInfo& ci) -> std::unique_ptr<Kernel> { return std::make_unique<GeluKernel>(ci.node); });
  add(r, "IsNaN", kFloat, make<FloatClassKernel>(true, false, false));
  add(r, "IsInf", kFloat, [](const KernelCreateInfo& ci) -> std::unique_ptr<Kernel> {
    return std::make_unique<FloatClassKernel>(false, ci.node.attr_int("detect_negative", 1) != 0,
                                              ci.node.attr_int("detect_positive", 1) != 0);
  });
  add(r, "Mod", kNumeric, [](const KernelCreateInfo& ci) -> std::unique_ptr<Kernel> {
    return std::make_unique<ArithKernel>(Arith::Mod, ci.node.attr_int("fmod", 0) != 0);
  });
  add(r, "Pow", kNumeric, make<PowKernel>());
  add(r, "Clip", kNumeric, [](const KernelCreateInfo& ci) -> std::unique_ptr<Kernel> { return std::make_unique<ClipKernel>(ci.node, ci.opset); });
  std::vector<DType> cmp = kNumeric;
  cmp.push_back(DType::Bool);
  add(r, "Equal", cmp, make<CompareKernel>(Cmp::Eq));
  add(r, "Less", kNumeric, make<CompareKernel>(Cmp::Lt));
  add(r, "Greater", kNumeric, make<CompareKernel>(Cmp::Gt));
  add(r, "LessOrEqual", kNumeric, make<CompareKernel>(Cmp::Le));
  add(r, "GreaterOrEqual", kNumeric, make<CompareKernel>(Cmp::Ge));
  add(r, "And", {DType::Bool}, make<LogicKernel>(Logic::And));
  add(r, "Or", {DType::Bool}, make<LogicKernel>(Logic::Or));
  add(r, "Xor", {DType::Bool}, make<LogicKernel>(Logic::Xor));
  add(r, "Not", {DType::Bool}, make<UnaryKernel>(Unary::Not));
  const std::pair<const char*, Unary> float_ops[] = {
      {"Sqrt", Unary::Sqrt}, {"Reciprocal", Unary::Reciprocal}, {"Exp", Unary::Exp}, {"Log", Unary::Log},
      {"Cos", Unary::Cos},   {"Sin", Unary::Sin},               {"Tanh", Unary::Tanh}, {"Erf", Unary::Erf},
      {"Sigmoid", Unary::Sigmoid}, {"Relu", Unary::Relu},       {"Floor", Unary::Floor}, {"Ceil", Unary::Ceil},
      {"Round", Unary::Round}, {"Softplus", Unary::Softplus}};
  for (const auto& [name, op] : float_ops) add(r, name, kFloat, make<UnaryKernel>(op));
  std::vector<DType> signed_types = {DType::F32, DType::F64, DType::I64, DType::I32, DType::I8};
  add(r, "Neg", signed_types, make<UnaryKernel>(Unary::Neg));
  add(r, "Abs", signed_types, make<UnaryKernel>(Unary::Abs));
  add(r, "Sign", signed_types, make<UnaryKernel>(Unary::Sign));
  KernelDef where;
  where.op_type = "Where";
  where.type_input = 1;
  where.create = make<WhereKernel>();
  r.add(std::move(where));
}

}  // namespace sy
