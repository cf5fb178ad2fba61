// Real exports edited for tests: a copy of a model folder whose graph also
// outputs one intermediate value (so a pass that would remove it must leave
// its chain as exported), or whose values are renamed (another exporter's
// spelling of the same graph).
#pragma once
#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "test_support.h"

namespace sy::test {

// Copies `folder` (model.onnx and its tokenizer/config files) into `dir`,
// with output `output_index` of the first node `pick` accepts added as a
// graph output of rank `rank`; returns that node's name ("" if none).
inline std::string expose_intermediate(const std::string& folder, const TempDir& dir,
                                       const std::function<bool(const onnx::NodeProto&)>& pick, int rank, int output_index = 0) {
  onnx::ModelProto proto;
  {
    std::ifstream in(folder + "/model.onnx", std::ios::binary);
    if (!proto.ParseFromIstream(&in)) return "";
  }
  std::string node, value;
  for (const auto& n : proto.graph().node())
    if (pick(n)) {
      node = n.name();
      value = n.output(output_index);
      break;
    }
  if (node.empty()) return "";
  auto* out = proto.mutable_graph()->add_output();
  out->set_name(value);
  auto* type = out->mutable_type()->mutable_tensor_type();
  type->set_elem_type(onnx::TensorProto::FLOAT);
  for (int i = 0; i < rank; ++i) type->mutable_shape()->add_dim()->set_dim_param("d" + std::to_string(i));
  std::ofstream o(dir.path / "model.onnx", std::ios::binary);
  proto.SerializeToOstream(&o);
  for (const auto& e : std::filesystem::directory_iterator(folder))
    if (e.path().filename() != "model.onnx") std::filesystem::copy_file(e.path(), dir.path / e.path().filename());
  return node;
}

// Copies `folder` into `dir` with every value name n (inputs, outputs and
// node operands) replaced by rename(n).
inline bool rename_values(const std::string& folder, const TempDir& dir, const std::function<std::string(const std::string&)>& rename) {
  onnx::ModelProto proto;
  {
    std::ifstream in(folder + "/model.onnx", std::ios::binary);
    if (!proto.ParseFromIstream(&in)) return false;
  }
  auto* g = proto.mutable_graph();
  for (auto& v : *g->mutable_input()) v.set_name(rename(v.name()));
  for (auto& v : *g->mutable_output()) v.set_name(rename(v.name()));
  for (auto& n : *g->mutable_node()) {
    for (auto& i : *n.mutable_input()) i = rename(i);
    for (auto& o : *n.mutable_output()) o = rename(o);
  }
  std::ofstream o(dir.path / "model.onnx", std::ios::binary);
  proto.SerializeToOstream(&o);
  for (const auto& e : std::filesystem::directory_iterator(folder))
    if (e.path().filename() != "model.onnx") std::filesystem::copy_file(e.path(), dir.path / e.path().filename());
  return true;
}

}  // namespace sy::test
