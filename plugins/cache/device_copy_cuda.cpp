// KV storage in CUDA memory: copy-on-write of a shared prefix block is a
// device-to-device copy on the session's stream, so it is ordered before the
// attention kernel that writes the new tokens into the copy.
#include <cuda_runtime_api.h>

#include <switchyard/plugin.hpp>

#include "block_cache.h"

namespace sy_cache {

namespace {
void cuda_copy(void* dst, const void* src, size_t bytes) {
  auto stream = static_cast<cudaStream_t>(sy::plugin::device_stream(SY_DEVICE_CUDA));
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream);
  if (e != cudaSuccess) throw sy::plugin::Error(std::string("copying a KV block: ") + cudaGetErrorString(e), SY_INVALID_ARGUMENT);
}
}  // namespace

DeviceCopy device_copy_for(int32_t device) { return device == SY_DEVICE_CUDA ? cuda_copy : nullptr; }

}  // namespace sy_cache
