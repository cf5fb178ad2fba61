// ExpertMatMul on the CPU: the step's entries grouped by expert, one product
// per selected expert, all of them in one parallel region split over
// (expert, column range) items, so a decode step's k small products share
// the threads instead of running one after another.
//
// The products run on the host's float32 kernel (ABI 1.11, matmul_f32): the
// one the core's MatMul runs, so an expert's rows get the bits the exported
// graph's per-expert MatMuls give them, and a prompt's or a batch's rows
// share one pass over the expert's weights on register tiles. A host older
// than 1.11 has no such function; OpenBLAS (sgemv for one row) runs instead.
#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <string>

#include "expert_rows.h"
#include "moe_plugin.h"

namespace sy_moe {

using sy::plugin::Error;

ExpertMatMulKernel::ExpertMatMulKernel(const sy::plugin::NodeRef& n)
    : name_("ExpertMatMul '" + n.graph.name(n.node) + "'"), columns_(n.graph.attr_int(n.node, "columns").value_or(0) != 0) {}

void ExpertMatMulKernel::compute(sy::plugin::KernelIO& io) {
  auto x = io.input(0), idx = io.input(1), w = io.input(2);
  if (w.dtype() != SY_DTYPE_FLOAT32 || w.rank() != 3) throw Error(name_ + ": weight must be float32 [E, A, B]", SY_INVALID_ARGUMENT);
  const int64_t E = w.dim(0), K = columns_ ? w.dim(2) : w.dim(1), N = columns_ ? w.dim(1) : w.dim(2);
  const ExpertLayout l = expert_layout(x, idx.numel(), K, N, columns_, name_);
  auto y = io.allocate_output(0, SY_DTYPE_FLOAT32, l.out_dims);
  if (l.entries == 0 || l.P == 0 || N == 0) return;
  ExpertRows& rows = rows_;
  group_by_expert(idx, E, rows, name_);
  const int64_t R = l.entries * l.P;  // rows of all products together
  scratch_.resize(static_cast<size_t>(R * (K + N)));
  float* xs = scratch_.data();
  float* ys = xs + R * K;
  for (int32_t e : rows.active) gather_expert_rows(l, rows, e, x.data<float>(), xs + rows.start[static_cast<size_t>(e)] * l.P * K);

  // Items of (expert, column range): enough for every thread when the work
  // is large, one per expert when it is not.
  const int64_t active = static_cast<int64_t>(rows.active.size());
  const int64_t threads = std::max<int32_t>(1, sy::plugin::host()->num_threads());
  int64_t chunk = N;
  if (R * N * K >= (int64_t{1} << 16) && threads > 1) {
    chunk = (N * active + 4 * threads - 1) / (4 * threads);
    chunk = std::min(N, std::max<int64_t>(16, (chunk + 15) / 16 * 16));
  }
  const int64_t per_expert = (N + chunk - 1) / chunk;
  const float* W = w.data<float>();
  const sy_host_api* h = sy::plugin::host();
  const bool host_gemm = SY_HAS_FIELD(h, sy_host_api, matmul_f32);
  std::atomic<bool> failed{false};
  std::string failure;  // the first failure's message, written by the thread that failed first
  auto run = [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t e = rows.active[static_cast<size_t>(item / per_expert)];
      const int64_t n0 = (item % per_expert) * chunk, n1 = std::min(N, n0 + chunk);
      const int64_t r0 = rows.start[static_cast<size_t>(e)] * l.P;
      const int64_t rc = (rows.start[static_cast<size_t>(e + 1)] - rows.start[static_cast<size_t>(e)]) * l.P;
      const float* we = W + e * K * N;
      const float* a = xs + r0 * K;
      if (host_gemm) {  // weight [N, K] (columns) or [K, N]: output columns n0..n1 of every row
        if (h->matmul_f32(columns_, rc, n0, n1, K, a, K, we, columns_ ? K : N, ys + r0 * N, N) != SY_OK &&
            !failed.exchange(true)) {
          const char* why = h->last_error();
          failure = why ? why : "no message";
        }
        continue;
      }
      // A host older than 1.11: OpenBLAS.
      float* c = ys + r0 * N + n0;
      const int ik = static_cast<int>(K), in = static_cast<int>(N), inc = static_cast<int>(n1 - n0), irc = static_cast<int>(rc);
      if (columns_) {  // weight [N, K]: rows n0..n1 times each x row
        if (rc == 1)
          cblas_sgemv(CblasRowMajor, CblasNoTrans, inc, ik, 1.f, we + n0 * K, ik, a, 1, 0.f, c, 1);
        else
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, irc, inc, ik, 1.f, a, ik, we + n0 * K, ik, 0.f, c, in);
      } else {  // weight [K, N]: columns n0..n1
        if (rc == 1)
          cblas_sgemv(CblasRowMajor, CblasTrans, ik, inc, 1.f, we + n0, in, a, 1, 0.f, c, 1);
        else
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, irc, inc, ik, 1.f, a, ik, we + n0, in, 0.f, c, in);
      }
    }
  };
  const int64_t items = active * per_expert;
  if (items > 1 && threads > 1) io.parallel_for(items, 1, run);
  else run(0, items);
  if (failed) throw Error(name_ + ": the host's matmul_f32 failed: " + failure, SY_ERROR);
  for (int32_t e : rows.active) scatter_expert_rows(l, rows, e, ys + rows.start[static_cast<size_t>(e)] * l.P * N, y.data<float>());
}

}  // namespace sy_moe
