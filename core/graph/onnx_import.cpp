#include "graph/onnx_import.h"

#include "graph/onnx_import_proto.h"

#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace sy {
namespace fs = std::filesystem;
namespace {

struct Ctx {
  std::string label;      // file name used in messages
  fs::path model_dir;     // external data must stay inside it
};

std::vector<Dim> convert_shape(const onnx::TensorShapeProto& s) {
  std::vector<Dim> dims;
  for (const auto& d : s.dim()) {
    if (d.has_dim_value()) dims.push_back(Dim{d.dim_value(), {}});
    else dims.push_back(Dim{-1, d.dim_param()});
  }
  return dims;
}

void apply_type(Value& v, const onnx::TypeProto& t) {
  if (!t.has_tensor_type()) return;
  const auto& tt = t.tensor_type();
  if (tt.elem_type() != 0 && dtype_is_known(tt.elem_type())) v.dtype = static_cast<DType>(tt.elem_type());
  if (tt.has_shape()) v.shape = convert_shape(tt.shape());
}

// The external data file of `t`, which must resolve (symlinks included) to a
// path inside the model's folder.
fs::path resolve_external(const Ctx& ctx, const onnx::TensorProto& t) {
  std::string location;
  for (const auto& kv : t.external_data())
    if (kv.key() == "location") location = kv.value();
  SY_CHECK(!location.empty(), ctx.label << ": initializer '" << t.name() << "' has external data without a location");
  fs::path rel(location);
  SY_CHECK(!rel.is_absolute(), ctx.label << ": initializer '" << t.name() << "': external data path '" << location
                                         << "' is absolute; it must be relative to the model's folder");
  fs::path base = fs::weakly_canonical(ctx.model_dir);
  fs::path full = fs::weakly_canonical(base / rel);
  auto [b_end, f_it] = std::mismatch(base.begin(), base.end(), full.begin(), full.end());
  SY_CHECK(b_end == base.end(), ctx.label << ": initializer '" << t.name() << "': external data path '" << location
                                          << "' resolves outside the model's folder " << base.string());
  return full;
}

std::shared_ptr<void> read_external(const Ctx& ctx, const onnx::TensorProto& t, size_t expected, void** data) {
  int64_t offset = 0, length = -1;
  for (const auto& kv : t.external_data()) {
    try {
      if (kv.key() == "offset") offset = std::stoll(kv.value());
      else if (kv.key() == "length") length = std::stoll(kv.value());
    } catch (const std::exception&) {
      SY_THROW(ctx.label << ": initializer '" << t.name() << "': external data " << kv.key() << " '" << kv.value()
                         << "' is not a number");
    }
  }
  fs::path full = resolve_external(ctx, t);
  std::ifstream in(full, std::ios::binary);
  SY_CHECK_KIND(in, ErrorKind::NotFound, ctx.label << ": initializer '" << t.name() << "': cannot open external data file " << full.string());
  in.seekg(0, std::ios::end);
  auto file_size = static_cast<int64_t>(in.tellg());
  if (length < 0) length = file_size - offset;
  SY_CHECK(offset >= 0 && offset + length <= file_size,
           ctx.label << ": initializer '" << t.name() << "': external data range [" << offset << ", " << offset + length
                     << ") is past the end of " << full.string() << " (" << file_size << " bytes)");
  SY_CHECK(static_cast<size_t>(length) == expected, ctx.label << ": initializer '" << t.name() << "' needs " << expected
                                                              << " bytes but its external data has " << length);
  // Read into ordinary (anonymous) memory rather than mmap: the kernel pages
  // out idle file-backed pages here, and re-reading weights mid-decode costs
  // more than the copy at load.
  Tensor holder = Tensor::empty(DType::U8, Shape{static_cast<int64_t>(std::max<size_t>(expected, 1))});
  in.seekg(offset);
  in.read(static_cast<char*>(holder.raw()), length);
  SY_CHECK(in.good() || length == 0, ctx.label << ": initializer '" << t.name() << "': reading external data failed");
  *data = holder.raw();
  return holder.holder();
}

template <typename Src, typename Dst>
void copy_typed(const Src& field, Dst* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<Dst>(field[static_cast<int>(i)]);
}

// Converts a TensorProto, taking ownership of its raw bytes where it can.
Tensor convert_tensor(const Ctx& ctx, onnx::TensorProto& t) {
  SY_CHECK(dtype_is_known(t.data_type()) && t.data_type() != onnx::TensorProto::STRING,
           ctx.label << ": tensor '" << t.name() << "' has unsupported data type " << t.data_type());
  DType dt = static_cast<DType>(t.data_type());
  Shape shape;
  // Element count without overflow: a header may claim any size, and
  // nothing is allocated before the data that backs it is checked.
  constexpr int64_t kMaxElements = int64_t{1} << 40;
  int64_t n_elements = 1;
  for (int64_t d : t.dims()) {
    SY_CHECK(d >= 0, ctx.label << ": tensor '" << t.name() << "' has a negative dimension");
    SY_CHECK(d == 0 || n_elements <= kMaxElements / d,
             ctx.label << ": tensor '" << t.name() << "' claims more than 2^40 elements");
    n_elements *= d;
    shape.push_back(d);
  }
  size_t n = static_cast<size_t>(n_elements);
  size_t bytes = n * dtype_size(dt);
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    void* data = nullptr;
    auto holder = read_external(ctx, t, bytes, &data);
    return Tensor(dt, shape, std::move(holder), data);
  }
  if (t.has_raw_data()) {
    SY_CHECK(t.raw_data().size() == bytes, ctx.label << ": initializer '" << t.name() << "' of shape " << shape.str()
                                                     << " and type " << dtype_name(dt) << " needs " << bytes
                                                     << " bytes but raw_data has " << t.raw_data().size());
    // Zero copy: the protobuf string's buffer becomes the tensor's storage,
    // except for large tensors (weights), copied once into a buffer on huge
    // pages (Tensor::empty) that decode streams through with fewer TLB misses.
    auto owned = std::make_shared<std::string>(std::move(*t.mutable_raw_data()));
    void* data = owned->data();
    if (bytes >= kHugePageBytes || reinterpret_cast<uintptr_t>(data) % std::max<size_t>(dtype_size(dt), 1) != 0) {
      Tensor copy = Tensor::empty(dt, shape);
      std::memcpy(copy.raw(), owned->data(), bytes);
      return copy;
    }
    return Tensor(dt, shape, std::shared_ptr<void>(owned, data), data);
  }
  // Typed fields: the value count must match before anything is allocated.
  int have = 0;
  switch (dt) {
    case DType::F32: have = t.float_data_size(); break;
    case DType::F64: have = t.double_data_size(); break;
    case DType::I64: have = t.int64_data_size(); break;
    case DType::U32: case DType::U64: have = t.uint64_data_size(); break;
    default: have = t.int32_data_size(); break;
  }
  SY_CHECK(static_cast<size_t>(have) == n, ctx.label << ": initializer '" << t.name() << "' of shape " << shape.str() << " has " << have
                                                     << " values, expected " << n);
  Tensor out = Tensor::empty(dt, shape);
  switch (dt) {
    case DType::F32: copy_typed(t.float_data(), out.data<float>(), n); break;
    case DType::F64: copy_typed(t.double_data(), out.data<double>(), n); break;
    case DType::I64: copy_typed(t.int64_data(), out.data<int64_t>(), n); break;
    case DType::U32: case DType::U64:
      if (dt == DType::U64) copy_typed(t.uint64_data(), out.data<uint64_t>(), n);
      else copy_typed(t.uint64_data(), out.data<uint32_t>(), n);
      break;
    case DType::I32: copy_typed(t.int32_data(), out.data<int32_t>(), n); break;
    case DType::I16: copy_typed(t.int32_data(), out.data<int16_t>(), n); break;
    case DType::U16: case DType::F16: case DType::BF16:
      copy_typed(t.int32_data(), out.data<uint16_t>(), n); break;
    case DType::I8: copy_typed(t.int32_data(), out.data<int8_t>(), n); break;
    case DType::U8: copy_typed(t.int32_data(), out.data<uint8_t>(), n); break;
    case DType::Bool: copy_typed(t.int32_data(), out.data<bool>(), n); break;
    default: SY_THROW(ctx.label << ": tensor '" << t.name() << "' has unsupported type " << dtype_name(dt));
  }
  return out;
}

Attribute convert_attribute(const Ctx& ctx, const Node& node, onnx::AttributeProto& a) {
  using A = onnx::AttributeProto;
  switch (a.type()) {
    case A::FLOAT: return a.f();
    case A::INT: return a.i();
    case A::STRING: return a.s();
    case A::TENSOR: return convert_tensor(ctx, *a.mutable_t());
    case A::FLOATS: return std::vector<float>(a.floats().begin(), a.floats().end());
    case A::INTS: return std::vector<int64_t>(a.ints().begin(), a.ints().end());
    case A::STRINGS: return std::vector<std::string>(a.strings().begin(), a.strings().end());
    default:
      SY_THROW(ctx.label << ": " << node.display_name() << ": attribute '" << a.name()
                         << "' has a type the engine does not support (subgraphs and sparse tensors are not supported)");
  }
}

// ONNX 1.12's shape inference dereferences the missing type of a value that
// an op it has no schema for produced, and crashes the process. Outputs of
// the weight-only quantized matmuls (float A in, float Y out) get their type
// declared; if any other custom-domain output is left untyped, shape
// inference is skipped (the executor resolves shapes at run time).
bool custom_outputs_typed(onnx::ModelProto& model) {
  onnx::GraphProto& g = *model.mutable_graph();
  std::set<std::string> typed;
  for (const auto& vi : g.value_info()) typed.insert(vi.name());
  for (const auto& vi : g.output()) typed.insert(vi.name());
  bool all = true;
  for (const auto& n : g.node()) {
    const std::string& dom = n.domain();
    if (dom.empty() || dom == "ai.onnx" || dom == "ai.onnx.ml") continue;
    const bool float_matmul = (dom == "com.microsoft" && n.op_type() == "MatMulNBits") || (dom == "switchyard" && n.op_type() == "QMatMul");
    for (const auto& out : n.output()) {
      if (out.empty() || typed.count(out)) continue;
      if (float_matmul) {
        auto* vi = g.add_value_info();
        vi->set_name(out);
        vi->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
        typed.insert(out);
      } else {
        all = false;
      }
    }
  }
  return all;
}

// Ops ONNX Runtime registers in the default domain without an ONNX schema;
// exporters (onnxruntime-genai's model builder) emit them there.
bool is_runtime_default_domain_op(const onnx::NodeProto& n) {
  return (n.domain().empty() || n.domain() == "ai.onnx") && n.op_type() == "SimplifiedLayerNormalization";
}

// Lists every node whose (domain, op, opset) the ONNX schema registry does
// not know, all at once, before the checker would stop at the first one.
void check_known_ops(const Ctx& ctx, const onnx::ModelProto& m) {
  std::map<std::string, int> opsets;
  for (const auto& o : m.opset_import()) opsets[o.domain() == "ai.onnx" ? "" : o.domain()] = static_cast<int>(o.version());
  std::set<std::string> unknown;
  for (const auto& n : m.graph().node()) {
    std::string dom = n.domain() == "ai.onnx" ? "" : n.domain();
    if (!dom.empty() && dom != "ai.onnx.ml") continue;  // custom domains: a plugin may provide them
    if (is_runtime_default_domain_op(n)) continue;
    int ver = opsets.count(dom) ? opsets[dom] : 0;
    if (!onnx::OpSchemaRegistry::Schema(n.op_type(), ver, dom))
      unknown.insert((dom.empty() ? "ai.onnx" : dom) + "::" + n.op_type() + " (opset " + std::to_string(ver) + ")");
  }
  if (!unknown.empty()) {
    std::ostringstream os;
    os << ctx.label << ": unsupported operators (not in the ONNX schema for the model's opset):";
    for (const auto& u : unknown) os << " " << u << ";";
    throw Error(os.str());
  }
}

}  // namespace

Graph import_onnx_bytes(const std::string& bytes, const std::string& model_dir, const std::string& label,
                        const ImportOptions& options) {
  onnx::ModelProto model;
  SY_CHECK(!bytes.empty(), label << ": the file is empty");
  SY_CHECK(model.ParseFromString(bytes),
           label << ": not a valid ONNX model (protobuf parsing failed: the file is truncated or corrupt)");
  return import_onnx_model(model, model_dir, label, options);
}

Graph import_onnx_model(onnx::ModelProto& model, const std::string& model_dir, const std::string& label,
                        const ImportOptions& options) {
  Ctx ctx{label, model_dir.empty() ? fs::current_path() : fs::path(model_dir)};
  SY_CHECK(model.has_graph(), label << ": the model has no graph");
  // A model newer than the ONNX library this engine was built with cannot be
  // judged by its schemas (ops and signatures changed since); such a model is
  // checked by the executor instead, which lists every node it cannot run.
  int64_t model_opset = 0;
  for (const auto& o : model.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") model_opset = o.version();
  const int64_t known_opset = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map().at("").second;
  const bool schemas_apply = model_opset <= known_opset;
  if (schemas_apply) check_known_ops(ctx, model);
  // The checker refuses ops without a schema in the default domain.
  bool runtime_ops = false;
  for (const auto& n : model.graph().node()) runtime_ops = runtime_ops || is_runtime_default_domain_op(n);
  if (options.run_checker && schemas_apply && !runtime_ops) {
    // ONNX 1.12's checker resolves external data against the working
    // directory: give it the validated absolute paths, then restore them.
    std::vector<std::pair<onnx::StringStringEntryProto*, std::string>> restore;
    for (auto& init : *model.mutable_graph()->mutable_initializer()) {
      if (init.data_location() != onnx::TensorProto::EXTERNAL) continue;
      fs::path full = resolve_external(ctx, init);
      for (auto& kv : *init.mutable_external_data())
        if (kv.key() == "location") {
          restore.emplace_back(&kv, kv.value());
          kv.set_value(full.string());
        }
    }
    try {
      onnx::checker::check_model(model);
    } catch (const std::exception& e) {
      SY_THROW(label << ": ONNX checker: " << e.what());
    }
    for (auto& [kv, value] : restore) kv->set_value(value);
  }
  if (options.infer_shapes && schemas_apply && custom_outputs_typed(model)) {
    try {
      onnx::ShapeInferenceOptions so{false, 0, true};
      onnx::shape_inference::InferShapes(model, onnx::OpSchemaRegistry::Instance(), so);
    } catch (const std::exception&) {
      // Types and shapes of intermediates are hints for passes and inspect;
      // the executor resolves shapes at run time, so a model that shape
      // inference cannot follow still runs.
    }
  }

  Graph g;
  for (const auto& o : model.opset_import()) g.opsets[o.domain() == "ai.onnx" ? "" : o.domain()] = o.version();
  for (const auto& p : model.metadata_props()) g.metadata[p.key()] = p.value();
  onnx::GraphProto* gp = model.mutable_graph();
  std::unordered_map<std::string, ValueId> by_name;
  auto value_for = [&](const std::string& name) -> ValueId {
    auto it = by_name.find(name);
    if (it != by_name.end()) return it->second;
    Value v;
    v.name = name;
    ValueId id = g.add_value(std::move(v));
    by_name.emplace(name, id);
    return id;
  };

  const int64_t tensors = static_cast<int64_t>(gp->initializer_size()) + gp->node_size();
  SY_CHECK(options.max_tensors == 0 || tensors <= options.max_tensors,
           label << ": the model has " << gp->initializer_size() << " initializers and " << gp->node_size() << " nodes, over the limit of "
                 << options.max_tensors << " (limits.max_tensors)");
  for (auto& init : *gp->mutable_initializer()) {
    SY_CHECK(!by_name.count(init.name()), label << ": initializer '" << init.name() << "' is defined twice");
    ValueId id = value_for(init.name());
    Tensor t = convert_tensor(ctx, init);
    Value& v = g.values[static_cast<size_t>(id)];
    v.dtype = t.dtype();
    std::vector<Dim> dims;
    for (int64_t d : t.shape()) dims.push_back(Dim{d, {}});
    v.shape = dims;
    v.constant = std::move(t);
  }
  for (const auto& in : gp->input()) {
    ValueId id = value_for(in.name());
    Value& v = g.values[static_cast<size_t>(id)];
    if (v.constant) continue;  // IR < 4 style: initializers listed as inputs are constants here
    apply_type(v, in.type());
    v.is_graph_input = true;
    SY_CHECK(v.dtype != DType::Undefined, label << ": graph input '" << in.name() << "' has no supported tensor type");
    g.inputs.push_back(id);
  }
  for (const auto& vi : gp->value_info()) {
    ValueId id = value_for(vi.name());
    if (!g.values[static_cast<size_t>(id)].constant) apply_type(g.values[static_cast<size_t>(id)], vi.type());
  }
  for (auto& np : *gp->mutable_node()) {
    Node n;
    n.name = np.name();
    n.domain = np.domain() == "ai.onnx" ? "" : np.domain();
    n.op_type = np.op_type();
    for (const auto& in : np.input()) n.inputs.push_back(in.empty() ? kNoValue : value_for(in));
    for (const auto& out : np.output()) n.outputs.push_back(out.empty() ? kNoValue : value_for(out));
    for (auto& a : *np.mutable_attribute()) n.attrs[a.name()] = convert_attribute(ctx, n, a);
    g.add_node(std::move(n));
  }
  for (const auto& out : gp->output()) {
    auto it = by_name.find(out.name());
    SY_CHECK(it != by_name.end(), label << ": graph output '" << out.name() << "' is not produced by any node");
    apply_type(g.values[static_cast<size_t>(it->second)], out.type());
    g.outputs.push_back(GraphOutput{out.name(), it->second});
  }
  // A node input nobody produces (a missing graph input) is reported by
  // topological_order() with the node and value names.
  std::vector<NodeId> order = g.topological_order();
  if (options.max_graph_depth > 0) {
    std::vector<NodeId> producer = g.producers();
    std::vector<int64_t> depth(g.nodes.size(), 0);
    for (NodeId n : order) {
      int64_t d = 0;
      for (ValueId v : g.nodes[static_cast<size_t>(n)].inputs)
        if (v != kNoValue && producer[static_cast<size_t>(v)] >= 0) d = std::max(d, depth[static_cast<size_t>(producer[static_cast<size_t>(v)])]);
      depth[static_cast<size_t>(n)] = d + 1;
      SY_CHECK(d + 1 <= options.max_graph_depth, label << ": node '" << g.nodes[static_cast<size_t>(n)].name << "' is " << d + 1
                                                      << " nodes deep, over the limit of " << options.max_graph_depth
                                                      << " (limits.max_graph_depth)");
    }
  }
  return g;
}

Graph import_onnx_file(const std::string& path, const ImportOptions& options) {
  std::error_code ec;
  SY_CHECK(!fs::exists(path, ec) || fs::is_regular_file(path, ec), path << ": not a regular file (a device or a directory)");
  std::ifstream in(path, std::ios::binary);
  SY_CHECK_KIND(in, ErrorKind::NotFound, path << ": cannot open the model file");
  in.seekg(0, std::ios::end);
  auto size = static_cast<uint64_t>(in.tellg());
  SY_CHECK(options.max_file_bytes == 0 || size <= options.max_file_bytes,
           path << ": the model file has " << size << " bytes, over the limit of " << options.max_file_bytes);
  std::string bytes(size, '\0');
  in.seekg(0);
  in.read(bytes.data(), static_cast<std::streamsize>(size));
  SY_CHECK(in.good() || size == 0, path << ": reading the model file failed");
  fs::path p(path);
  return import_onnx_bytes(bytes, p.has_parent_path() ? p.parent_path().string() : ".", path, options);
}

}  // namespace sy
