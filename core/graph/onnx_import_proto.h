// Import of a ModelProto already in memory (the GGUF builder's): the same
// checks, checker and shape inference as a file. Only core/graph includes
// this header; nothing outside it sees protobuf.
#pragma once
#include <onnx/onnx_pb.h>

#include <string>

#include "graph/graph.h"
#include "graph/onnx_import.h"

namespace sy {

// Consumes the initializers' raw data (moved into the graph's tensors).
Graph import_onnx_model(onnx::ModelProto& model, const std::string& model_dir, const std::string& label,
                        const ImportOptions& options = {});

}  // namespace sy
