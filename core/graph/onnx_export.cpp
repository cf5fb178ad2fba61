#include "graph/onnx_export.h"

#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "base/error.h"

namespace sy {

namespace {

void set_type(onnx::ValueInfoProto& vi, const Value& v) {
  auto* tt = vi.mutable_type()->mutable_tensor_type();
  tt->set_elem_type(static_cast<int32_t>(v.dtype));
  if (!v.shape) return;
  auto* shape = tt->mutable_shape();
  for (const Dim& d : *v.shape) {
    auto* dim = shape->add_dim();
    if (d.is_static()) dim->set_dim_value(d.value);
    else if (!d.symbol.empty()) dim->set_dim_param(d.symbol);
  }
}

void set_tensor(onnx::TensorProto& t, const std::string& name, const Tensor& value) {
  t.set_name(name);
  t.set_data_type(static_cast<int32_t>(value.dtype()));
  for (int64_t d : value.shape().dims()) t.add_dims(d);
  t.set_raw_data(value.raw(), value.bytes());
}

void set_attribute(onnx::AttributeProto& a, const std::string& key, const Attribute& value) {
  a.set_name(key);
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          a.set_type(onnx::AttributeProto::INT);
          a.set_i(v);
        } else if constexpr (std::is_same_v<T, float>) {
          a.set_type(onnx::AttributeProto::FLOAT);
          a.set_f(v);
        } else if constexpr (std::is_same_v<T, std::string>) {
          a.set_type(onnx::AttributeProto::STRING);
          a.set_s(v);
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          a.set_type(onnx::AttributeProto::INTS);
          for (int64_t x : v) a.add_ints(x);
        } else if constexpr (std::is_same_v<T, std::vector<float>>) {
          a.set_type(onnx::AttributeProto::FLOATS);
          for (float x : v) a.add_floats(x);
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          a.set_type(onnx::AttributeProto::STRINGS);
          for (const auto& x : v) a.add_strings(x);
        } else {
          a.set_type(onnx::AttributeProto::TENSOR);
          set_tensor(*a.mutable_t(), key, v);
        }
      },
      value);
}

}  // namespace

ExportSummary export_onnx_file(const Graph& g, const std::string& path, const ExportOptions& options) {
  ExportSummary summary;
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.set_producer_name(options.producer);
  for (const auto& [key, value] : g.metadata) {
    auto* p = model.add_metadata_props();
    p->set_key(key);
    p->set_value(value);
  }
  std::map<std::string, int64_t> opsets = g.opsets;
  const std::vector<NodeId> order = g.topological_order();
  for (NodeId id : order) {
    const Node& n = g.nodes[static_cast<size_t>(id)];
    if (!opsets.count(n.domain)) opsets[n.domain] = 1;
  }
  for (const auto& [domain, version] : opsets) {
    auto* o = model.add_opset_import();
    o->set_domain(domain);
    o->set_version(version);
  }
  onnx::GraphProto& gp = *model.mutable_graph();
  gp.set_name("switchyard_optimized");

  // Value names: ONNX names a graph output by its value, so a value behind an
  // output takes the output's name unless another value already has it.
  std::vector<std::string> names(g.values.size());
  std::set<std::string> taken;
  for (size_t i = 0; i < g.values.size(); ++i) taken.insert(names[i] = g.values[i].name);
  std::vector<std::pair<ValueId, std::string>> identity_outputs;
  for (const GraphOutput& o : g.outputs) {
    std::string& current = names[static_cast<size_t>(o.value)];
    if (current == o.name) continue;
    const bool is_input_or_constant = g.values[static_cast<size_t>(o.value)].is_graph_input || g.values[static_cast<size_t>(o.value)].constant;
    if (!taken.count(o.name) && !is_input_or_constant) {
      taken.insert(o.name);
      current = o.name;
    } else {
      identity_outputs.emplace_back(o.value, o.name);
    }
  }

  for (ValueId v : g.inputs) {
    auto* vi = gp.add_input();
    set_type(*vi, g.values[static_cast<size_t>(v)]);
    vi->set_name(names[static_cast<size_t>(v)]);
  }

  // Constants in use become initializers.
  std::vector<int> uses = g.use_counts();
  std::vector<ValueId> constants;
  for (size_t i = 0; i < g.values.size(); ++i)
    if (g.values[i].constant && !g.values[i].is_graph_input && uses[i] > 0) {
      constants.push_back(static_cast<ValueId>(i));
      summary.initializer_bytes += g.values[i].constant->bytes();
    }
  summary.initializers = constants.size();
  summary.external_data = summary.initializer_bytes > options.external_data_threshold;
  const std::filesystem::path data_path = path + ".data";
  std::ofstream data;
  uint64_t offset = 0;
  if (summary.external_data) {
    data.open(data_path, std::ios::binary | std::ios::trunc);
    SY_CHECK(data, path << ": cannot write the external data file " << data_path.string());
  }
  for (ValueId v : constants) {
    const Tensor& t = *g.values[static_cast<size_t>(v)].constant;
    onnx::TensorProto& tp = *gp.add_initializer();
    if (summary.external_data && t.bytes() >= 1024) {
      tp.set_name(names[static_cast<size_t>(v)]);
      tp.set_data_type(static_cast<int32_t>(t.dtype()));
      for (int64_t d : t.shape().dims()) tp.add_dims(d);
      tp.set_data_location(onnx::TensorProto::EXTERNAL);
      auto kv = [&](const char* k, const std::string& val) {
        auto* e = tp.add_external_data();
        e->set_key(k);
        e->set_value(val);
      };
      kv("location", data_path.filename().string());
      kv("offset", std::to_string(offset));
      kv("length", std::to_string(t.bytes()));
      data.write(static_cast<const char*>(t.raw()), static_cast<std::streamsize>(t.bytes()));
      offset += t.bytes();
    } else {
      set_tensor(tp, names[static_cast<size_t>(v)], t);
    }
  }
  if (summary.external_data) SY_CHECK(data.good(), path << ": writing " << data_path.string() << " failed");

  for (NodeId id : order) {
    const Node& n = g.nodes[static_cast<size_t>(id)];
    onnx::NodeProto& np = *gp.add_node();
    np.set_name(n.name);
    np.set_op_type(n.op_type);
    np.set_domain(n.domain);
    for (ValueId v : n.inputs) np.add_input(v == kNoValue ? "" : names[static_cast<size_t>(v)]);
    for (ValueId v : n.outputs) np.add_output(v == kNoValue ? "" : names[static_cast<size_t>(v)]);
    for (const auto& [key, value] : n.attrs) set_attribute(*np.add_attribute(), key, value);
    // Types of what the node produces, so the reader needs no custom-op inference.
    for (ValueId v : n.outputs) {
      const Value& val = g.values[static_cast<size_t>(v)];
      if (v == kNoValue || val.dtype == DType::Undefined) continue;
      auto* vi = gp.add_value_info();
      vi->set_name(names[static_cast<size_t>(v)]);
      set_type(*vi, val);
    }
    ++summary.nodes;
  }
  for (const auto& [v, name] : identity_outputs) {
    onnx::NodeProto& np = *gp.add_node();
    np.set_name(name + "_identity");
    np.set_op_type("Identity");
    np.add_input(names[static_cast<size_t>(v)]);
    np.add_output(name);
    ++summary.nodes;
  }
  for (const GraphOutput& o : g.outputs) {
    auto* vi = gp.add_output();
    set_type(*vi, g.values[static_cast<size_t>(o.value)]);
    vi->set_name(o.name);
  }
  // value_info must not repeat graph outputs.
  std::set<std::string> output_names;
  for (const GraphOutput& o : g.outputs) output_names.insert(o.name);
  auto* infos = gp.mutable_value_info();
  for (int i = infos->size() - 1; i >= 0; --i)
    if (output_names.count(infos->Get(i).name())) infos->DeleteSubrange(i, 1);

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  SY_CHECK(out, "cannot write " << path);
  SY_CHECK(model.SerializeToOstream(&out), path << ": serialising the model failed");
  return summary;
}

}  // namespace sy
