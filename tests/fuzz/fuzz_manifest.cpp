// libFuzzer target: YAML text -> manifest parse -> every profile resolved.
// Errors must be sy::Error naming file, line and key; nothing else escapes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/error.h"
#include "manifest/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    sy::Manifest m = sy::Manifest::parse(std::string(reinterpret_cast<const char*>(data), size), "/nonexistent/fuzz/manifest.yaml");
    (void)m.resolve("");
    for (const auto& p : m.profile_names()) (void)m.resolve(p);
  } catch (const sy::Error&) {
  }
  return 0;
}
