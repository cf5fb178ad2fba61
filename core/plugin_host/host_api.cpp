#include "plugin_host/host_api.h"

#include "device/device_registry.h"
#include "kernels/small_gemm.h"
#include "passes/graph_eval.h"

#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <utility>

namespace sy {
namespace {

thread_local std::string t_plugin_error;    // set by plugins (set_error)
thread_local std::string t_host_error;      // set by host functions that fail
thread_local const std::string* t_plugin = nullptr;
thread_local const HostContext* t_host = nullptr;  // the calling session's (PluginCall)

// Every host function body runs inside this: exceptions become a status and
// a message readable through last_error().
template <typename F>
sy_status host_call(F&& f) noexcept {
  try {
    f();
    return SY_OK;
  } catch (const std::exception& e) {
    t_host_error = e.what();
    return SY_INVALID_ARGUMENT;
  } catch (...) {
    t_host_error = "unknown error";
    return SY_ERROR;
  }
}

Graph& G(sy_graph* g) { return *g->graph; }
const Graph& G(const sy_graph* g) { return *g->graph; }

const Node& node_at(const Graph& g, sy_node_id n) {
  SY_CHECK(n >= 0 && static_cast<size_t>(n) < g.nodes.size(), "node id " << n << " is out of range");
  return g.nodes[static_cast<size_t>(n)];
}
Node& node_at(Graph& g, sy_node_id n) {
  SY_CHECK(n >= 0 && static_cast<size_t>(n) < g.nodes.size(), "node id " << n << " is out of range");
  return g.nodes[static_cast<size_t>(n)];
}
const Value& value_at(const Graph& g, sy_value_id v) {
  SY_CHECK(v >= 0 && static_cast<size_t>(v) < g.values.size(), "value id " << v << " is out of range");
  return g.values[static_cast<size_t>(v)];
}

template <typename T>
const T* attr_of(const Graph& g, sy_node_id n, const char* name) {
  const Attribute* a = node_at(g, n).attr(name);
  if (!a) throw Error(std::string("no attribute '") + name + "'");
  const T* v = std::get_if<T>(a);
  if (!v) throw Error(std::string("attribute '") + name + "' has another type");
  return v;
}

sy_tensor view_of(const Tensor& t) {
  return sy_tensor{static_cast<int32_t>(t.dtype()), t.rank(), t.shape().begin(), const_cast<void*>(t.raw()),
                   t.on_host() ? SY_DEVICE_CPU : SY_DEVICE_CUDA, 0};
}

// ---- errors, logging, memory, threads

void h_set_error(const char* message) { t_plugin_error = message ? message : ""; }
const char* h_last_error() { return t_host_error.c_str(); }
void h_log(int32_t level, const char* message) {
  static const int threshold = [] {
    const char* e = std::getenv("SWITCHYARD_LOG_LEVEL");
    return e ? std::atoi(e) : SY_LOG_WARNING;
  }();
  if (level < threshold) return;
  static const char* names[] = {"debug", "info", "warning", "error"};
  std::fprintf(stderr, "[%s] %s: %s\n", t_plugin ? t_plugin->c_str() : "plugin", names[std::clamp(level, 0, 3)],
               message ? message : "");
}
void* h_alloc(size_t bytes, size_t alignment) {
  if (alignment < sizeof(void*) || (alignment & (alignment - 1))) alignment = 64;
  return host_alloc(bytes, alignment);
}
void h_free(void* p) { std::free(p); }
// The calling session's device for a plugin's device request: only the
// device kind the session runs on exists for it.
std::shared_ptr<DeviceBackend> session_device(int32_t device) {
  if (device != SY_DEVICE_CUDA || !t_host || !t_host->device || t_host->device->kind() != Device::CUDA) return nullptr;
  return t_host->device;
}
sy_status h_device_alloc(int32_t device, size_t bytes, void** out) {
  if (device == SY_DEVICE_CPU) {
    *out = h_alloc(bytes, 64);
    return *out ? SY_OK : SY_OUT_OF_MEMORY;
  }
  std::shared_ptr<DeviceBackend> dev = session_device(device);
  if (!dev) {
    t_host_error = "device_alloc: this session runs on no CUDA device (device: cpu, or no GPU)";
    return SY_UNSUPPORTED;
  }
  // Device memory for plugins comes from the same caching allocator as the
  // executor's tensors, so its statistics and out-of-memory handling see it.
  return host_call([&] { *out = dev->allocator().allocate(bytes); }) == SY_OK ? SY_OK : SY_OUT_OF_MEMORY;
}
sy_status h_device_free(int32_t device, void* p) {
  if (device == SY_DEVICE_CPU) {
    std::free(p);
    return SY_OK;
  }
  std::shared_ptr<DeviceBackend> dev = session_device(device);
  if (!dev) {
    t_host_error = "device_free: this session runs on no CUDA device";
    return SY_UNSUPPORTED;
  }
  return host_call([&] { dev->allocator().deallocate(p); });
}
void* h_device_stream(int32_t device) {
  std::shared_ptr<DeviceBackend> dev = session_device(device);
  return dev ? dev->stream() : nullptr;
}
sy_status h_parallel_for(int64_t n, int64_t grain, sy_parallel_fn fn, void* user) {
  return host_call([&] {
    SY_CHECK(fn, "parallel_for: no function");
    if (!t_host || !t_host->threads) {
      fn(user, 0, n);
      return;
    }
    t_host->threads->parallel_for(n, grain, [&](int64_t b, int64_t e) { fn(user, b, e); });
  });
}
int32_t h_num_threads() { return t_host && t_host->threads ? t_host->threads->size() : 1; }

// ---- the float32 product (1.11)

// The core MatMul's few-row kernel, whatever M: it takes any number of
// rows, each with the bits it has alone (small_gemm.h).
sy_status h_matmul_f32(int32_t trans_b, int64_t M, int64_t n0, int64_t n1, int64_t K, const float* A, int64_t lda,
                       const float* B, int64_t ldb, float* C, int64_t ldc) {
  return host_call([&] {
    const bool tb = trans_b != 0;
    SY_CHECK(M >= 0 && K >= 0, "matmul_f32: negative size (M " << M << ", K " << K << ")");
    SY_CHECK(0 <= n0 && n0 <= n1, "matmul_f32: column range " << n0 << ".." << n1 << " is not a range");
    if (M == 0 || n0 == n1) return;
    SY_CHECK(A && B && C, "matmul_f32: a null matrix pointer");
    SY_CHECK(lda >= K, "matmul_f32: lda " << lda << " is shorter than K " << K);
    SY_CHECK(ldc >= n1, "matmul_f32: ldc " << ldc << " is shorter than the columns' end " << n1);
    SY_CHECK(tb ? ldb >= K : ldb >= n1, "matmul_f32: ldb " << ldb << " is shorter than " << (tb ? "K " : "the columns' end ")
                                                          << (tb ? K : n1));
    if (K == 0) {
      for (int64_t m = 0; m < M; ++m) std::fill(C + m * ldc + n0, C + m * ldc + n1, 0.f);
      return;
    }
    small_gemm(tb, M, n0, n1, K, 1.f, A, lda, B, ldb, 0.f, C, ldc);
  });
}

// ---- options

const OptionValue& option_at(const sy_options* o, const char* name) {
  SY_CHECK(o && o->values, "no options");
  const OptionValue* v = o->values->find(name);
  SY_CHECK(v, "no option '" << name << "' (it is not in the component's option schema)");
  return *v;
}
template <typename T>
const T& option_as(const sy_options* o, const char* name) {
  const T* v = std::get_if<T>(&option_at(o, name));
  SY_CHECK(v, "option '" << name << "' has another type");
  return *v;
}
sy_status h_option_bool(const sy_options* o, const char* name, int32_t* out) {
  return host_call([&] { *out = option_as<bool>(o, name) ? 1 : 0; });
}
sy_status h_option_int(const sy_options* o, const char* name, int64_t* out) {
  return host_call([&] { *out = option_as<int64_t>(o, name); });
}
sy_status h_option_float(const sy_options* o, const char* name, double* out) {
  return host_call([&] {
    const OptionValue& v = option_at(o, name);
    if (auto* i = std::get_if<int64_t>(&v)) *out = static_cast<double>(*i);
    else *out = option_as<double>(o, name);
  });
}
sy_status h_option_string(const sy_options* o, const char* name, const char** out) {
  return host_call([&] { *out = option_as<std::string>(o, name).c_str(); });
}

// ---- graph reading

int32_t h_node_count(const sy_graph* g) { return static_cast<int32_t>(G(g).nodes.size()); }
const char* h_node_op_type(const sy_graph* g, sy_node_id n) {
  if (n < 0 || static_cast<size_t>(n) >= G(g).nodes.size()) return "";
  const Node& node = G(g).nodes[static_cast<size_t>(n)];
  return node.dead ? "" : node.op_type.c_str();
}
const char* h_node_domain(const sy_graph* g, sy_node_id n) {
  if (n < 0 || static_cast<size_t>(n) >= G(g).nodes.size()) return "";
  return G(g).nodes[static_cast<size_t>(n)].domain.c_str();
}
const char* h_node_name(const sy_graph* g, sy_node_id n) {
  if (n < 0 || static_cast<size_t>(n) >= G(g).nodes.size()) return "";
  return G(g).nodes[static_cast<size_t>(n)].name.c_str();
}
int32_t h_node_input_count(const sy_graph* g, sy_node_id n) {
  if (n < 0 || static_cast<size_t>(n) >= G(g).nodes.size()) return 0;
  return static_cast<int32_t>(G(g).nodes[static_cast<size_t>(n)].inputs.size());
}
sy_value_id h_node_input(const sy_graph* g, sy_node_id n, int32_t i) {
  if (i < 0 || i >= h_node_input_count(g, n)) return SY_NO_VALUE;
  return G(g).nodes[static_cast<size_t>(n)].inputs[static_cast<size_t>(i)];
}
int32_t h_node_output_count(const sy_graph* g, sy_node_id n) {
  if (n < 0 || static_cast<size_t>(n) >= G(g).nodes.size()) return 0;
  return static_cast<int32_t>(G(g).nodes[static_cast<size_t>(n)].outputs.size());
}
sy_value_id h_node_output(const sy_graph* g, sy_node_id n, int32_t i) {
  if (i < 0 || i >= h_node_output_count(g, n)) return SY_NO_VALUE;
  return G(g).nodes[static_cast<size_t>(n)].outputs[static_cast<size_t>(i)];
}
sy_status h_node_attr_int(const sy_graph* g, sy_node_id n, const char* name, int64_t* out) {
  return host_call([&] { *out = *attr_of<int64_t>(G(g), n, name); });
}
sy_status h_node_attr_float(const sy_graph* g, sy_node_id n, const char* name, float* out) {
  return host_call([&] { *out = *attr_of<float>(G(g), n, name); });
}
sy_status h_node_attr_string(const sy_graph* g, sy_node_id n, const char* name, const char** out) {
  return host_call([&] { *out = attr_of<std::string>(G(g), n, name)->c_str(); });
}
sy_status h_node_attr_ints(const sy_graph* g, sy_node_id n, const char* name, int64_t* out, int32_t capacity,
                           int32_t* count) {
  return host_call([&] {
    const auto& v = *attr_of<std::vector<int64_t>>(G(g), n, name);
    *count = static_cast<int32_t>(v.size());
    for (int32_t i = 0; i < capacity && i < *count; ++i) out[i] = v[static_cast<size_t>(i)];
  });
}
int64_t h_graph_opset(const sy_graph* g, const char* domain) { return G(g).opset(domain ? domain : ""); }
const char* h_value_name(const sy_graph* g, sy_value_id v) {
  if (v < 0 || static_cast<size_t>(v) >= G(g).values.size()) return "";
  return G(g).values[static_cast<size_t>(v)].name.c_str();
}
int32_t h_value_dtype(const sy_graph* g, sy_value_id v) {
  if (v < 0 || static_cast<size_t>(v) >= G(g).values.size()) return SY_DTYPE_UNDEFINED;
  return static_cast<int32_t>(G(g).values[static_cast<size_t>(v)].dtype);
}
int32_t h_value_shape(const sy_graph* g, sy_value_id v, int64_t* dims, int32_t capacity) {
  if (v < 0 || static_cast<size_t>(v) >= G(g).values.size()) return -1;
  const Value& val = G(g).values[static_cast<size_t>(v)];
  if (!val.shape) return -1;
  auto r = static_cast<int32_t>(val.shape->size());
  for (int32_t i = 0; i < r && i < capacity; ++i) dims[i] = (*val.shape)[static_cast<size_t>(i)].value;
  return r;
}
sy_status h_value_constant(const sy_graph* g, sy_value_id v, sy_tensor* out) {
  sy_status s = host_call([&] {
    const Value& val = value_at(G(g), v);
    if (!val.constant) throw Error("value '" + val.name + "' is not a constant");
    *out = view_of(*val.constant);
  });
  return s == SY_OK ? s : SY_NOT_FOUND;
}
sy_node_id h_value_producer(const sy_graph* g, sy_value_id v) {
  const Graph& gr = G(g);
  for (size_t i = 0; i < gr.nodes.size(); ++i) {
    if (gr.nodes[i].dead) continue;
    for (ValueId o : gr.nodes[i].outputs)
      if (o == v) return static_cast<sy_node_id>(i);
  }
  return -1;
}
int32_t h_value_use_count(const sy_graph* g, sy_value_id v) {
  int32_t n = 0;
  for (const Node& node : G(g).nodes) {
    if (node.dead) continue;
    for (ValueId in : node.inputs) n += in == v;
  }
  for (const GraphOutput& o : G(g).outputs) n += o.value == v;
  return n;
}
int32_t h_value_is_graph_output(const sy_graph* g, sy_value_id v) {
  for (const GraphOutput& o : G(g).outputs)
    if (o.value == v) return 1;
  return 0;
}

// ---- graph rewriting

sy_status h_add_node(sy_graph* g, const char* domain, const char* op_type, const char* name, const sy_value_id* inputs,
                     int32_t num_inputs, sy_value_id* outputs, int32_t num_outputs, sy_node_id* out_node) {
  return host_call([&] {
    Graph& gr = G(g);
    SY_CHECK(op_type && *op_type, "graph_add_node: no op type");
    SY_CHECK(num_inputs >= 0 && num_outputs >= 1 && (num_inputs == 0 || inputs) && outputs,
             "graph_add_node: bad input/output arrays");
    Node n;
    n.domain = domain ? domain : "";
    n.op_type = op_type;
    n.name = name && *name ? name : gr.unique_name(op_type);
    for (int32_t i = 0; i < num_inputs; ++i) {
      if (inputs[i] != SY_NO_VALUE) value_at(gr, inputs[i]);
      n.inputs.push_back(inputs[i]);
    }
    for (int32_t i = 0; i < num_outputs; ++i) {
      Value v;
      v.name = gr.unique_name(n.name + "_out" + std::to_string(i));
      outputs[i] = gr.add_value(std::move(v));
      n.outputs.push_back(outputs[i]);
    }
    sy_node_id id = gr.add_node(std::move(n));
    if (out_node) *out_node = id;
  });
}
sy_status h_set_attr_int(sy_graph* g, sy_node_id n, const char* name, int64_t v) {
  return host_call([&] { node_at(G(g), n).attrs[name] = v; });
}
sy_status h_set_attr_float(sy_graph* g, sy_node_id n, const char* name, float v) {
  return host_call([&] { node_at(G(g), n).attrs[name] = v; });
}
sy_status h_set_attr_string(sy_graph* g, sy_node_id n, const char* name, const char* v) {
  return host_call([&] { node_at(G(g), n).attrs[name] = std::string(v ? v : ""); });
}
sy_status h_set_attr_ints(sy_graph* g, sy_node_id n, const char* name, const int64_t* v, int32_t count) {
  return host_call([&] {
    SY_CHECK(count >= 0 && (count == 0 || v), "node_set_attr_ints: bad array");
    node_at(G(g), n).attrs[name] = std::vector<int64_t>(v, v + count);
  });
}
sy_status h_add_constant(sy_graph* g, const char* hint, const sy_tensor* data, sy_value_id* out) {
  return host_call([&] {
    SY_CHECK(data && data->rank >= 0 && data->rank <= SY_MAX_RANK && (data->rank == 0 || data->dims),
             "graph_add_constant: bad tensor");
    SY_CHECK(data->device == SY_DEVICE_CPU, "graph_add_constant: data must be in host memory");
    SY_CHECK(dtype_is_known(data->dtype), "graph_add_constant: unknown dtype " << data->dtype);
    Shape s(std::span<const int64_t>(data->dims, static_cast<size_t>(data->rank)));
    Tensor t = Tensor::empty(static_cast<DType>(data->dtype), s);
    if (t.bytes()) {
      SY_CHECK(data->data, "graph_add_constant: no data");
      std::memcpy(t.raw(), data->data, t.bytes());
    }
    *out = G(g).add_constant(hint && *hint ? hint : "plugin_constant", std::move(t));
  });
}
sy_status h_value_set_type(sy_graph* g, sy_value_id v, int32_t dtype, const int64_t* dims, int32_t rank) {
  return host_call([&] {
    Value& val = G(g).values[static_cast<size_t>((value_at(G(g), v), v))];
    SY_CHECK(!val.constant, "value_set_type: '" << val.name << "' is a constant");
    SY_CHECK(dtype == SY_DTYPE_UNDEFINED || dtype_is_known(dtype), "value_set_type: unknown dtype " << dtype);
    val.dtype = static_cast<DType>(dtype);
    if (rank < 0 || !dims) {
      val.shape.reset();
      return;
    }
    std::vector<Dim> shape;
    for (int32_t i = 0; i < rank; ++i) shape.push_back(Dim{dims[i] >= 0 ? dims[i] : -1, {}});
    val.shape = shape;
  });
}
sy_status h_replace_all_uses(sy_graph* g, sy_value_id from, sy_value_id to) {
  return host_call([&] {
    value_at(G(g), from);
    value_at(G(g), to);
    G(g).replace_all_uses(from, to);
    // The equivalence probe compares each replaced value with its replacement.
    if (g->env) g->env->replaced.emplace_back(from, to);
  });
}
sy_status h_remove_node(sy_graph* g, sy_node_id n) {
  return host_call([&] { node_at(G(g), n).dead = true; });
}

// ---- kernels

int32_t h_kernel_input_count(const sy_kernel_context* c) { return c->ctx->num_inputs; }
sy_status h_kernel_input(const sy_kernel_context* c, int32_t i, sy_tensor* out) {
  if (!c || !c->ctx) return SY_INVALID_ARGUMENT;
  if (i < 0 || i >= c->ctx->num_inputs) {
    t_host_error = "kernel input " + std::to_string(i) + " is out of range";
    return SY_INVALID_ARGUMENT;
  }
  if (!c->ctx->has_input(i)) {
    t_host_error = "kernel input " + std::to_string(i) + " is omitted";
    return SY_NOT_FOUND;
  }
  *out = view_of(*c->ctx->inputs[i]);
  return SY_OK;
}
int32_t h_kernel_output_count(const sy_kernel_context* c) { return c->ctx->num_outputs; }
sy_status h_kernel_allocate_output(sy_kernel_context* c, int32_t i, int32_t dtype, const int64_t* dims, int32_t rank,
                                   sy_tensor* out) {
  return host_call([&] {
    SY_CHECK(i >= 0 && i < c->ctx->num_outputs, "kernel output " << i << " is out of range");
    SY_CHECK(rank >= 0 && rank <= SY_MAX_RANK && (rank == 0 || dims), "kernel output " << i << ": bad shape");
    SY_CHECK(dtype_is_known(dtype), "kernel output " << i << ": unknown dtype " << dtype);
    Shape s(std::span<const int64_t>(dims, static_cast<size_t>(rank)));
    *out = view_of(c->ctx->allocate_output(i, static_cast<DType>(dtype), s));
  });
}
const sy_step_context* h_kernel_step_context(const sy_kernel_context* c) {
  return static_cast<const sy_step_context*>(c->ctx->step);
}

// ---- graph interface

int32_t h_graph_input_count(const sy_graph* g) { return static_cast<int32_t>(G(g).inputs.size()); }
sy_value_id h_graph_input(const sy_graph* g, int32_t i) {
  if (i < 0 || i >= h_graph_input_count(g)) return SY_NO_VALUE;
  return G(g).inputs[static_cast<size_t>(i)];
}
int32_t h_graph_output_count(const sy_graph* g) { return static_cast<int32_t>(G(g).outputs.size()); }
const char* h_graph_output_name(const sy_graph* g, int32_t i) {
  if (i < 0 || i >= h_graph_output_count(g)) return "";
  return G(g).outputs[static_cast<size_t>(i)].name.c_str();
}
sy_value_id h_graph_output_value(const sy_graph* g, int32_t i) {
  if (i < 0 || i >= h_graph_output_count(g)) return SY_NO_VALUE;
  return G(g).outputs[static_cast<size_t>(i)].value;
}
sy_status h_graph_remove_output(sy_graph* g, const char* name) {
  auto& outs = G(g).outputs;
  auto it = std::find_if(outs.begin(), outs.end(), [&](const GraphOutput& o) { return o.name == (name ? name : ""); });
  if (it == outs.end()) {
    t_host_error = std::string("no graph output named '") + (name ? name : "") + "'";
    return SY_NOT_FOUND;
  }
  outs.erase(it);
  return SY_OK;
}

// ---- model facts and evaluation for passes (1.1)

PassEnv& env_of(const sy_graph* g) {
  SY_CHECK(g && g->env, "only available while a pass runs");
  return *g->env;
}

const ModelIO& io_of(const sy_graph* g) {
  PassEnv& env = env_of(g);
  SY_CHECK(env.io, "the graph has no decoder interface the host recognises: " << env.io_error);
  return *env.io;
}

sy_status h_graph_value_role(const sy_graph* g, sy_value_id v, int32_t* role, int32_t* layer) {
  return host_call([&] {
    value_at(G(g), v);
    const ModelIO& io = io_of(g);
    const Graph& graph = G(g);
    *role = SY_ROLE_NONE;
    *layer = -1;
    auto input_is = [&](int slot) { return slot >= 0 && graph.inputs[static_cast<size_t>(slot)] == v; };
    auto output_is = [&](int slot) { return slot >= 0 && graph.outputs[static_cast<size_t>(slot)].value == v; };
    if (input_is(io.input_ids)) *role = SY_ROLE_TOKEN_IDS;
    else if (input_is(io.attention_mask)) *role = SY_ROLE_ATTENTION_MASK;
    else if (input_is(io.position_ids)) *role = SY_ROLE_POSITION_IDS;
    else if (output_is(io.logits)) *role = SY_ROLE_LOGITS;
    for (const KvLayer& l : io.layers) {
      const std::pair<bool, int32_t> checks[] = {{input_is(l.past_key), SY_ROLE_PAST_KEY},
                                                 {input_is(l.past_value), SY_ROLE_PAST_VALUE},
                                                 {output_is(l.present_key), SY_ROLE_PRESENT_KEY},
                                                 {output_is(l.present_value), SY_ROLE_PRESENT_VALUE}};
      for (const auto& [hit, r] : checks)
        if (hit) {
          *role = r;
          *layer = l.layer;
        }
    }
  });
}

sy_status h_graph_model_info(const sy_graph* g, sy_model_info* out) {
  return host_call([&] {
    SY_CHECK(out && out->struct_size >= offsetof(sy_model_info, struct_size) + sizeof(out->struct_size), "graph_model_info: no struct");
    PassEnv& env = env_of(g);
    sy_model_info info{};
    info.struct_size = sizeof(info);
    if (env.io) {
      info.num_layers = static_cast<int32_t>(env.io->layers.size());
      info.kv_heads = static_cast<int32_t>(env.io->kv_heads);
      info.head_dim = static_cast<int32_t>(env.io->head_dim);
      info.right_padding = env.io->right_padding ? 1 : 0;
    }
    info.max_context = env.max_context;
    info.vocab_size = env.vocab_size;
    // Copy only what the caller's struct holds.
    const uint32_t size = std::min<uint32_t>(out->struct_size, sizeof(info));
    std::memcpy(out, &info, size);
    out->struct_size = size;
  });
}

sy_status h_graph_evaluate(const sy_graph* g, const sy_probe_shape* shape, const sy_value_id* feed_ids, const sy_tensor* feeds,
                           int32_t num_feeds, const sy_value_id* want, int32_t num_want, sy_tensor* out) {
  return host_call([&] {
    PassEnv& env = env_of(g);
    const ModelIO& io = io_of(g);
    const Graph& graph = G(g);
    SY_CHECK(shape && shape->batch >= 1 && shape->past_len >= 0 && shape->new_len >= 1, "graph_evaluate: bad probe shape");
    SY_CHECK(num_feeds >= 0 && num_want >= 1 && (num_feeds == 0 || (feed_ids && feeds)) && want && out, "graph_evaluate: bad arrays");
    ProbeCase c;
    c.past = shape->past_len;
    c.lengths.assign(static_cast<size_t>(shape->batch), shape->new_len);
    ProbeInputs inputs = synthetic_decoder_inputs(graph, io, c, env.vocab_size, 0x5717c4a9d);
    std::vector<ValueId> fed = inputs.ids;
    std::vector<Tensor> tensors = inputs.tensors;
    for (int32_t i = 0; i < num_feeds; ++i) {
      value_at(graph, feed_ids[i]);
      const sy_tensor& t = feeds[i];
      SY_CHECK(t.device == SY_DEVICE_CPU && t.rank >= 0 && t.rank <= SY_MAX_RANK && (t.rank == 0 || t.dims) && dtype_is_known(t.dtype),
               "graph_evaluate: feed " << i << " is not a host tensor");
      Tensor copy = Tensor::empty(static_cast<DType>(t.dtype), Shape(std::span<const int64_t>(t.dims, static_cast<size_t>(t.rank))));
      if (copy.bytes()) std::memcpy(copy.raw(), t.data, copy.bytes());
      fed.push_back(feed_ids[i]);
      tensors.push_back(copy);
    }
    std::vector<ValueId> wanted;
    for (int32_t i = 0; i < num_want; ++i) wanted.push_back((value_at(graph, want[i]), want[i]));
    SubgraphRunner runner(graph, *env.registry, env.threads, fed, wanted);
    std::vector<Tensor> results = runner.run(tensors);
    for (int32_t i = 0; i < num_want; ++i) {
      env.arena.push_back(results[static_cast<size_t>(i)]);
      out[i] = view_of(env.arena.back());
    }
  });
}

sy_status h_graph_mark_approximate(sy_graph* g, const char* reason) {
  return host_call([&] { env_of(g).approximate = reason && *reason ? reason : "declared approximate"; });
}

sy_host_api make_table() {
  sy_host_api t{};
  t.struct_size = sizeof(sy_host_api);
  t.abi_major = SY_PLUGIN_ABI_MAJOR;
  t.abi_minor = SY_PLUGIN_ABI_MINOR;
  t.set_error = h_set_error;
  t.last_error = h_last_error;
  t.log = h_log;
  t.alloc = h_alloc;
  t.free = h_free;
  t.device_alloc = h_device_alloc;
  t.device_free = h_device_free;
  t.device_stream = h_device_stream;
  t.parallel_for = h_parallel_for;
  t.num_threads = h_num_threads;
  t.option_bool = h_option_bool;
  t.option_int = h_option_int;
  t.option_float = h_option_float;
  t.option_string = h_option_string;
  t.graph_node_count = h_node_count;
  t.node_op_type = h_node_op_type;
  t.node_domain = h_node_domain;
  t.node_name = h_node_name;
  t.node_input_count = h_node_input_count;
  t.node_input = h_node_input;
  t.node_output_count = h_node_output_count;
  t.node_output = h_node_output;
  t.node_attr_int = h_node_attr_int;
  t.node_attr_float = h_node_attr_float;
  t.node_attr_string = h_node_attr_string;
  t.node_attr_ints = h_node_attr_ints;
  t.graph_opset = h_graph_opset;
  t.value_name = h_value_name;
  t.value_dtype = h_value_dtype;
  t.value_shape = h_value_shape;
  t.value_constant = h_value_constant;
  t.value_producer = h_value_producer;
  t.value_use_count = h_value_use_count;
  t.value_is_graph_output = h_value_is_graph_output;
  t.graph_add_node = h_add_node;
  t.node_set_attr_int = h_set_attr_int;
  t.node_set_attr_float = h_set_attr_float;
  t.node_set_attr_string = h_set_attr_string;
  t.node_set_attr_ints = h_set_attr_ints;
  t.graph_add_constant = h_add_constant;
  t.value_set_type = h_value_set_type;
  t.graph_replace_all_uses = h_replace_all_uses;
  t.graph_remove_node = h_remove_node;
  t.kernel_input_count = h_kernel_input_count;
  t.kernel_input = h_kernel_input;
  t.kernel_output_count = h_kernel_output_count;
  t.kernel_allocate_output = h_kernel_allocate_output;
  t.kernel_step_context = h_kernel_step_context;
  t.graph_input_count = h_graph_input_count;
  t.graph_input = h_graph_input;
  t.graph_output_count = h_graph_output_count;
  t.graph_output_name = h_graph_output_name;
  t.graph_output_value = h_graph_output_value;
  t.graph_remove_output = h_graph_remove_output;
  t.graph_value_role = h_graph_value_role;
  t.graph_model_info = h_graph_model_info;
  t.graph_evaluate = h_graph_evaluate;
  t.graph_mark_approximate = h_graph_mark_approximate;
  t.matmul_f32 = h_matmul_f32;
  return t;
}

}  // namespace

const sy_host_api* host_api() {
  static const sy_host_api table = make_table();
  return &table;
}

PluginCall::PluginCall(const std::string& plugin, const HostContext* host)
    : plugin_(plugin), prev_plugin_(t_plugin), prev_host_(t_host) {
  t_plugin = &plugin_;
  if (host) t_host = host;
  t_plugin_error.clear();
}

PluginCall::~PluginCall() {
  t_plugin = prev_plugin_;
  t_host = prev_host_;
}

void PluginCall::check(sy_status status, const std::string& what) const { check_plugin_status(plugin_, status, what); }

void check_plugin_status(const std::string& plugin_, sy_status status, const std::string& what) {
  if (status == SY_OK) return;
  std::string msg = take_plugin_error();
  // The plugin's own code where it has one; anything else is the plugin failing.
  ErrorKind kind = status == SY_INVALID_ARGUMENT ? ErrorKind::InvalidArgument
                   : status == SY_NOT_FOUND      ? ErrorKind::NotFound
                   : status == SY_OUT_OF_MEMORY  ? ErrorKind::OutOfMemory
                   : status == SY_UNSUPPORTED    ? ErrorKind::Unsupported
                   : status == SY_CANCELLED      ? ErrorKind::Cancelled
                                                 : ErrorKind::PluginFailure;
  SY_THROW_KIND(kind, "plugin '" << plugin_ << "': " << what << " failed (status " << status << ")"
                                 << (msg.empty() ? std::string(" without a message") : ": " + msg));
}

std::string take_plugin_error() { return std::exchange(t_plugin_error, std::string()); }

}  // namespace sy
