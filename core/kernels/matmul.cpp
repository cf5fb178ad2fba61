// MatMul and Gemm on the small-GEMM kernel (decode, speculative
// verification and, on the SIMD builds, prompts: small_gemm_max_rows), the
// rest on OpenBLAS. OpenBLAS runs
// single-threaded; large products are split over output columns on the host
// thread pool instead, so BLAS threads never compete with the engine's.
#include <cblas.h>

#include "kernels/kernel_util.h"
#include "kernels/registry.h"
#include "kernels/small_gemm.h"

extern "C" void openblas_set_num_threads(int);

namespace sy {
namespace {

// Work (M*N*K multiply-adds) below which splitting costs more than it saves.
constexpr int64_t kParallelMacs = 1 << 18;

// C[M,N] = alpha * op(A) op(B) + beta * C, row-major, split over N columns.
void gemm(ThreadPool* threads, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.f ? 0.f : beta * C[i * ldc + j];
    return;
  }
  auto run = [&](int64_t n0, int64_t n1) {
    if (!ta && M <= small_gemm_max_rows(tb)) {
      // One pass over the weights for all rows, each row's result
      // independent of the others (see small_gemm.h).
      small_gemm(tb, M, n0, n1, K, alpha, A, lda, B, ldb, beta, C, ldc);
      return;
    }
    const float* b = tb ? B + n0 * ldb : B + n0;
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(M),
                static_cast<int>(n1 - n0), static_cast<int>(K), alpha, A, static_cast<int>(lda), b,
                static_cast<int>(ldb), beta, C + n0, static_cast<int>(ldc));
  };
  if (threads && M * N * K >= kParallelMacs && N >= 64)
    threads->parallel_for(N, 32, run);
  else
    run(0, N);
}

class MatMulKernel : public Kernel {
 public:
  void compute(KernelContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    SY_CHECK(a.dtype() == DType::F32 && b.dtype() == DType::F32, "MatMul supports float32 only");
    SY_CHECK(a.rank() >= 1 && b.rank() >= 1, "MatMul inputs must have rank >= 1");
    // Promote 1-D operands as numpy.matmul does.
    Shape as = a.shape(), bs = b.shape();
    bool a_vec = as.rank() == 1, b_vec = bs.rank() == 1;
    if (a_vec) as = Shape{1, as[0]};
    if (b_vec) bs = Shape{bs[0], 1};
    int64_t M = as[as.rank() - 2], K = as[as.rank() - 1];
    int64_t K2 = bs[bs.rank() - 2], N = bs[bs.rank() - 1];
    SY_CHECK(K == K2, "MatMul inner dimensions differ: " << a.shape().str() << " x " << b.shape().str());

    Shape abatch(std::span<const int64_t>(as.begin(), static_cast<size_t>(as.rank() - 2)));
    Shape bbatch(std::span<const int64_t>(bs.begin(), static_cast<size_t>(bs.rank() - 2)));
    Broadcast bc({&abatch, &bbatch}, "MatMul batch dims");
    Shape out_shape = bc.out;
    if (!a_vec) out_shape.push_back(M);
    if (!b_vec) out_shape.push_back(N);
    Tensor& out = ctx.allocate_output(0, DType::F32, out_shape);
    const float* pa = a.data<float>();
    const float* pb = b.data<float>();
    float* pc = out.data<float>();
    int64_t batches = bc.out.numel();
    if (batches == 0) return;

    if (bbatch.numel() == 1) {
      // Weight-style right operand: fold A's batch into M, one GEMM.
      gemm(ctx.threads, false, false, batches * M, N, K, 1.f, pa, K, pb, N, 0.f, pc, N);
      return;
    }
    // Broadcast batch loop (attention: [b,h,s,d] x [b,h,d,t]).
    std::vector<std::pair<int64_t, int64_t>> offs;
    offs.reserve(static_cast<size_t>(batches));
    bc.for_each_run([&](int64_t, int64_t len, const std::array<int64_t, 3>& off) {
      for (int64_t i = 0; i < len; ++i)
        offs.emplace_back((off[0] + i * bc.strides[0][static_cast<size_t>(bc.rank - 1)]) * M * K,
                          (off[1] + i * bc.strides[1][static_cast<size_t>(bc.rank - 1)]) * K * N);
    });
    auto run = [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        auto [oa, ob] = offs[static_cast<size_t>(i)];
        gemm(nullptr, false, false, M, N, K, 1.f, pa + oa, K, pb + ob, N, 0.f, pc + i * M * N, N);
      }
    };
    if (ctx.threads && batches * M * N * K >= kParallelMacs) ctx.threads->parallel_for(batches, 1, run);
    else run(0, batches);
  }
};

class GemmKernel : public Kernel {
 public:
  explicit GemmKernel(const Node& n)
      : alpha_(n.attr_float("alpha", 1.f)), beta_(n.attr_float("beta", 1.f)),
        ta_(n.attr_int("transA", 0) != 0), tb_(n.attr_int("transB", 0) != 0) {}
  void compute(KernelContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    SY_CHECK(a.dtype() == DType::F32 && b.dtype() == DType::F32, "Gemm supports float32 only");
    SY_CHECK(a.rank() == 2 && b.rank() == 2, "Gemm inputs must be 2-D, got " << a.shape().str() << " and " << b.shape().str());
    int64_t M = ta_ ? a.dim(1) : a.dim(0), K = ta_ ? a.dim(0) : a.dim(1);
    int64_t Kb = tb_ ? b.dim(1) : b.dim(0), N = tb_ ? b.dim(0) : b.dim(1);
    SY_CHECK(K == Kb, "Gemm inner dimensions differ: " << a.shape().str() << " x " << b.shape().str());
    Tensor& out = ctx.allocate_output(0, DType::F32, Shape{M, N});
    float* pc = out.data<float>();
    float beta = 0.f;
    if (ctx.has_input(2) && beta_ != 0.f) {
      const Tensor& c = ctx.input(2);
      SY_CHECK(c.dtype() == DType::F32, "Gemm C must be float32");
      Shape target{M, N};
      Broadcast bc({&target, &c.shape()}, "Gemm C");
      SY_CHECK(bc.out == target, "Gemm C of shape " << c.shape().str() << " does not broadcast to " << target.str());
      const float* src = c.data<float>();
      int64_t sc = bc.strides[1][static_cast<size_t>(bc.rank - 1)];
      bc.for_each_run([&](int64_t o, int64_t len, const std::array<int64_t, 3>& off) {
        for (int64_t i = 0; i < len; ++i) pc[o + i] = src[off[1] + i * sc];
      });
      beta = beta_;
    }
    gemm(ctx.threads, ta_, tb_, M, N, K, alpha_, a.data<float>(), a.dim(1), b.data<float>(), b.dim(1), beta, pc, N);
  }

 private:
  float alpha_, beta_;
  bool ta_, tb_;
};

}  // namespace

void register_matmul_kernels(KernelRegistry& r) {
  openblas_set_num_threads(1);
  KernelDef mm;
  mm.op_type = "MatMul";
  mm.dtypes = {DType::F32};
  mm.create = [](const KernelCreateInfo&) -> std::unique_ptr<Kernel> { return std::make_unique<MatMulKernel>(); };
  r.add(std::move(mm));
  KernelDef gemm_def;
  gemm_def.op_type = "Gemm";
  gemm_def.dtypes = {DType::F32};
  gemm_def.create = [](const KernelCreateInfo& ci) -> std::unique_ptr<Kernel> { return std::make_unique<GemmKernel>(ci.node); };
  r.add(std::move(gemm_def));
}

}  // namespace sy
