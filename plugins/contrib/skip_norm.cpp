#include <cmath>
#include <vector>

#include "contrib_plugin.h"

namespace sy_contrib {

using sy::plugin::Error;

SkipNorm::SkipNorm(const sy::plugin::NodeRef& n, bool simplified)
    : eps_(n.graph.attr_float(n.node, "epsilon").value_or(1e-5f)), simplified_(simplified) {}

void SkipNorm::compute(sy::plugin::KernelIO& io) {
  auto x = io.input(0), skip = io.input(1), gamma = io.input(2);
  const int64_t H = x.dim(x.rank() - 1);
  const int64_t rows = x.numel() / H;
  if (gamma.numel() != H) throw Error("skip normalization: gamma must have the hidden size", SY_INVALID_ARGUMENT);
  // Skip may broadcast over the batch ([S, H] against [B, S, H]).
  if (skip.numel() == 0 || x.numel() % skip.numel() != 0 || skip.dim(skip.rank() - 1) != H)
    throw Error("skip normalization: skip does not broadcast to the input", SY_INVALID_ARGUMENT);
  const int beta_in = simplified_ ? -1 : 3, bias_in = simplified_ ? 3 : 4;
  const float* beta = beta_in > 0 && io.has_input(beta_in) ? io.input(beta_in).data<float>() : nullptr;
  const float* bias = io.has_input(bias_in) ? io.input(bias_in).data<float>() : nullptr;
  auto y = io.allocate_output(0, SY_DTYPE_FLOAT32, x.dims());
  std::vector<int64_t> stat = x.dims();
  stat.back() = 1;
  float* mean_out = io.output_count() > 1 ? io.allocate_output(1, SY_DTYPE_FLOAT32, stat).data<float>() : nullptr;
  float* inv_out = io.output_count() > 2 ? io.allocate_output(2, SY_DTYPE_FLOAT32, stat).data<float>() : nullptr;
  float* sum_out = io.output_count() > 3 ? io.allocate_output(3, SY_DTYPE_FLOAT32, x.dims()).data<float>() : nullptr;
  const float* px = x.data<float>();
  const float* ps = skip.data<float>();
  const float* pg = gamma.data<float>();
  float* py = y.data<float>();
  const int64_t skip_rows = skip.numel() / H;
  std::vector<float> sum(static_cast<size_t>(H));
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = px + r * H;
    const float* s = ps + (r % skip_rows) * H;
    double total = 0, sq = 0;
    for (int64_t j = 0; j < H; ++j) {
      float v = a[j] + s[j] + (bias ? bias[j] : 0.f);
      sum[static_cast<size_t>(j)] = v;
      total += v;
    }
    const double mean = simplified_ ? 0.0 : total / static_cast<double>(H);
    for (int64_t j = 0; j < H; ++j) {
      double d = sum[static_cast<size_t>(j)] - mean;
      sq += d * d;
    }
    const float inv = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(H) + eps_));
    for (int64_t j = 0; j < H; ++j)
      py[r * H + j] = (sum[static_cast<size_t>(j)] - static_cast<float>(mean)) * inv * pg[j] + (beta ? beta[j] : 0.f);
    if (mean_out) mean_out[r] = static_cast<float>(mean);
    if (inv_out) inv_out[r] = inv;
    if (sum_out)
      for (int64_t j = 0; j < H; ++j) sum_out[r * H + j] = sum[static_cast<size_t>(j)];
  }
}

}  // namespace sy_contrib
