// The bookkeeping every ExpertMatMul kernel shares (fp32 here, quantized in
// the quantize plugin): which entries go to which expert, and moving an
// expert's rows of x into one contiguous block and its results back, so
// each selected expert runs one product over all the tokens of the step
// that chose it, whatever sequence they belong to.
//
// The op's operands (moe_plugin.h): x [..., P, K] (rows form) or
// [..., K, P] (columns form), experts with as many entries as x has
// leading entries (its trailing dims of 1, GatherND's index column, do not
// count), and the result [..., P, N] or [..., N, P].
#pragma once
#include <switchyard/plugin.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace sy_moe {

struct ExpertLayout {
  int64_t entries = 0;  // M: one expert choice each
  int64_t P = 0;        // rows (or columns) of x per entry; 1 in decoder exports
  int64_t K = 0, N = 0;
  bool columns = false;
  std::vector<int64_t> out_dims;
};

// Checks x against the weight's K and N; `who` names the node in errors.
inline ExpertLayout expert_layout(const sy::plugin::TensorView& x, int64_t experts_numel, int64_t K, int64_t N, bool columns,
                                  const std::string& who) {
  using sy::plugin::Error;
  if (x.dtype() != SY_DTYPE_FLOAT32 || x.rank() < 3)
    throw Error(who + ": x must be float32 of rank >= 3 ([entries..., " + (columns ? "K, P" : "P, K") + "])", SY_INVALID_ARGUMENT);
  ExpertLayout l;
  l.columns = columns;
  const int r = x.rank();
  const int64_t k_dim = columns ? x.dim(r - 2) : x.dim(r - 1);
  l.P = columns ? x.dim(r - 1) : x.dim(r - 2);
  l.K = K;
  l.N = N;
  if (k_dim != K) throw Error(who + ": x's inner dimension is " + std::to_string(k_dim) + ", the experts' K is " + std::to_string(K), SY_INVALID_ARGUMENT);
  l.entries = 1;
  for (int i = 0; i < r - 2; ++i) l.entries *= x.dim(i);
  if (l.entries != experts_numel)
    throw Error(who + ": x has " + std::to_string(l.entries) + " entries, the expert indices " + std::to_string(experts_numel), SY_INVALID_ARGUMENT);
  l.out_dims = x.dims();
  l.out_dims[static_cast<size_t>(columns ? r - 2 : r - 1)] = N;
  return l;
}

// Entries grouped by expert: the entries of expert e are
// order[start[e] .. start[e + 1]), in their original order.
// Kernels keep one as a member: its vectors keep their capacity from step
// to step, so grouping allocates nothing per token.
struct ExpertRows {
  std::vector<int64_t> order, start;
  std::vector<int32_t> active;  // experts with at least one entry, ascending
  std::vector<int64_t> expert, fill;  // scratch: each entry's expert, the next slot per expert
};

// Reads the indices (int64 or int32; negative ones count from the end, as
// Gather's do) and groups them; an index out of range is an error naming it.
inline void group_by_expert(const sy::plugin::TensorView& idx, int64_t E, ExpertRows& rows, const std::string& who) {
  using sy::plugin::Error;
  if (idx.dtype() != SY_DTYPE_INT64 && idx.dtype() != SY_DTYPE_INT32)
    throw Error(who + ": expert indices must be int64 or int32", SY_INVALID_ARGUMENT);
  const int64_t M = idx.numel();
  std::vector<int64_t>& expert = rows.expert;
  expert.resize(static_cast<size_t>(M));
  rows.start.assign(static_cast<size_t>(E + 1), 0);
  for (int64_t m = 0; m < M; ++m) {
    int64_t e = idx.dtype() == SY_DTYPE_INT64 ? idx.data<int64_t>()[m] : idx.data<int32_t>()[m];
    if (e < 0) e += E;
    if (e < 0 || e >= E)
      throw Error(who + ": expert index " + std::to_string(e) + " outside [0, " + std::to_string(E) + ")", SY_INVALID_ARGUMENT);
    expert[static_cast<size_t>(m)] = e;
    ++rows.start[static_cast<size_t>(e + 1)];
  }
  rows.active.clear();
  for (int64_t e = 0; e < E; ++e) {
    if (rows.start[static_cast<size_t>(e + 1)] > 0) rows.active.push_back(static_cast<int32_t>(e));
    rows.start[static_cast<size_t>(e + 1)] += rows.start[static_cast<size_t>(e)];
  }
  rows.order.resize(static_cast<size_t>(M));
  std::vector<int64_t>& fill = rows.fill;
  fill.assign(rows.start.begin(), rows.start.end() - 1);
  for (int64_t m = 0; m < M; ++m) rows.order[static_cast<size_t>(fill[static_cast<size_t>(expert[static_cast<size_t>(m)])]++)] = m;
}

// Expert e's entries of x as rows [count * P, K] in `block`.
inline void gather_expert_rows(const ExpertLayout& l, const ExpertRows& rows, int64_t e, const float* x, float* block) {
  const int64_t per = l.P * l.K;
  for (int64_t i = rows.start[static_cast<size_t>(e)]; i < rows.start[static_cast<size_t>(e + 1)]; ++i) {
    const float* src = x + rows.order[static_cast<size_t>(i)] * per;
    float* dst = block + (i - rows.start[static_cast<size_t>(e)]) * per;
    if (!l.columns) {
      std::copy(src, src + per, dst);
    } else {  // [K, P] -> [P, K]
      for (int64_t k = 0; k < l.K; ++k)
        for (int64_t p = 0; p < l.P; ++p) dst[p * l.K + k] = src[k * l.P + p];
    }
  }
}

// Expert e's results [count * P, N] from `block` to their entries of y.
inline void scatter_expert_rows(const ExpertLayout& l, const ExpertRows& rows, int64_t e, const float* block, float* y) {
  const int64_t per = l.P * l.N;
  for (int64_t i = rows.start[static_cast<size_t>(e)]; i < rows.start[static_cast<size_t>(e + 1)]; ++i) {
    const float* src = block + (i - rows.start[static_cast<size_t>(e)]) * per;
    float* dst = y + rows.order[static_cast<size_t>(i)] * per;
    if (!l.columns) {
      std::copy(src, src + per, dst);
    } else {  // [P, N] -> [N, P]
      for (int64_t p = 0; p < l.P; ++p)
        for (int64_t n = 0; n < l.N; ++n) dst[n * l.P + p] = src[p * l.N + n];
    }
  }
}

}  // namespace sy_moe
