// Without CUDA the cache plugin keeps KV in host memory only.
#include "block_cache.h"

namespace sy_cache {

DeviceCopy device_copy_for(int32_t) { return nullptr; }

}  // namespace sy_cache
