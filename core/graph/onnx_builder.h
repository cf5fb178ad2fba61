// Writes ONNX graphs node by node (the GGUF importer's decoder,
// graph/gguf_model.cpp). Only core/graph includes it: it brings protobuf's
// classes, and tools/ sees only the facade (tools/synth keeps its own
// writer for that reason).
#pragma once
#include <onnx/onnx_pb.h>

#include <cctype>
#include <string>
#include <vector>

namespace sy {

class OnnxBuilder {
 public:
  explicit OnnxBuilder(const std::string& graph_name) {
    g_ = model_.mutable_graph();
    g_->set_name(graph_name);
  }

  // A node named `name` whose outputs are name_out (or name_out0, name_out1,
  // ... for several); returns the first.
  std::string node(const std::string& op, const std::vector<std::string>& in, const std::string& name, const std::string& domain = "",
                   int outputs = 1, std::vector<std::string>* outs = nullptr) {
    auto* n = g_->add_node();
    n->set_op_type(op);
    n->set_name(name);
    if (!domain.empty()) n->set_domain(domain);
    for (const auto& i : in) n->add_input(i);
    std::string first;
    for (int k = 0; k < outputs; ++k) {
      std::string o = name + (outputs > 1 ? "_out" + std::to_string(k) : "_out");
      n->add_output(o);
      if (k == 0) first = o;
      if (outs) outs->push_back(o);
    }
    last_ = n;
    return first;
  }
  void attr_int(const std::string& k, int64_t v) {
    auto* a = last_->add_attribute();
    a->set_name(k);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  void attr_ints(const std::string& k, const std::vector<int64_t>& v) {
    auto* a = last_->add_attribute();
    a->set_name(k);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  // Graph outputs carry fixed names: renames the last node's output.
  void rename_last_output(const std::string& to) { last_->set_output(0, to); }

  std::string ints(const std::string& name, const std::vector<int64_t>& v, bool scalar = false) {
    auto* t = g_->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    if (!scalar) t->add_dims(static_cast<int64_t>(v.size()));
    for (int64_t x : v) t->add_int64_data(x);
    return name;
  }
  std::string scalar(const std::string& name, float v) {
    auto* t = g_->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_float_data(v);
    return name;
  }
  // An initializer with its bytes inline (raw_data).
  template <typename T>
  std::string tensor(const std::string& name, int32_t type, const std::vector<int64_t>& dims, const std::vector<T>& data) {
    onnx::TensorProto* t = initializer(name, type, dims);
    t->set_raw_data(data.data(), data.size() * sizeof(T));
    return name;
  }
  // An initializer without data yet (a caller that places it elsewhere).
  onnx::TensorProto* initializer(const std::string& name, int32_t type, const std::vector<int64_t>& dims) {
    auto* t = g_->add_initializer();
    t->set_name(name);
    t->set_data_type(type);
    for (int64_t d : dims) t->add_dims(d);
    return t;
  }
  // dims: numbers are static, anything else a named symbol.
  void input(const std::string& name, int32_t type, const std::vector<std::string>& dims) { io(g_->add_input(), name, type, dims); }
  void output(const std::string& name, int32_t type, const std::vector<std::string>& dims) { io(g_->add_output(), name, type, dims); }
  onnx::ModelProto& model() { return model_; }

 private:
  static void io(onnx::ValueInfoProto* vi, const std::string& name, int32_t type, const std::vector<std::string>& dims) {
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(type);
    for (const auto& d : dims) {
      auto* dim = tt->mutable_shape()->add_dim();
      if (!d.empty() && std::isdigit(static_cast<unsigned char>(d[0]))) dim->set_dim_value(std::stoll(d));
      else dim->set_dim_param(d);
    }
  }

  onnx::ModelProto model_;
  onnx::GraphProto* g_;
  onnx::NodeProto* last_ = nullptr;
};

}  // namespace sy
