#include <cuda_runtime.h>

#include <cfloat>

#include "paged_attention_cuda.h"

namespace sy_attention {
namespace {

constexpr int kWarp = 32;
constexpr int kWarps = 4;
constexpr int kMaxD = 256;
constexpr int kDRegs = kMaxD / kWarp;  // accumulator registers per lane

__device__ __forceinline__ float warp_max(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ int64_t slot(const CudaAttentionArgs& a, int seq, int64_t pos, int g) {
  const int64_t block = a.block_tables[static_cast<int64_t>(seq) * a.max_blocks_per_seq + pos / a.BS];
  return ((block * a.KVH + g) * a.BS + pos % a.BS) * a.D;
}

// The key range query token t attends to: [first, last].
__device__ __forceinline__ void key_range(const CudaAttentionArgs& a, int t, int seq, int64_t& first, int64_t& last) {
  const int q0 = a.query_start[seq], n = a.query_start[seq + 1] - q0;
  last = static_cast<int64_t>(a.context_len[seq]) - n + (t - q0);
  first = a.window > 0 ? max(static_cast<int64_t>(0), last - a.window + 1) : 0;
}

__global__ void write_kv_kernel(CudaAttentionArgs a) {
  const int t = blockIdx.x, g = blockIdx.y;
  const int seq = a.token_seq[t];
  const int q0 = a.query_start[seq], n = a.query_start[seq + 1] - q0;
  const int64_t pos = static_cast<int64_t>(a.context_len[seq]) - n + (t - q0);
  const int64_t dst = slot(a, seq, pos, g), src = (static_cast<int64_t>(g) * a.T + t) * a.D;
  for (int d = threadIdx.x; d < a.D; d += blockDim.x) {
    a.key_cache[dst + d] = a.k_new[src + d];
    a.value_cache[dst + d] = a.v_new[src + d];
  }
}

// Online-softmax state of one query, spread over a warp: lane holds
// acc[d] for d = lane + 32 * i.
struct SoftmaxState {
  float m = -FLT_MAX, l = 0.f;
  float acc[kDRegs];
  __device__ void init() {
#pragma unroll
    for (int i = 0; i < kDRegs; ++i) acc[i] = 0.f;
  }
  // Folds in up to 32 keys: lane j holds score s (-FLT_MAX when masked) and
  // values come from v(j, d).
  template <typename V>
  __device__ void add(float s, bool valid, int D, V&& v) {
    const float cmax = warp_max(valid ? s : -FLT_MAX);
    if (cmax == -FLT_MAX) return;  // nothing visible in this chunk
    const float m_new = fmaxf(m, cmax);
    const float corr = __expf(m - m_new);
    const float w = valid ? __expf(s - m_new) : 0.f;
    l = l * corr + warp_sum(w);
    const int lane = threadIdx.x % kWarp;
#pragma unroll
    for (int i = 0; i < kDRegs; ++i) acc[i] *= corr;
    for (int j = 0; j < kWarp; ++j) {
      const float wj = __shfl_sync(0xffffffffu, w, j);
      if (wj == 0.f) continue;
#pragma unroll
      for (int i = 0; i < kDRegs; ++i) {
        const int d = lane + kWarp * i;
        if (d < D) acc[i] += wj * v(j, d);
      }
    }
    m = m_new;
  }
};

// Prefill / mixed steps: one block per (tile of <= 16 queries of one
// sequence, query head); 4 warps, each owning up to 4 of the tile's queries.
__global__ void prefill_kernel(CudaAttentionArgs a) {
  extern __shared__ float smem[];
  float* qs = smem;                              // [kQueryTile][D]
  float* ks = qs + kQueryTile * a.D;             // [32][D + 1]
  float* vs = ks + kWarp * (a.D + 1);            // [32][D]
  const int tile = blockIdx.x, h = blockIdx.y;
  const int seq = a.tiles[tile * 3], t0 = a.tiles[tile * 3 + 1], count = a.tiles[tile * 3 + 2];
  const int g = h / (a.H / a.KVH);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  for (int i = threadIdx.x; i < count * a.D; i += blockDim.x)
    qs[i] = a.q[(static_cast<int64_t>(h) * a.T + t0 + i / a.D) * a.D + i % a.D];
  int64_t lo = INT64_MAX, hi = -1;
  for (int i = 0; i < count; ++i) {
    int64_t f, l;
    key_range(a, t0 + i, seq, f, l);
    lo = min(lo, f);
    hi = max(hi, l);
  }
  constexpr int kPerWarp = kQueryTile / kWarps;
  SoftmaxState st[kPerWarp];
  int64_t first[kPerWarp], last[kPerWarp];
#pragma unroll
  for (int r = 0; r < kPerWarp; ++r) {
    st[r].init();
    const int qi = warp + kWarps * r;
    if (qi < count) key_range(a, t0 + qi, seq, first[r], last[r]);
  }
  __syncthreads();
  for (int64_t c0 = lo - lo % kWarp; c0 <= hi; c0 += kWarp) {
    for (int i = threadIdx.x; i < kWarp * a.D; i += blockDim.x) {
      const int j = i / a.D, d = i % a.D;
      const int64_t p = c0 + j;
      float kv = 0.f, vv = 0.f;
      if (p >= lo && p <= hi) {
        const int64_t off = slot(a, seq, p, g) + d;
        kv = a.key_cache[off];
        vv = a.value_cache[off];
      }
      ks[j * (a.D + 1) + d] = kv;
      vs[j * a.D + d] = vv;
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kPerWarp; ++r) {
      const int qi = warp + kWarps * r;
      if (qi >= count) continue;  // warp-uniform
      const int64_t p = c0 + lane;
      const bool valid = p >= first[r] && p <= last[r];
      float s = 0.f;
      const float* qv = qs + qi * a.D;
      const float* kr = ks + lane * (a.D + 1);
      for (int d = 0; d < a.D; ++d) s += qv[d] * kr[d];
      st[r].add(s * a.scale, valid, a.D, [&](int j, int d) { return vs[j * a.D + d]; });
    }
    __syncthreads();
  }
#pragma unroll
  for (int r = 0; r < kPerWarp; ++r) {
    const int qi = warp + kWarps * r;
    if (qi >= count) continue;
    const float inv = st[r].l > 0.f ? 1.f / st[r].l : 0.f;
    float* o = a.out + (static_cast<int64_t>(h) * a.T + t0 + qi) * a.D;
#pragma unroll
    for (int i = 0; i < kDRegs; ++i) {
      const int d = lane + kWarp * i;
      if (d < a.D) o[d] = st[r].acc[i] * inv;
    }
  }
}

// Decode: block (split, head, token) covers kSplitKeys positions; its 4 warps
// take 32-position chunks in turn, then merge into one partial state.
__global__ void decode_split_kernel(CudaAttentionArgs a, int splits) {
  extern __shared__ float smem[];
  float* qs = smem;                       // [D]
  float* part = qs + a.D;                 // [kWarps][D + 2]
  const int split = blockIdx.x, h = blockIdx.y, t = blockIdx.z;
  const int seq = a.token_seq[t], g = h / (a.H / a.KVH);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  for (int d = threadIdx.x; d < a.D; d += blockDim.x) qs[d] = a.q[(static_cast<int64_t>(h) * a.T + t) * a.D + d];
  __syncthreads();
  int64_t first, last;
  key_range(a, t, seq, first, last);
  const int64_t begin = max(first, static_cast<int64_t>(split) * kSplitKeys);
  const int64_t end = min(last + 1, static_cast<int64_t>(split + 1) * kSplitKeys);
  SoftmaxState st;
  st.init();
  for (int64_t c0 = begin + static_cast<int64_t>(warp) * kWarp; c0 < end; c0 += kWarps * kWarp) {
    const int64_t p = c0 + lane;
    const bool valid = p < end;
    float s = 0.f;
    int64_t off = 0;
    if (valid) {
      off = slot(a, seq, p, g);
      for (int d = 0; d < a.D; ++d) s += qs[d] * a.key_cache[off + d];
    }
    st.add(s * a.scale, valid, a.D, [&](int j, int d) {
      const int64_t pj = c0 + j;
      return a.value_cache[slot(a, seq, pj, g) + d];
    });
  }
  // Merge the warps' states.
  float* mine = part + warp * (a.D + 2);
  if (lane == 0) {
    mine[a.D] = st.m;
    mine[a.D + 1] = st.l;
  }
#pragma unroll
  for (int i = 0; i < kDRegs; ++i) {
    const int d = lane + kWarp * i;
    if (d < a.D) mine[d] = st.acc[i];
  }
  __syncthreads();
  const int64_t base = ((static_cast<int64_t>(t) * a.H + h) * splits + split) * (a.D + 2);
  float M = -FLT_MAX;
  for (int w = 0; w < kWarps; ++w) M = fmaxf(M, part[w * (a.D + 2) + a.D]);
  for (int d = threadIdx.x; d < a.D + 2; d += blockDim.x) {
    float v = 0.f;
    if (d == a.D) v = M;
    else
      for (int w = 0; w < kWarps; ++w) {
        const float mw = part[w * (a.D + 2) + a.D];
        if (mw == -FLT_MAX) continue;
        const float f = __expf(mw - M);
        v += (d == a.D + 1 ? part[w * (a.D + 2) + a.D + 1] : part[w * (a.D + 2) + d]) * f;
      }
    a.scratch[base + d] = v;
  }
}

__global__ void decode_combine_kernel(CudaAttentionArgs a, int splits) {
  const int h = blockIdx.x, t = blockIdx.y;
  const int64_t base = (static_cast<int64_t>(t) * a.H + h) * splits * (a.D + 2);
  float M = -FLT_MAX;
  for (int s = 0; s < splits; ++s) M = fmaxf(M, a.scratch[base + s * (a.D + 2) + a.D]);
  float L = 0.f;
  for (int s = 0; s < splits; ++s) {
    const float ms = a.scratch[base + s * (a.D + 2) + a.D];
    if (ms != -FLT_MAX) L += a.scratch[base + s * (a.D + 2) + a.D + 1] * __expf(ms - M);
  }
  for (int d = threadIdx.x; d < a.D; d += blockDim.x) {
    float v = 0.f;
    for (int s = 0; s < splits; ++s) {
      const float ms = a.scratch[base + s * (a.D + 2) + a.D];
      if (ms != -FLT_MAX) v += a.scratch[base + s * (a.D + 2) + d] * __expf(ms - M);
    }
    a.out[(static_cast<int64_t>(h) * a.T + t) * a.D + d] = L > 0.f ? v / L : 0.f;
  }
}

int splits_for(const CudaAttentionArgs& a) { return (a.max_context + kSplitKeys - 1) / kSplitKeys; }

}  // namespace

int64_t cuda_attention_scratch_floats(const CudaAttentionArgs& a) {
  if (!a.decode_only) return 0;
  return static_cast<int64_t>(a.T) * a.H * splits_for(a) * (a.D + 2);
}

const char* cuda_paged_attention(const CudaAttentionArgs& a, void* stream) {
  if (a.D > kMaxD) return "head_dim above 256 is not supported on CUDA";
  if (a.T == 0) return nullptr;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  write_kv_kernel<<<dim3(a.T, a.KVH), 64, 0, s>>>(a);
  const int threads = kWarps * kWarp;
  if (a.decode_only) {
    const int splits = splits_for(a);
    const size_t shm = (a.D + kWarps * (a.D + 2)) * sizeof(float);
    decode_split_kernel<<<dim3(splits, a.H, a.T), threads, shm, s>>>(a, splits);
    decode_combine_kernel<<<dim3(a.H, a.T), 128, 0, s>>>(a, splits);
  } else {
    const size_t shm = (kQueryTile * a.D + kWarp * (a.D + 1) + kWarp * a.D) * sizeof(float);
    if (shm > 48 * 1024) cudaFuncSetAttribute(prefill_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shm));
    prefill_kernel<<<dim3(a.num_tiles, a.H), threads, shm, s>>>(a);
  }
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

}  // namespace sy_attention
