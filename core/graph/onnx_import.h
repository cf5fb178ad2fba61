// ONNX import: bytes or a file in, a checked Graph out. Uses ONNX's own
// protobuf classes, checker and shape inference; nothing of ONNX or
// protobuf appears in the Graph it returns (plugins never see them).
#pragma once
#include <string>

#include "graph/graph.h"

namespace sy {

struct ImportOptions {
  bool run_checker = true;
  bool infer_shapes = true;
  // Limits against hostile files. 0 = no limit.
  uint64_t max_file_bytes = 0;   // the .onnx file (external data is checked against its own file size)
  int64_t max_tensors = 0;       // initializers plus nodes
  int64_t max_graph_depth = 0;   // longest chain of nodes from an input to an output
};

// Throws sy::Error naming the file and the problem: unreadable or truncated
// file, every op the ONNX schema registry does not know (all at once), a
// checker failure, an initializer whose data does not match its shape, an
// external-data path that leaves the model's folder, ...
Graph import_onnx_file(const std::string& path, const ImportOptions& options = {});
Graph import_onnx_bytes(const std::string& bytes, const std::string& model_dir, const std::string& label,
                        const ImportOptions& options = {});

}  // namespace sy
