// Data movement ops: Concat, Slice, Split, Transpose, Gather, Tile, Cast,
// Trilu, CumSum. All are type-agnostic byte movers except Cast and CumSum.
#include <cmath>
#include <numeric>

#include "base/half.h"
#include "kernels/kernel_util.h"
#include "kernels/registry.h"

namespace sy {
namespace {

class ConcatKernel : public Kernel {
 public:
  explicit ConcatKernel(const Node& n) : axis_(n.attr_int("axis", 0)) {}
  void compute(KernelContext& ctx) override {
    const Tensor& first = ctx.input(0);
    int rank = first.rank();
    int ax = normalize_axis(axis_, rank, "Concat");
    Shape out = first.shape();
    out[ax] = 0;
    for (int i = 0; i < ctx.num_inputs; ++i) {
      const Tensor& t = ctx.input(i);
      SY_CHECK(t.dtype() == first.dtype(), "Concat: input " << i << " is " << dtype_name(t.dtype()) << ", input 0 is "
                                                            << dtype_name(first.dtype()));
      SY_CHECK(t.rank() == rank, "Concat: input " << i << " has rank " << t.rank() << ", expected " << rank);
      for (int d = 0; d < rank; ++d)
        SY_CHECK(d == ax || t.dim(d) == first.dim(d),
                 "Concat: input " << i << " shape " << t.shape().str() << " differs from " << first.shape().str()
                                  << " outside axis " << ax);
      out[ax] += t.dim(ax);
    }
    Tensor& y = ctx.allocate_output(0, first.dtype(), out);
    size_t es = dtype_size(first.dtype());
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < ax; ++d) outer *= out[d];
    for (int d = ax + 1; d < rank; ++d) inner *= out[d];
    auto* dst = static_cast<std::byte*>(y.raw());
    size_t row = static_cast<size_t>(out[ax] * inner) * es;
    size_t col = 0;
    for (int i = 0; i < ctx.num_inputs; ++i) {
      const Tensor& t = ctx.input(i);
      size_t chunk = static_cast<size_t>(t.dim(ax) * inner) * es;
      if (chunk == 0) continue;
      auto* src = static_cast<const std::byte*>(t.raw());
      for (int64_t o = 0; o < outer; ++o) std::memcpy(dst + static_cast<size_t>(o) * row + col, src + static_cast<size_t>(o) * chunk, chunk);
      col += chunk;
    }
  }

 private:
  int64_t axis_;
};

// Copies a strided region: out[i...] = in[start + i*step] over all dims.
void strided_copy(const Tensor& x, Tensor& y, const Shape& start, const Shape& step) {
  size_t es = dtype_size(x.dtype());
  auto in_st = contiguous_strides(x.shape());
  int rank = y.rank();
  int64_t n = y.numel();
  if (n == 0) return;
  auto* src = static_cast<const std::byte*>(x.raw());
  auto* dst = static_cast<std::byte*>(y.raw());
  int64_t base = 0;
  for (int d = 0; d < rank; ++d) base += start[d] * in_st[static_cast<size_t>(d)];
  if (rank == 0) {
    std::memcpy(dst, src + static_cast<size_t>(base) * es, es);
    return;
  }
  int last = rank - 1;
  int64_t inner = y.dim(last), inner_step = step[last] * in_st[static_cast<size_t>(last)];
  std::array<int64_t, Shape::kMaxRank> idx{};
  int64_t off = base;
  for (int64_t o = 0; o < n; o += inner) {
    if (inner_step == 1) {
      std::memcpy(dst + static_cast<size_t>(o) * es, src + static_cast<size_t>(off) * es, static_cast<size_t>(inner) * es);
    } else {
      for (int64_t i = 0; i < inner; ++i)
        std::memcpy(dst + static_cast<size_t>(o + i) * es, src + static_cast<size_t>(off + i * inner_step) * es, es);
    }
    for (int d = last - 1; d >= 0; --d) {
      size_t du = static_cast<size_t>(d);
      ++idx[du];
      off += step[d] * in_st[du];
      if (idx[du] < y.dim(d)) break;
      off -= step[d] * in_st[du] * y.dim(d);
      idx[du] = 0;
    }
  }
}

}  // namespace

std::vector<int64_t> resolve_split(const KernelContext& ctx, int64_t dim, const std::optional<std::vector<int64_t>>& attr_split,
                                   int64_t num_outputs_attr) {
  std::vector<int64_t> split;
  if (auto s = optional_ints(ctx, 1)) split = *s;
  else if (attr_split) split = *attr_split;
  if (split.empty()) {
    const int64_t n = num_outputs_attr > 0 ? num_outputs_attr : ctx.num_outputs;
    SY_CHECK(n > 0, "Split: no outputs");
    const int64_t chunk = (dim + n - 1) / n;
    for (int64_t i = 0; i < n; ++i) split.push_back(std::max<int64_t>(0, std::min(chunk, dim - i * chunk)));
  }
  SY_CHECK(static_cast<int>(split.size()) == ctx.num_outputs, "Split: " << split.size() << " parts for " << ctx.num_outputs << " outputs");
  SY_CHECK(std::accumulate(split.begin(), split.end(), int64_t{0}) == dim, "Split: parts do not add up to dimension " << dim);
  return split;
}

void resolve_slice(const Shape& in, const std::vector<int64_t>& starts_in, const std::vector<int64_t>& ends,
                   const std::vector<int64_t>& axes_in, const std::vector<int64_t>& steps_in, Shape& start, Shape& step, Shape& out) {
  std::vector<int64_t> starts = starts_in, axes = axes_in, steps = steps_in;
  const Shape& xs = in;
  SY_CHECK(starts.size() == ends.size(), "Slice: starts and ends differ in length");
  if (axes.empty()) {
    axes.resize(starts.size());
    std::iota(axes.begin(), axes.end(), 0);
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  SY_CHECK(axes.size() == starts.size() && steps.size() == starts.size(), "Slice: starts/ends/axes/steps lengths differ");
  int rank = xs.rank();
  out = xs;
  start.resize(rank);
  step.resize(rank);
  for (int d = 0; d < rank; ++d) start[d] = 0, step[d] = 1;
  for (size_t i = 0; i < axes.size(); ++i) {
    int ax = normalize_axis(axes[i], rank, "Slice");
    int64_t dim = xs[ax], st = steps[i];
    SY_CHECK(st != 0, "Slice: step is zero");
    int64_t b = starts[i], e = ends[i];
    if (b < 0) b += dim;
    if (e < 0) e += dim;
    if (st > 0) {
      b = std::clamp<int64_t>(b, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      out[ax] = e > b ? (e - b + st - 1) / st : 0;
    } else {
      b = std::clamp<int64_t>(b, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      out[ax] = b > e ? (b - e + (-st) - 1) / (-st) : 0;
    }
    start[ax] = b;
    step[ax] = st;
  }
}

namespace {

class SliceKernel : public Kernel {
 public:
  explicit SliceKernel(const Node& n, int64_t opset) {
    if (opset < 10) {
      attr_starts_ = n.attr_ints("starts");
      attr_ends_ = n.attr_ints("ends");
      attr_axes_ = n.attr_ints("axes");
    }
  }
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    std::vector<int64_t> starts, ends, axes, steps;
    if (attr_starts_) {
      starts = *attr_starts_;
      ends = attr_ends_.value_or(std::vector<int64_t>{});
      axes = attr_axes_.value_or(std::vector<int64_t>{});
    } else {
      starts = ctx.input(1).to_int64_vector();
      ends = ctx.input(2).to_int64_vector();
      if (auto a = optional_ints(ctx, 3)) axes = *a;
      if (auto s = optional_ints(ctx, 4)) steps = *s;
    }
    Shape start, step, out;
    resolve_slice(x.shape(), starts, ends, axes, steps, start, step, out);
    Tensor& y = ctx.allocate_output(0, x.dtype(), out);
    strided_copy(x, y, start, step);
  }

 private:
  std::optional<std::vector<int64_t>> attr_starts_, attr_ends_, attr_axes_;
};

class SplitKernel : public Kernel {
 public:
  SplitKernel(const Node& n, int64_t opset) : axis_(n.attr_int("axis", 0)), num_outputs_attr_(n.attr_int("num_outputs", 0)) {
    if (opset < 13) attr_split_ = n.attr_ints("split");
  }
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    int ax = normalize_axis(axis_, x.rank(), "Split");
    const std::vector<int64_t> split = resolve_split(ctx, x.dim(ax), attr_split_, num_outputs_attr_);
    // Nothing outside the split axis varies (a decode step's [1, 1, N] split
    // of fused projections): each part is a contiguous range, a view.
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < x.rank(); ++d) {
      if (d < ax) outer *= x.dim(d);
      if (d > ax) inner *= x.dim(d);
    }
    if (outer == 1) {
      int64_t first = 0;
      for (int i = 0; i < ctx.num_outputs; ++i) {
        Shape s = x.shape();
        s[ax] = split[static_cast<size_t>(i)];
        ctx.set_output(i, x.subview(first, s));
        first += s[ax] * inner;
      }
      return;
    }
    Shape start, step;
    start.resize(x.rank());
    step.resize(x.rank());
    for (int d = 0; d < x.rank(); ++d) start[d] = 0, step[d] = 1;
    for (int i = 0; i < ctx.num_outputs; ++i) {
      Shape s = x.shape();
      s[ax] = split[static_cast<size_t>(i)];
      Tensor& y = ctx.allocate_output(i, x.dtype(), s);
      strided_copy(x, y, start, step);
      start[ax] += s[ax];
    }
  }

 private:
  int64_t axis_, num_outputs_attr_;
  std::optional<std::vector<int64_t>> attr_split_;
};

class TransposeKernel : public Kernel {
 public:
  explicit TransposeKernel(const Node& n) : perm_(n.attr_ints("perm")) {}
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    int rank = x.rank();
    std::vector<int64_t> perm = perm_.value_or(std::vector<int64_t>{});
    if (perm.empty())
      for (int i = rank - 1; i >= 0; --i) perm.push_back(i);
    SY_CHECK(static_cast<int>(perm.size()) == rank, "Transpose: perm has " << perm.size() << " entries for rank " << rank);
    std::vector<bool> seen(static_cast<size_t>(rank), false);
    Shape out;
    auto in_st = contiguous_strides(x.shape());
    std::array<int64_t, Shape::kMaxRank> st{};
    // A permutation that only moves size-1 dims keeps the bytes in order
    // (a decode step's [B, 1, H, D] -> [B, H, 1, D]): a view, as Reshape.
    int last_moved = -1;
    bool in_order = true;
    for (int i = 0; i < rank; ++i) {
      int p = normalize_axis(perm[static_cast<size_t>(i)], rank, "Transpose");
      SY_CHECK(!seen[static_cast<size_t>(p)], "Transpose: perm repeats axis " << p);
      seen[static_cast<size_t>(p)] = true;
      out.push_back(x.dim(p));
      st[static_cast<size_t>(i)] = in_st[static_cast<size_t>(p)];
      if (x.dim(p) != 1) {
        in_order = in_order && p > last_moved;
        last_moved = p;
      }
    }
    if (in_order) {
      ctx.set_output(0, x.reshaped(out));
      return;
    }
    Tensor& y = ctx.allocate_output(0, x.dtype(), out);
    int64_t n = y.numel();
    if (n == 0) return;
    size_t es = dtype_size(x.dtype());
    auto* src = static_cast<const std::byte*>(x.raw());
    auto* dst = static_cast<std::byte*>(y.raw());
    std::array<int64_t, Shape::kMaxRank> idx{};
    int64_t off = 0;
    int last = rank - 1;
    int64_t inner = rank ? out[last] : 1, inner_st = rank ? st[static_cast<size_t>(last)] : 0;
    for (int64_t o = 0; o < n; o += inner) {
      if (inner_st == 1) {
        std::memcpy(dst + static_cast<size_t>(o) * es, src + static_cast<size_t>(off) * es, static_cast<size_t>(inner) * es);
      } else if (es == 4) {
        auto* d4 = reinterpret_cast<uint32_t*>(dst) + o;
        auto* s4 = reinterpret_cast<const uint32_t*>(src) + off;
        for (int64_t i = 0; i < inner; ++i) d4[i] = s4[i * inner_st];
      } else {
        for (int64_t i = 0; i < inner; ++i)
          std::memcpy(dst + static_cast<size_t>(o + i) * es, src + static_cast<size_t>(off + i * inner_st) * es, es);
      }
      for (int d = last - 1; d >= 0; --d) {
        size_t du = static_cast<size_t>(d);
        ++idx[du];
        off += st[du];
        if (idx[du] < out[d]) break;
        off -= st[du] * out[d];
        idx[du] = 0;
      }
    }
  }

 private:
  std::optional<std::vector<int64_t>> perm_;
};

class GatherKernel : public Kernel {
 public:
  explicit GatherKernel(const Node& n) : axis_(n.attr_int("axis", 0)) {}
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& idx = ctx.input(1);
    int ax = normalize_axis(axis_, x.rank(), "Gather");
    std::vector<int64_t> ids = idx.to_int64_vector();
    Shape out;
    for (int d = 0; d < ax; ++d) out.push_back(x.dim(d));
    for (int64_t d : idx.shape()) out.push_back(d);
    for (int d = ax + 1; d < x.rank(); ++d) out.push_back(x.dim(d));
    Tensor& y = ctx.allocate_output(0, x.dtype(), out);
    int64_t outer = 1, inner = 1, dim = x.dim(ax);
    for (int d = 0; d < ax; ++d) outer *= x.dim(d);
    for (int d = ax + 1; d < x.rank(); ++d) inner *= x.dim(d);
    size_t es = dtype_size(x.dtype());
    size_t chunk = static_cast<size_t>(inner) * es;
    auto* src = static_cast<const std::byte*>(x.raw());
    auto* dst = static_cast<std::byte*>(y.raw());
    for (int64_t& i : ids) {
      SY_CHECK(i >= -dim && i < dim, "Gather: index " << i << " is out of range for dimension of size " << dim);
      if (i < 0) i += dim;
    }
    for (int64_t o = 0; o < outer; ++o)
      for (size_t j = 0; j < ids.size(); ++j)
        std::memcpy(dst + (static_cast<size_t>(o) * ids.size() + j) * chunk,
                    src + static_cast<size_t>(o * dim + ids[j]) * chunk, chunk);
  }

 private:
  int64_t axis_;
};

class TileKernel : public Kernel {
 public:
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    std::vector<int64_t> reps = ctx.input(1).to_int64_vector();
    SY_CHECK(static_cast<int>(reps.size()) == x.rank(), "Tile: repeats has " << reps.size() << " entries for rank " << x.rank());
    Shape out = x.shape();
    bool identity = true;
    for (int d = 0; d < x.rank(); ++d) {
      SY_CHECK(reps[static_cast<size_t>(d)] >= 0, "Tile: negative repeat");
      out[d] *= reps[static_cast<size_t>(d)];
      identity = identity && reps[static_cast<size_t>(d)] == 1;
    }
    if (identity) {
      ctx.set_output(0, x);
      return;
    }
    // One pass per repeated dim, innermost first; each pass copies whole
    // contiguous blocks, so the work is memcpy of the output size per pass.
    size_t es = dtype_size(x.dtype());
    Tensor cur = x;
    Shape cur_shape = x.shape();
    for (int d = x.rank() - 1; d >= 0; --d) {
      int64_t r = reps[static_cast<size_t>(d)];
      if (r == 1) continue;
      Shape next_shape = cur_shape;
      next_shape[d] *= r;
      Tensor next = d == first_repeated(reps) ? ctx.allocate_output(0, x.dtype(), out) : ctx.pool->allocate(x.dtype(), next_shape);
      int64_t outer = 1, block = 1;
      for (int k = 0; k < d; ++k) outer *= cur_shape[k];
      for (int k = d; k < x.rank(); ++k) block *= cur_shape[k];
      size_t block_bytes = static_cast<size_t>(block) * es;
      auto* src = static_cast<const std::byte*>(cur.raw());
      auto* dst = static_cast<std::byte*>(next.raw());
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t k = 0; k < r; ++k)
          if (block_bytes) std::memcpy(dst + (static_cast<size_t>(o * r + k)) * block_bytes, src + static_cast<size_t>(o) * block_bytes, block_bytes);
      cur = next;
      cur_shape = next_shape;
    }
  }

 private:
  static int first_repeated(const std::vector<int64_t>& reps) {
    for (size_t i = 0; i < reps.size(); ++i)
      if (reps[i] != 1) return static_cast<int>(i);
    return -1;
  }
};

class CastKernel : public Kernel {
 public:
  explicit CastKernel(const Node& n) : to_(static_cast<DType>(n.attr_int("to", 0))) {
    SY_CHECK(dtype_size(to_) > 0, n.display_name() << ": cannot cast to " << dtype_name(to_));
  }
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() == to_) {
      ctx.set_output(0, x);
      return;
    }
    Tensor& y = ctx.allocate_output(0, to_, x.shape());
    int64_t n = x.numel();
    if (x.dtype() == DType::F16 || to_ == DType::F16) {
      // Through float32.
      Tensor mid = x.dtype() == DType::F16 ? Tensor::empty(DType::F32, x.shape()) : x;
      if (x.dtype() == DType::F16)
        for (int64_t i = 0; i < n; ++i) mid.data<float>()[i] = half_to_float(x.data<uint16_t>()[i]);
      if (to_ == DType::F16) {
        SY_CHECK(mid.dtype() == DType::F32 || mid.dtype() == DType::F64 || mid.dtype() == DType::I64 || mid.dtype() == DType::I32,
                 "Cast to float16 from " << dtype_name(mid.dtype()) << " is not supported");
        dispatch_type(mid.dtype(), "Cast", [&](auto tag) {
          using S = typename decltype(tag)::type;
          for (int64_t i = 0; i < n; ++i) y.data<uint16_t>()[i] = float_to_half(static_cast<float>(mid.data<S>()[i]));
        });
      } else {
        convert(mid, y, n);
      }
      return;
    }
    convert(x, y, n);
  }

 private:
  static void convert(const Tensor& x, Tensor& y, int64_t n) {
    dispatch_type(x.dtype(), "Cast source", [&](auto stag) {
      using S = typename decltype(stag)::type;
      dispatch_type(y.dtype(), "Cast target", [&](auto dtag) {
        using D = typename decltype(dtag)::type;
        const S* s = x.data<S>();
        D* d = y.data<D>();
        for (int64_t i = 0; i < n; ++i) {
          if constexpr (std::is_same_v<D, bool>) d[i] = s[i] != S(0);
          else if constexpr (std::is_floating_point_v<S> && std::is_integral_v<D>)
            d[i] = std::isfinite(s[i]) ? static_cast<D>(s[i]) : D(0);  // NaN/inf: undefined in C++, 0 here
          else d[i] = static_cast<D>(s[i]);
        }
      });
    });
  }
  DType to_;
};

class TriluKernel : public Kernel {
 public:
  explicit TriluKernel(const Node& n) : upper_(n.attr_int("upper", 1) != 0) {}
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    SY_CHECK(x.rank() >= 2, "Trilu: input rank must be >= 2");
    int64_t k = 0;
    if (ctx.has_input(1)) k = ctx.input(1).to_int64_vector().at(0);
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    int64_t R = x.dim(x.rank() - 2), C = x.dim(x.rank() - 1), mats = R * C == 0 ? 0 : x.numel() / (R * C);
    size_t es = dtype_size(x.dtype());
    auto* src = static_cast<const std::byte*>(x.raw());
    auto* dst = static_cast<std::byte*>(y.raw());
    for (int64_t m = 0; m < mats; ++m)
      for (int64_t i = 0; i < R; ++i)
        for (int64_t j = 0; j < C; ++j) {
          size_t o = static_cast<size_t>((m * R + i) * C + j) * es;
          bool keep = upper_ ? (j - i >= k) : (j - i <= k);
          if (keep) std::memcpy(dst + o, src + o, es);
          else std::memset(dst + o, 0, es);
        }
  }

 private:
  bool upper_;
};

class CumSumKernel : public Kernel {
 public:
  explicit CumSumKernel(const Node& n) : exclusive_(n.attr_int("exclusive", 0) != 0), reverse_(n.attr_int("reverse", 0) != 0) {}
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    int ax = normalize_axis(ctx.input(1).to_int64_vector().at(0), x.rank(), "CumSum");
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    int64_t dim = x.dim(ax), outer = 1, inner = 1;
    for (int d = 0; d < ax; ++d) outer *= x.dim(d);
    for (int d = ax + 1; d < x.rank(); ++d) inner *= x.dim(d);
    dispatch_type(x.dtype(), "CumSum", [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, bool>) {
        SY_THROW("CumSum on bool is not defined");
      } else {
        const T* s = x.data<T>();
        T* d = y.data<T>();
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t i = 0; i < inner; ++i) {
            T acc = 0;
            for (int64_t step = 0; step < dim; ++step) {
              int64_t j = reverse_ ? dim - 1 - step : step;
              size_t at = static_cast<size_t>((o * dim + j) * inner + i);
              if (exclusive_) {
                d[at] = acc;
                acc = static_cast<T>(acc + s[at]);
              } else {
                acc = static_cast<T>(acc + s[at]);
                d[at] = acc;
              }
            }
          }
      }
    });
  }

 private:
  bool exclusive_, reverse_;
};

template <typename K>
void add(KernelRegistry& r, const std::string& op) {
  KernelDef d;
  d.op_type = op;
  d.create = [](const KernelCreateInfo& ci) -> std::unique_ptr<Kernel> {
    if constexpr (std::is_constructible_v<K, const Node&, int64_t>) return std::make_unique<K>(ci.node, ci.opset);
    else if constexpr (std::is_constructible_v<K, const Node&>) return std::make_unique<K>(ci.node);
    else return std::make_unique<K>();
  };
  r.add(std::move(d));
}

}  // namespace

void register_tensor_kernels(KernelRegistry& r) {
  add<ConcatKernel>(r, "Concat");
  add<SliceKernel>(r, "Slice");
  add<SplitKernel>(r, "Split");
  add<TransposeKernel>(r, "Transpose");
  add<GatherKernel>(r, "Gather");
  add<TileKernel>(r, "Tile");
  add<CastKernel>(r, "Cast");
  add<TriluKernel>(r, "Trilu");
  add<CumSumKernel>(r, "CumSum");
}

}  // namespace sy
