// Products with a few rows: a decode step (one row per sequence) and a
// speculative verification (k+1 rows per sequence). Their cost is reading the
// weights, so every row shares one pass over them. OpenBLAS's sgemm packs the
// whole weight panel for each call, which at M = 7 costs more than the
// product; its sgemv re-reads the weights per row.
//
// Each output element is computed by the same instruction sequence whatever
// M, the column range or the thread split: a row's result does not depend on
// which other rows share the call. So a sequence decoded alone, in a batch,
// or verified with k drafts gets bitwise-identical logits (greedy outputs
// with speculation on equal those with it off, exactly).
#pragma once
#include <cstdint>

namespace sy {

// The rows every build takes in one pass over the weights: the most a
// product with B stored [N, K] (tb) or on the generic build takes.
constexpr int64_t kSmallGemmMaxRows = 16;

// The most rows of a product the small path takes on this CPU (more go to
// OpenBLAS): any number for B stored [K, N] on the AVX2 and AVX-512 builds,
// whose register tiles run a prompt's rows faster than OpenBLAS's sgemm
// (bench_small_gemm), so a prefill, a batch and a decode give a row the
// same bits; kSmallGemmMaxRows otherwise.
int64_t small_gemm_max_rows(bool tb);

// C[m, n0:n1] = alpha * (A[m, :] . op(B)[:, n0:n1]) + beta * C[m, n0:n1] for
// m < M, any M (small_gemm_max_rows says up to where it is the fastest
// choice; every build runs larger M in groups of rows, each row's result
// its own). A is M x K row-major (lda); op(B) is K x N:
// B row-major K x N (ldb), or with tb, B is N x K row-major (ldb). With
// beta == 0, C is not read.
void small_gemm(bool tb, int64_t M, int64_t n0, int64_t n1, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
                int64_t ldb, float beta, float* C, int64_t ldc);

// The instruction set the small path runs on this CPU: "avx512", "avx2" or
// "generic", the best the CPU has (chosen once, at first use), unless the
// environment variable SWITCHYARD_GEMM_ISA names another the CPU has.
const char* small_gemm_path();

// One build by name ("avx512", "avx2", "generic"), or nullptr where this CPU
// (or this architecture's build) does not have it: for tests and benchmarks
// that compare the paths.
using SmallGemmFn = void (*)(bool tb, int64_t M, int64_t n0, int64_t n1, int64_t K, float alpha, const float* A, int64_t lda,
                             const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
SmallGemmFn small_gemm_build(const char* name);

}  // namespace sy
