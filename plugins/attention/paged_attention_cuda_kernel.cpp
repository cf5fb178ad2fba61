// The CUDA PagedAttention kernel: the step's layout (sequence bounds, block
// tables, which token belongs to which sequence, the prefill tiles) is packed
// into one buffer, uploaded on the session's stream, and the kernels of
// paged_attention_cuda.cu run against the KV cache in device memory.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <vector>

#include "attention_plugin.h"
#include "paged_attention_cuda.h"

namespace sy_attention {

using sy::plugin::DeviceBuffer;
using sy::plugin::Error;

PagedAttentionCudaKernel::PagedAttentionCudaKernel(const sy::plugin::NodeRef& n) : cpu_(n) {
  if (cpu_.softcap() > 0.f || cpu_.packed_heads() > 0 || n.graph.input_count(n.node) > 3 || cpu_.latent_dim() > 0)
    throw Error("PagedAttention on CUDA supports the heads-major layout without soft-cap, rotary, sinks or latent attention; "
                "this layer needs the CPU kernel",
                SY_UNSUPPORTED);
}

void PagedAttentionCudaKernel::compute(sy::plugin::KernelIO& io) {
  const sy_step_context* step = io.step();
  if (!step || step->num_seqs <= 0)
    throw Error("PagedAttention runs only in the step engine: select a cache manager ('cache:') in the manifest", SY_INVALID_ARGUMENT);
  const int32_t layer = cpu_.layer();
  if (layer < 0 || layer >= step->num_layers) throw Error("PagedAttention: layer out of range of the KV cache", SY_INVALID_ARGUMENT);
  auto q = io.input(0), kn = io.input(1), vn = io.input(2);
  const sy_tensor& kc = step->key_cache[layer];
  const sy_tensor& vc = step->value_cache[layer];
  if (kc.device != SY_DEVICE_CUDA || vc.device != SY_DEVICE_CUDA || q.raw.device != SY_DEVICE_CUDA)
    throw Error("PagedAttention on CUDA needs Q/K/V and the KV cache in CUDA memory", SY_INVALID_ARGUMENT);
  if (q.rank() != 4 || kn.rank() != 4 || vn.rank() != 4 || q.dim(0) != 1 || kn.dim(0) != 1)
    throw Error("PagedAttention: expected Q/K/V of shape [1, heads, tokens, head_dim]", SY_INVALID_ARGUMENT);
  if (kc.dtype != SY_DTYPE_FLOAT32 || vc.dtype != SY_DTYPE_FLOAT32)
    throw Error("PagedAttention on CUDA reads a float32 KV cache, got dtype " + std::to_string(kc.dtype), SY_UNSUPPORTED);
  CudaAttentionArgs a{};
  a.H = static_cast<int32_t>(q.dim(1));
  a.KVH = static_cast<int32_t>(kn.dim(1));
  a.T = static_cast<int32_t>(q.dim(2));
  a.D = static_cast<int32_t>(q.dim(3));
  a.BS = static_cast<int32_t>(kc.dims[2]);
  if (a.H % a.KVH != 0 || kn.dim(3) != a.D || vn.dim(3) != a.D || kc.dims[1] != a.KVH || kc.dims[3] != a.D || vc.dims[3] != a.D ||
      kn.dim(2) != a.T || a.T != step->num_tokens)
    throw Error("PagedAttention: Q/K/V shapes do not match the KV cache layout or the step's token count", SY_INVALID_ARGUMENT);

  // Step layout, packed: query_start | context_len | block_tables | token_seq | tiles.
  const int32_t S = step->num_seqs, maxb = step->max_blocks_per_seq;
  std::vector<int32_t> meta;
  meta.insert(meta.end(), step->query_start, step->query_start + S + 1);
  meta.insert(meta.end(), step->context_len, step->context_len + S);
  meta.insert(meta.end(), step->block_tables, step->block_tables + static_cast<size_t>(S) * static_cast<size_t>(maxb));
  const size_t token_seq_at = meta.size();
  a.decode_only = true;
  a.max_context = 0;
  for (int32_t i = 0; i < S; ++i) {
    const int32_t n = step->query_start[i + 1] - step->query_start[i];
    a.decode_only = a.decode_only && n == 1;
    a.max_context = std::max(a.max_context, step->context_len[i]);
    for (int32_t j = 0; j < n; ++j) meta.push_back(i);
  }
  const size_t tiles_at = meta.size();
  for (int32_t i = 0; i < S; ++i)
    for (int32_t t = step->query_start[i]; t < step->query_start[i + 1]; t += kQueryTile) {
      meta.insert(meta.end(), {i, t, std::min(kQueryTile, step->query_start[i + 1] - t)});
      ++a.num_tiles;
    }
  auto stream = static_cast<cudaStream_t>(sy::plugin::device_stream(SY_DEVICE_CUDA));
  DeviceBuffer dmeta(SY_DEVICE_CUDA, meta.size() * sizeof(int32_t));
  if (cudaMemcpyAsync(dmeta.get(), meta.data(), meta.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream) != cudaSuccess)
    throw Error("PagedAttention: uploading the step layout failed", SY_INVALID_ARGUMENT);
  const int32_t* m = dmeta.as<int32_t>();
  a.query_start = m;
  a.context_len = m + S + 1;
  a.block_tables = m + 2 * S + 1;
  a.token_seq = m + token_seq_at;
  a.tiles = m + tiles_at;
  a.num_seqs = S;
  a.max_blocks_per_seq = maxb;
  a.window = cpu_.window();
  a.scale = cpu_.scale();
  a.q = q.data<float>();
  a.k_new = kn.data<float>();
  a.v_new = vn.data<float>();
  a.key_cache = static_cast<float*>(kc.data);
  a.value_cache = static_cast<float*>(vc.data);
  auto out = io.allocate_output(0, SY_DTYPE_FLOAT32, q.dims());
  a.out = out.data<float>();
  DeviceBuffer scratch;
  if (int64_t floats = cuda_attention_scratch_floats(a)) {
    scratch = DeviceBuffer(SY_DEVICE_CUDA, static_cast<size_t>(floats) * sizeof(float));
    a.scratch = scratch.as<float>();
  }
  if (const char* err = cuda_paged_attention(a, stream)) throw Error(std::string("PagedAttention: ") + err, SY_INVALID_ARGUMENT);
  // dmeta and scratch return to the caching allocator here; later users of
  // those blocks are ordered after these kernels on the same stream.
}

}  // namespace sy_attention
