// Where a tensor's bytes live and where a kernel runs. The numbering matches
// SY_DEVICE_* in the plugin ABI.
#pragma once

namespace sy {

enum class Device { CPU = 0, CUDA = 1 };
const char* device_name(Device d);

}  // namespace sy
