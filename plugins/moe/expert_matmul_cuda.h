// CUDA launch of ExpertMatMul (expert_matmul_cuda.cu). Error message or null.
#pragma once
#include <cstdint>

namespace sy_moe {

// y[m] = x[m] @ W[e_m] (columns = 0: W [E, K, N], x [M, P, K], y [M, P, N])
// or W[e_m] @ x[m] (columns = 1: W [E, N, K], x [M, K, P], y [M, N, P]);
// experts: M indices, int64 (index_bytes 8) or int32 (4), negative ones from
// the end; an index outside [-E, E) gives NaN rows (the CPU kernel's error,
// without a device sync).
const char* cuda_expert_matmul(const float* x, const void* experts, int index_bytes, const float* w, int64_t E, int64_t M, int64_t P,
                               int64_t K, int64_t N, bool columns, float* y, void* stream);

}  // namespace sy_moe
