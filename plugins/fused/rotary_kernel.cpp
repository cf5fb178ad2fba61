// CPU kernel of switchyard::Rotary: one pass over q or k instead of the
// seven (halves) or twelve (interleaved) nodes the export spells it with.
// Each output element is computed with the same float operations, in the
// same order, as the graph it replaces (products rounded, then one add or
// subtract), so the fused graph's outputs are bit-identical; this file is
// built with -ffp-contract=off so no FMA can merge a product into the sum.
#include <string>

#include "fused_plugin.h"

namespace sy_fused {

using sy::plugin::Error;

void rotary_row(const float* x, const float* c, const float* s, int64_t dim, bool interleaved, float* y) {
  if (interleaved) {
    // (even, odd) pairs: even' = e*c - o*s, odd' = e*s + o*c.
    for (int64_t j = 0; j < dim / 2; ++j) {
      const float e = x[2 * j], o = x[2 * j + 1];
      const float ec = e * c[j], os = o * s[j], es = e * s[j], oc = o * c[j];
      y[2 * j] = ec - os;
      y[2 * j + 1] = es + oc;
    }
    return;
  }
  // Halves: x * cos + cat(-x2, x1) * sin.
  const int64_t half = dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float a = x[i] * c[i], b = -x[i + half] * s[i];
    y[i] = a + b;
  }
  for (int64_t i = half; i < dim; ++i) {
    const float a = x[i] * c[i], b = x[i - half] * s[i];
    y[i] = a + b;
  }
}

RotaryKernel::RotaryKernel(const sy::plugin::NodeRef& n)
    : interleaved_(n.graph.attr_int(n.node, "interleaved").value_or(0) != 0) {}

// The element offset of each x row's cos/sin row: cos and sin broadcast
// against x (right-aligned, each dim 1 or x's), never the other way.
RotaryBroadcast rotary_broadcast(const sy::plugin::TensorView& x, const sy::plugin::TensorView& cs, bool interleaved) {
  const int rank = x.rank();
  if (rank < 1 || cs.rank() > rank) throw Error("Rotary: cos/sin of rank " + std::to_string(cs.rank()) + " for x of rank " + std::to_string(rank), SY_INVALID_ARGUMENT);
  RotaryBroadcast b;
  b.dim = x.dim(rank - 1);
  const int64_t width = interleaved ? b.dim / 2 : b.dim;
  if (b.dim % 2 != 0 || cs.dim(cs.rank() - 1) != width)
    throw Error("Rotary: x's last dim " + std::to_string(b.dim) + " needs cos/sin rows of " + std::to_string(width) + ", got " +
                    std::to_string(cs.dim(cs.rank() - 1)),
                SY_INVALID_ARGUMENT);
  b.rows = b.dim ? x.numel() / b.dim : 0;
  // Per outer x dim: its size and the cos/sin stride (0 where broadcast).
  int64_t c_stride = width;
  if (rank - 1 > RotaryAxes::kMax) throw Error("Rotary: x has more than " + std::to_string(RotaryAxes::kMax + 1) + " dims", SY_INVALID_ARGUMENT);
  for (int d = rank - 2; d >= 0; --d) {
    const int cd = d - (rank - cs.rank());
    const int64_t xn = x.dim(d), cn = cd >= 0 ? cs.dim(cd) : 1;
    if (cn != 1 && cn != xn)
      throw Error("Rotary: cos/sin dim " + std::to_string(cd) + " is " + std::to_string(cn) + ", x's is " + std::to_string(xn),
                  SY_INVALID_ARGUMENT);
    b.outer.size[b.outer.count] = xn;
    b.outer.cos_stride[b.outer.count++] = cn == 1 ? 0 : c_stride;
    if (cn != 1) c_stride *= cn;
  }
  return b;
}

void RotaryKernel::compute(sy::plugin::KernelIO& io) {
  auto x = io.input(0), c = io.input(1), s = io.input(2);
  if (x.dtype() != SY_DTYPE_FLOAT32 || c.dtype() != SY_DTYPE_FLOAT32 || s.dtype() != SY_DTYPE_FLOAT32 || c.dims() != s.dims())
    throw Error("Rotary: x, cos and sin must be float32, cos and sin of one shape", SY_INVALID_ARGUMENT);
  const RotaryBroadcast b = rotary_broadcast(x, c, interleaved_);
  auto y = io.allocate_output(0, SY_DTYPE_FLOAT32, x.dims());
  const float *px = x.data<float>(), *pc = c.data<float>(), *ps = s.data<float>();
  float* py = y.data<float>();
  auto rows = [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t co = b.outer.cos_row(r);
      rotary_row(px + r * b.dim, pc + co, ps + co, b.dim, interleaved_, py + r * b.dim);
    }
  };
  if (b.rows * b.dim >= (1 << 16)) io.parallel_for(b.rows, 8, rows);
  else rows(0, b.rows);
}

}  // namespace sy_fused
