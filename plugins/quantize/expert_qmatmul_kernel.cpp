// ExpertMatMulNBits on the CPU: each expert's matrix packed for the path
// the CPU runs (as a QMatMul's), the step's entries grouped by expert
// (plugins/moe/expert_rows.h), and one quantized product per selected
// expert over all the rows that chose it. At decode a token reads its k
// experts' codes and scales once, nothing of the others.
#include <algorithm>

#include "expert_rows.h"
#include "quantize_plugin.h"

namespace sy_quant {

using sy::plugin::Error;

QuantizedWeight slice_rows(const QuantizedWeight& q, int64_t first_row, int64_t rows) {
  QuantizedWeight s;  // the geometry, not a copy of every row
  s.bits = q.bits;
  s.K = q.K;
  s.block_size = q.block_size;
  s.n_blocks = q.n_blocks;
  s.N = rows;
  auto cut = [&](const auto& all, auto& part, int64_t per_row) {
    if (all.empty()) return;
    part.assign(all.begin() + first_row * per_row, all.begin() + (first_row + rows) * per_row);
  };
  cut(q.codes, s.codes, q.n_blocks * q.blob_bytes());
  cut(q.scales, s.scales, q.n_blocks);
  cut(q.zero_points, s.zero_points, q.zero_point_row_bytes());
  cut(q.float_zero_points, s.float_zero_points, q.n_blocks);
  return s;
}

ExpertQMatMulKernel::ExpertQMatMulKernel(const sy::plugin::NodeRef& n) {
  const int64_t experts = n.graph.attr_int(n.node, "experts").value_or(0);
  columns_ = n.graph.attr_int(n.node, "columns").value_or(0) != 0;
  try {
    isa_ = select_isa();
  } catch (const std::exception& e) {
    throw Error(e.what(), SY_INVALID_ARGUMENT);
  }
  if (n.graph.attr_int(n.node, SY_ATTR_PROBE).value_or(0) && int8_activations(isa_))  // as QMatMulKernel
    for (Isa exact : {Isa::Avx512, Isa::Avx2, Isa::Scalar})
      if (isa_available(exact)) {
        isa_ = exact;
        break;
      }
  const QuantizedWeight all = read_quantized_node(n, name_, 2, experts);
  const int64_t N = all.N / experts;
  experts_.reserve(static_cast<size_t>(experts));
  for (int64_t e = 0; e < experts; ++e) experts_.push_back(pack(slice_rows(all, e * N, N), isa_));
}

void ExpertQMatMulKernel::compute(sy::plugin::KernelIO& io) {
  auto x = io.input(0), idx = io.input(1);
  const int64_t K = experts_[0].K, N = experts_[0].N;
  const sy_moe::ExpertLayout l = sy_moe::expert_layout(x, idx.numel(), K, N, columns_, name_);
  auto y = io.allocate_output(0, SY_DTYPE_FLOAT32, l.out_dims);
  if (l.entries == 0 || l.P == 0) return;
  sy_moe::ExpertRows& rows = rows_;
  sy_moe::group_by_expert(idx, static_cast<int64_t>(experts_.size()), rows, name_);
  const int64_t R = l.entries * l.P;
  scratch_.resize(static_cast<size_t>(R * (K + N)));
  float* xs = scratch_.data();
  float* ys = xs + R * K;
  int64_t most_rows = 0;
  for (int32_t e : rows.active) {
    sy_moe::gather_expert_rows(l, rows, e, x.data<float>(), xs + rows.start[static_cast<size_t>(e)] * l.P * K);
    most_rows = std::max(most_rows, (rows.start[static_cast<size_t>(e + 1)] - rows.start[static_cast<size_t>(e)]) * l.P);
  }
  auto product = [&](int32_t e, const ParallelFor& pf) {
    const int64_t r0 = rows.start[static_cast<size_t>(e)] * l.P;
    const int64_t rc = (rows.start[static_cast<size_t>(e + 1)] - rows.start[static_cast<size_t>(e)]) * l.P;
    qmatmul(experts_[static_cast<size_t>(e)], xs + r0 * K, rc, nullptr, ys + r0 * N, isa_, pf);
  };
  const int64_t active = static_cast<int64_t>(rows.active.size());
  const int64_t threads = std::max<int32_t>(1, sy::plugin::host()->num_threads());
  if (threads > 1 && active > 1 && (active >= 2 * threads || most_rows <= 16)) {
    // Several experts with a few rows each (decode's k experts, a prompt
    // spread over many): the experts side by side, each product on one
    // thread (its scratch is thread-local), one parallel region in all
    // instead of one per expert. Every path gives a row the same bits
    // whatever splits the work.
    const ParallelFor serial = [](int64_t n, int64_t, const std::function<void(int64_t, int64_t)>& fn) { fn(0, n); };
    io.parallel_for(active, 1, [&](int64_t a0, int64_t a1) {
      for (int64_t a = a0; a < a1; ++a) product(rows.active[static_cast<size_t>(a)], serial);
    });
  } else {
    const ParallelFor pf = [&](int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) { io.parallel_for(n, grain, fn); };
    for (int32_t e : rows.active) product(e, pf);
  }
  for (int32_t e : rows.active) sy_moe::scatter_expert_rows(l, rows, e, ys + rows.start[static_cast<size_t>(e)] * l.P * N, y.data<float>());
}

}  // namespace sy_quant
