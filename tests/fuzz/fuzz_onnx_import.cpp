// libFuzzer target: bytes -> ONNX import (protobuf parse, checker, shape
// inference, initializer and external-data checks) -> load-time
// simplification (constant folding runs the real kernels). Any input must end
// in a graph or a sy::Error, never a crash, leak or sanitizer report.
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/error.h"
#include "graph/onnx_import.h"
#include "kernels/registry.h"
#include "passes/pass.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const sy::KernelRegistry registry = sy::KernelRegistry::with_builtins();
  sy::ImportOptions options;
  options.max_file_bytes = 1 << 20;
  try {
    // External data would resolve inside this (missing) folder: refused, never read.
    sy::Graph g = sy::import_onnx_bytes(std::string(reinterpret_cast<const char*>(data), size), "/nonexistent/fuzz", "fuzz.onnx", options);
    sy::PassContext ctx{registry, nullptr, {}};
    sy::simplify_graph(g, ctx);
    (void)g.topological_order();
  } catch (const sy::Error&) {
  }
  return 0;
}
