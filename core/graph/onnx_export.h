// ONNX export: the inverse of import, for `switchyard optimize`. Writes a
// Graph (as rewritten by passes: quantized weights, fused attention) as an
// ONNX model that import_onnx_file reads back into the same graph. Custom
// domains get an opset import of version 1; large models keep their tensors
// in one external-data file beside the model.
#pragma once
#include <string>

#include "graph/graph.h"

namespace sy {

struct ExportOptions {
  // Tensors go to "<file>.data" when all constants together exceed this many
  // bytes (protobuf refuses messages over 2 GiB).
  uint64_t external_data_threshold = uint64_t{1} << 30;
  std::string producer = "switchyard optimize";
};

struct ExportSummary {
  size_t nodes = 0, initializers = 0;
  uint64_t initializer_bytes = 0;
  bool external_data = false;
};

ExportSummary export_onnx_file(const Graph& g, const std::string& path, const ExportOptions& options = {});

}  // namespace sy
