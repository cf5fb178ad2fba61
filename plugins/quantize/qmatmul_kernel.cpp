#include <algorithm>
#include <cmath>
#include <cstring>

#include "quantize_plugin.h"

namespace sy_quant {

using sy::plugin::Error;

namespace {

int64_t required_attr(const sy::plugin::NodeRef& n, const char* key, const std::string& who) {
  auto v = n.graph.attr_int(n.node, key);
  if (!v) throw Error(who + ": missing attribute '" + key + "'", SY_INVALID_ARGUMENT);
  return *v;
}

}  // namespace

QuantizedWeight read_quantized_node(const sy::plugin::NodeRef& n, std::string& name, int first, int64_t matrices) {
  const auto& g = n.graph;
  name = g.op_type(n.node) + " '" + g.name(n.node) + "'";
  QuantizedWeight q;
  q.K = required_attr(n, "K", name);
  q.N = required_attr(n, "N", name);
  if (matrices < 1 || matrices > (int64_t{1} << 16)) throw Error(name + ": bad number of experts", SY_INVALID_ARGUMENT);
  q.bits = static_cast<int>(g.attr_int(n.node, "bits").value_or(4));
  q.block_size = required_attr(n, "block_size", name);
  if (q.bits != 4 && q.bits != 8) throw Error(name + ": bits=" + std::to_string(q.bits) + " (supported: 4, 8)", SY_UNSUPPORTED);
  if (q.K <= 0 || q.N <= 0 || q.block_size <= 0 || (q.block_size * q.bits) % 8 != 0 || q.K > (int64_t{1} << 24) || q.N > (int64_t{1} << 24))
    throw Error(name + ": bad K/N/block_size attributes", SY_INVALID_ARGUMENT);
  q.n_blocks = (q.K + q.block_size - 1) / q.block_size;
  q.N *= matrices;  // stacked matrices (experts) are read as one of all their rows
  const int32_t inputs = g.input_count(n.node);
  if (first == 1 && inputs > 4 && g.input(n.node, 4) != SY_NO_VALUE) throw Error(name + ": g_idx (act-order) is not supported", SY_UNSUPPORTED);
  auto codes = g.constant(g.input(n.node, first));
  auto scales = g.constant(inputs > first + 1 ? g.input(n.node, first + 1) : SY_NO_VALUE);
  if (!codes || !scales) throw Error(name + ": the quantized weight and its scales must be constant initializers", SY_INVALID_ARGUMENT);
  if (codes->dtype() != SY_DTYPE_UINT8 || codes->numel() != q.N * q.n_blocks * q.blob_bytes())
    throw Error(name + ": B must be uint8 [N, n_blocks, block_size*bits/8] = " + std::to_string(q.N * q.n_blocks * q.blob_bytes()) +
                    " bytes, got " + std::to_string(codes->numel()),
                SY_INVALID_ARGUMENT);
  if (scales->dtype() != SY_DTYPE_FLOAT32 || scales->numel() != q.N * q.n_blocks)
    throw Error(name + ": scales must be float32 with N * n_blocks = " + std::to_string(q.N * q.n_blocks) + " elements", SY_INVALID_ARGUMENT);
  q.codes.assign(codes->data<uint8_t>(), codes->data<uint8_t>() + codes->numel());
  q.scales.assign(scales->data<float>(), scales->data<float>() + scales->numel());
  if (inputs > first + 2 && g.input(n.node, first + 2) != SY_NO_VALUE) {
    auto zp = g.constant(g.input(n.node, first + 2));
    if (zp && zp->dtype() == SY_DTYPE_FLOAT32 && zp->numel() == q.N * q.n_blocks) {
      q.float_zero_points.assign(zp->data<float>(), zp->data<float>() + zp->numel());
      for (float z : q.float_zero_points)
        if (!std::isfinite(z)) throw Error(name + ": a float zero point is not finite", SY_INVALID_ARGUMENT);
      return q;
    }
    if (!zp || zp->dtype() != SY_DTYPE_UINT8 || zp->numel() != q.N * q.zero_point_row_bytes())
      throw Error(name + ": zero_points must be a constant uint8 tensor of N * ceil(n_blocks * bits / 8) = " +
                      std::to_string(q.N * q.zero_point_row_bytes()) + " bytes, or float32 with N * n_blocks = " +
                      std::to_string(q.N * q.n_blocks) + " values",
                  SY_INVALID_ARGUMENT);
    q.zero_points.assign(zp->data<uint8_t>(), zp->data<uint8_t>() + zp->numel());
  }
  return q;
}

const float* read_bias(sy::plugin::KernelIO& io, int64_t N, const std::string& name) {
  if (io.input_count() <= 5 || !io.has_input(5)) return nullptr;
  auto b = io.input(5);
  if (b.dtype() != SY_DTYPE_FLOAT32 || b.numel() != N) throw Error(name + ": bias must be float32 [N]", SY_INVALID_ARGUMENT);
  return b.data<float>();
}

QMatMulKernel::QMatMulKernel(const sy::plugin::NodeRef& n) {
  try {
    isa_ = select_isa();
  } catch (const std::exception& e) {
    throw Error(e.what(), SY_INVALID_ARGUMENT);
  }
  // The equivalence probe proves rewrites around this node: no activation
  // rounding there (the best float-activation path instead).
  if (n.graph.attr_int(n.node, SY_ATTR_PROBE).value_or(0) && int8_activations(isa_))
    for (Isa exact : {Isa::Avx512, Isa::Avx2, Isa::Scalar})
      if (isa_available(exact)) {
        isa_ = exact;
        break;
      }
  w_ = pack(read_quantized_node(n, name_), isa_);  // in the layout the path streams
}

void QMatMulKernel::compute(sy::plugin::KernelIO& io) {
  auto a = io.input(0);
  if (a.dtype() != SY_DTYPE_FLOAT32 || a.rank() < 1 || a.dim(a.rank() - 1) != w_.K)
    throw Error(name_ + ": input A must be float32 [..., " + std::to_string(w_.K) + "]", SY_INVALID_ARGUMENT);
  const float* bias = read_bias(io, w_.N, name_);
  auto dims = a.dims();
  dims.back() = w_.N;
  auto y = io.allocate_output(0, SY_DTYPE_FLOAT32, dims);
  const int64_t M = a.numel() / w_.K;
  if (M == 0) return;
  qmatmul(w_, a.data<float>(), M, bias, y.data<float>(), isa_,
          [&](int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) { io.parallel_for(n, grain, fn); });
}

}  // namespace sy_quant
