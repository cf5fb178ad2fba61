// Header-only C++ helpers for plugin authors, on top of plugin.h.
//
// Everything here lives inside the plugin: STL types and exceptions are used
// freely, and every entry from the host goes through sy::plugin::guard(),
// which turns exceptions into status codes, so none crosses the C ABI.
//
//   #include <switchyard/plugin.hpp>
//   struct MyPass { static bool run(sy::plugin::GraphRef& g, const sy::plugin::Options& o); };
//   struct MyKernel {
//     explicit MyKernel(const sy::plugin::NodeRef& node);
//     void compute(sy::plugin::KernelIO& io);
//   };
//   SY_PLUGIN(builder) {
//     builder.info("my-plugin", "1.0.0", "what it does");
//     builder.pass<MyPass>("my-pass", "1.0.0", "fuses X", {sy::plugin::option_int("min", "1", "...")});
//     builder.kernel<MyKernel>({"my_kernel", "1.0.0", "com.me", "MyOp", SY_DEVICE_CPU, {SY_DTYPE_FLOAT32}});
//   }
#ifndef SWITCHYARD_PLUGIN_HPP_
#define SWITCHYARD_PLUGIN_HPP_

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "switchyard/plugin.h"

#define SY_PLUGIN_STRINGIFY2(x) #x
#define SY_PLUGIN_STRINGIFY(x) SY_PLUGIN_STRINGIFY2(x)

namespace sy::plugin {

namespace detail {
inline std::atomic<const sy_host_api*>& host_slot() {
  static std::atomic<const sy_host_api*> h{nullptr};
  return h;
}
}  // namespace detail

// The host table this library was initialised with (entry points may run
// on several threads at once: two sessions loading the library together).
inline const sy_host_api* host() { return detail::host_slot().load(std::memory_order_acquire); }

// An error with a status code; any other exception maps to SY_ERROR.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what, sy_status code = SY_ERROR) : std::runtime_error(what), code_(code) {}
  sy_status code() const { return code_; }

 private:
  sy_status code_;
};

// Runs f and converts any exception into a status plus host->set_error.
template <typename F>
sy_status guard(F&& f) noexcept {
  try {
    f();
    return SY_OK;
  } catch (const Error& e) {
    if (host()) host()->set_error(e.what());
    return e.code();
  } catch (const std::bad_alloc&) {
    if (host()) host()->set_error("out of memory");
    return SY_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    if (host()) host()->set_error(e.what());
    return SY_ERROR;
  } catch (...) {
    if (host()) host()->set_error("unknown C++ exception");
    return SY_ERROR;
  }
}

// Throws Error with the host's message when a host call failed.
inline void check(sy_status s, const char* what) {
  if (s != SY_OK) {
    const char* msg = host()->last_error ? host()->last_error() : "";
    throw Error(std::string(what) + ": " + (msg ? msg : ""), s);
  }
}

inline void log(int32_t level, const std::string& message) {
  if (host() && host()->log) host()->log(level, message.c_str());
}

// ------------------------------------------------------------------ memory

// A standard allocator over the host's memory (host->alloc / host->free), for
// what a plugin keeps for the session's life: repacked weights, tables. The
// host puts large buffers on huge pages where the system grants them, which
// matters for weights streamed once per token. Without a host (a plugin's
// code linked into a test directly) it falls back to aligned_alloc.
template <typename T>
struct HostAllocator {
  using value_type = T;
  HostAllocator() = default;
  template <typename U>
  HostAllocator(const HostAllocator<U>&) noexcept {}
  T* allocate(size_t n) {
    if (n > std::numeric_limits<size_t>::max() / sizeof(T)) throw std::bad_alloc();
    const size_t bytes = std::max<size_t>(n * sizeof(T), 1);
    void* p = host() ? host()->alloc(bytes, 64) : std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) noexcept {
    if (host()) host()->free(p);
    else std::free(p);
  }
  template <typename U>
  bool operator==(const HostAllocator<U>&) const noexcept { return true; }
};

// A vector in host memory.
template <typename T>
using HostVector = std::vector<T, HostAllocator<T>>;

// ------------------------------------------------------------------ vocabulary

// A logits processor's view of sy_vocab (valid during create only).
struct Vocab {
  const sy_vocab& raw;
  explicit Vocab(const sy_vocab& v) : raw(v) {}
  int32_t size() const { return raw.vocab_size; }
  std::string bytes(int32_t id) const {
    return std::string(raw.bytes + raw.offsets[id], static_cast<size_t>(raw.offsets[id + 1] - raw.offsets[id]));
  }
  bool special(int32_t id) const { return raw.special[id] != 0; }
  std::vector<int32_t> stop_tokens() const { return std::vector<int32_t>(raw.stop_tokens, raw.stop_tokens + raw.num_stop_tokens); }
};

// ------------------------------------------------------------------ tensors

struct TensorView {
  sy_tensor raw{};
  int32_t dtype() const { return raw.dtype; }
  int32_t rank() const { return raw.rank; }
  int64_t dim(int i) const { return raw.dims[i]; }
  std::vector<int64_t> dims() const { return std::vector<int64_t>(raw.dims, raw.dims + raw.rank); }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < raw.rank; ++i) n *= raw.dims[i];
    return n;
  }
  template <typename T> T* data() const { return static_cast<T*>(raw.data); }
};

// A read-only view of token ids (a sequence's prompt and generated tokens).
struct Tokens {
  const int32_t* data;
  int32_t size;
  const int32_t* begin() const { return data; }
  const int32_t* end() const { return data + size; }
  int32_t operator[](int32_t i) const { return data[i]; }
};

// ------------------------------------------------------------------ half precision

// IEEE float16 and bfloat16 <-> float32 (round to nearest even, NaN and
// infinities kept), for kernels that store or read half-precision data.
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    bits = sign | (static_cast<uint32_t>(112 - e) << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past the largest half
  if (abs < 0x38800000u) {  // subnormal or zero in half
    if (abs < 0x33000000u) return sign;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(abs >> 23);
    uint32_t h = mant >> (shift);
    const uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = ((abs >> 13) - (112u << 10));
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}
inline float bf16_to_f32(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

// ------------------------------------------------------------------ quantized KV rows

// float8 e4m3fn (1 sign, 4 exponent bits with bias 7, 3 mantissa bits; no
// infinities, S.1111.111 is NaN, 448 the largest): its 256 values as float.
inline const float* e4m3_table() {
  static const auto table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) {
      const int e = (c >> 3) & 15, m = c & 7;
      float v = e == 0 ? static_cast<float>(m) / 512.f  // subnormal: m/8 * 2^-6
                       : std::ldexp(1.f + static_cast<float>(m) / 8.f, e - 7);
      if (e == 15 && m == 7) v = std::numeric_limits<float>::quiet_NaN();
      t[static_cast<size_t>(c)] = c & 0x80 ? -v : v;
    }
    return t;
  }();
  return table.data();
}
// Round to nearest even, saturating at +-448 (a scaled row never exceeds it).
inline uint8_t f32_to_e4m3(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint8_t sign = static_cast<uint8_t>((x >> 24) & 0x80u);
  const float a = std::fabs(f);
  if (!(a == a)) return static_cast<uint8_t>(sign | 0x7f);
  if (a >= 464.f) return static_cast<uint8_t>(sign | 0x7e);
  if (a < 0.015625f) return static_cast<uint8_t>(sign | static_cast<uint8_t>(std::nearbyint(a * 512.f)));  // subnormals (8 -> 2^-6 itself)
  const uint32_t abs = x & 0x7fffffffu;
  int e = static_cast<int>(abs >> 23) - 127 + 7;
  uint32_t m = (abs >> 20) & 7u;
  const uint32_t rem = abs & 0xfffffu;
  if (rem > 0x80000u || (rem == 0x80000u && (m & 1u))) ++m;
  if (m == 8) {
    m = 0;
    ++e;
  }
  const uint32_t code = std::min<uint32_t>(static_cast<uint32_t>(e) << 3 | m, 0x7eu);
  return static_cast<uint8_t>(sign | code);
}

// Writes one quantized KV row (SY_KV_ROW_* in plugin.h): n codes of
// `dtype` (SY_DTYPE_INT8 or SY_DTYPE_FLOAT8E4M3FN), then the float16 scale.
// The scale is rounded to float16 first and the codes made with the rounded
// scale, so decoding multiplies by exactly the scale the codes assumed.
inline void quantize_kv_row(const float* src, int64_t n, int32_t dtype, uint8_t* dst) {
  float amax = 0.f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(src[i]));
  const float top = dtype == SY_DTYPE_INT8 ? 127.f : 448.f;
  const uint16_t s16 = f32_to_f16(std::min(amax / top, 65504.f));
  const float s = f16_to_f32(s16);
  const float inv = s > 0.f ? 1.f / s : 0.f;
  if (dtype == SY_DTYPE_INT8) {
    for (int64_t i = 0; i < n; ++i) {
      const float q = std::nearbyint(src[i] * inv);
      dst[i] = static_cast<uint8_t>(static_cast<int8_t>(std::max(-127.f, std::min(127.f, q))));
    }
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_e4m3(src[i] * inv);
  }
  dst[n] = static_cast<uint8_t>(s16 & 0xffu);
  dst[n + 1] = static_cast<uint8_t>(s16 >> 8);
}
// The scale of a quantized row of n codes.
inline float kv_row_scale(const uint8_t* row, int64_t n) {
  return f16_to_f32(static_cast<uint16_t>(row[n] | (row[n + 1] << 8)));
}

// ------------------------------------------------------------------ options

class Options {
 public:
  explicit Options(const sy_options* o) : o_(o) {}
  bool get_bool(const char* name) const {
    int32_t v = 0;
    check(host()->option_bool(o_, name, &v), name);
    return v != 0;
  }
  int64_t get_int(const char* name) const {
    int64_t v = 0;
    check(host()->option_int(o_, name, &v), name);
    return v;
  }
  double get_float(const char* name) const {
    double v = 0;
    check(host()->option_float(o_, name, &v), name);
    return v;
  }
  std::string get_string(const char* name) const {
    const char* v = nullptr;
    check(host()->option_string(o_, name, &v), name);
    return v ? v : "";
  }

 private:
  const sy_options* o_;
};

// Option schema entries (storage is kept by the builder).
struct OptionSpec {
  std::string name;
  int32_t type;
  std::optional<std::string> default_value;
  std::string help;
};
// default_value nullptr: the option is required.
inline OptionSpec make_option(const char* n, int32_t type, const char* d, const char* h) {
  return {n, type, d ? std::optional<std::string>(d) : std::nullopt, h ? h : ""};
}
inline OptionSpec option_bool(const char* n, const char* d, const char* h) { return make_option(n, SY_OPTION_BOOL, d, h); }
inline OptionSpec option_int(const char* n, const char* d, const char* h) { return make_option(n, SY_OPTION_INT, d, h); }
inline OptionSpec option_float(const char* n, const char* d, const char* h) { return make_option(n, SY_OPTION_FLOAT, d, h); }
inline OptionSpec option_string(const char* n, const char* d, const char* h) { return make_option(n, SY_OPTION_STRING, d, h); }

// ------------------------------------------------------------------ graphs

// Read access to one graph (const), shared by passes and kernel creation.
class GraphReader {
 public:
  explicit GraphReader(const sy_graph* g) : cg_(g) {}
  int32_t node_count() const { return host()->graph_node_count(cg_); }
  std::string op_type(sy_node_id n) const { return host()->node_op_type(cg_, n); }
  std::string domain(sy_node_id n) const { return host()->node_domain(cg_, n); }
  std::string name(sy_node_id n) const { return host()->node_name(cg_, n); }
  bool is(sy_node_id n, const char* op, const char* dom = "") const {
    return std::strcmp(host()->node_op_type(cg_, n), op) == 0 && std::strcmp(host()->node_domain(cg_, n), dom) == 0;
  }
  int32_t input_count(sy_node_id n) const { return host()->node_input_count(cg_, n); }
  sy_value_id input(sy_node_id n, int32_t i) const { return host()->node_input(cg_, n, i); }
  int32_t output_count(sy_node_id n) const { return host()->node_output_count(cg_, n); }
  sy_value_id output(sy_node_id n, int32_t i) const { return host()->node_output(cg_, n, i); }
  std::optional<int64_t> attr_int(sy_node_id n, const char* key) const {
    int64_t v;
    return host()->node_attr_int(cg_, n, key, &v) == SY_OK ? std::optional<int64_t>(v) : std::nullopt;
  }
  std::optional<float> attr_float(sy_node_id n, const char* key) const {
    float v;
    return host()->node_attr_float(cg_, n, key, &v) == SY_OK ? std::optional<float>(v) : std::nullopt;
  }
  std::optional<std::string> attr_string(sy_node_id n, const char* key) const {
    const char* v;
    return host()->node_attr_string(cg_, n, key, &v) == SY_OK ? std::optional<std::string>(v) : std::nullopt;
  }
  std::optional<std::vector<int64_t>> attr_ints(sy_node_id n, const char* key) const {
    int32_t count = 0;
    if (host()->node_attr_ints(cg_, n, key, nullptr, 0, &count) != SY_OK) return std::nullopt;
    std::vector<int64_t> v(static_cast<size_t>(count));
    check(host()->node_attr_ints(cg_, n, key, v.data(), count, &count), key);
    return v;
  }
  int64_t opset(const char* dom = "") const { return host()->graph_opset(cg_, dom); }
  std::string value_name(sy_value_id v) const { return host()->value_name(cg_, v); }
  int32_t value_dtype(sy_value_id v) const { return host()->value_dtype(cg_, v); }
  std::optional<std::vector<int64_t>> value_shape(sy_value_id v) const {
    int64_t dims[SY_MAX_RANK];
    int32_t r = host()->value_shape(cg_, v, dims, SY_MAX_RANK);
    if (r < 0) return std::nullopt;
    return std::vector<int64_t>(dims, dims + r);
  }
  std::optional<TensorView> constant(sy_value_id v) const {
    TensorView t;
    if (v == SY_NO_VALUE || host()->value_constant(cg_, v, &t.raw) != SY_OK) return std::nullopt;
    return t;
  }
  sy_node_id producer(sy_value_id v) const { return v == SY_NO_VALUE ? -1 : host()->value_producer(cg_, v); }
  int32_t use_count(sy_value_id v) const { return host()->value_use_count(cg_, v); }
  bool is_graph_output(sy_value_id v) const { return host()->value_is_graph_output(cg_, v) != 0; }
  // ABI 1.1 (throws Error(SY_UNSUPPORTED) on an older host).
  // The decoder-interface role (SY_ROLE_*) of a value and its layer (-1 if none).
  std::pair<int32_t, int32_t> role(sy_value_id v) const {
    require(SY_HAS_FIELD(host(), sy_host_api, graph_value_role), "graph_value_role");
    int32_t role = SY_ROLE_NONE, layer = -1;
    check(host()->graph_value_role(cg_, v, &role, &layer), "graph_value_role");
    return {role, layer};
  }
  sy_model_info model_info() const {
    require(SY_HAS_FIELD(host(), sy_host_api, graph_model_info), "graph_model_info");
    sy_model_info info{};
    info.struct_size = sizeof(info);
    check(host()->graph_model_info(cg_, &info), "graph_model_info");
    return info;
  }
  // Evaluates `want` on a synthetic decoder step (batch rows of new_len
  // tokens after past_len cached ones) with `feeds` supplied from outside.
  // The views stay valid until the pass returns.
  std::vector<TensorView> evaluate(int32_t batch, int32_t past_len, int32_t new_len,
                                   const std::vector<std::pair<sy_value_id, sy_tensor>>& feeds,
                                   const std::vector<sy_value_id>& want) const {
    require(SY_HAS_FIELD(host(), sy_host_api, graph_evaluate), "graph_evaluate");
    sy_probe_shape shape{sizeof(sy_probe_shape), batch, past_len, new_len};
    std::vector<sy_value_id> ids;
    std::vector<sy_tensor> tensors;
    for (const auto& [v, t] : feeds) {
      ids.push_back(v);
      tensors.push_back(t);
    }
    std::vector<sy_tensor> out(want.size());
    check(host()->graph_evaluate(cg_, &shape, ids.data(), tensors.data(), static_cast<int32_t>(ids.size()), want.data(),
                                 static_cast<int32_t>(want.size()), out.data()),
          "graph_evaluate");
    std::vector<TensorView> views(out.size());
    for (size_t i = 0; i < out.size(); ++i) views[i].raw = out[i];
    return views;
  }
  int32_t output_count() const { return host()->graph_output_count(cg_); }
  std::string output_name(int32_t i) const { return host()->graph_output_name(cg_, i); }
  sy_value_id output_value(int32_t i) const { return host()->graph_output_value(cg_, i); }
  std::vector<sy_value_id> graph_inputs() const {
    std::vector<sy_value_id> v;
    for (int32_t i = 0; i < host()->graph_input_count(cg_); ++i) v.push_back(host()->graph_input(cg_, i));
    return v;
  }

 protected:
  static void require(bool present, const char* what) {
    if (!present) throw Error(std::string("this host predates ") + what + " (plugin ABI 1.1)", SY_UNSUPPORTED);
  }
  const sy_graph* cg_;
};

// Read-write access for passes.
class GraphRef : public GraphReader {
 public:
  explicit GraphRef(sy_graph* g) : GraphReader(g), g_(g) {}
  // Adds a node; returns its id and writes the new output values.
  sy_node_id add_node(const std::string& domain, const std::string& op, const std::string& name,
                      const std::vector<sy_value_id>& inputs, std::vector<sy_value_id>& outputs, int32_t num_outputs = 1) {
    outputs.assign(static_cast<size_t>(num_outputs), SY_NO_VALUE);
    sy_node_id id = -1;
    check(host()->graph_add_node(g_, domain.c_str(), op.c_str(), name.c_str(), inputs.data(),
                                 static_cast<int32_t>(inputs.size()), outputs.data(), num_outputs, &id),
          "graph_add_node");
    return id;
  }
  void set_attr(sy_node_id n, const char* key, int64_t v) { check(host()->node_set_attr_int(g_, n, key, v), key); }
  void set_attr(sy_node_id n, const char* key, float v) { check(host()->node_set_attr_float(g_, n, key, v), key); }
  void set_attr(sy_node_id n, const char* key, const std::string& v) {
    check(host()->node_set_attr_string(g_, n, key, v.c_str()), key);
  }
  void set_attr(sy_node_id n, const char* key, const std::vector<int64_t>& v) {
    check(host()->node_set_attr_ints(g_, n, key, v.data(), static_cast<int32_t>(v.size())), key);
  }
  sy_value_id add_constant(const std::string& hint, int32_t dtype, const std::vector<int64_t>& dims, const void* data) {
    sy_tensor t{dtype, static_cast<int32_t>(dims.size()), dims.data(), const_cast<void*>(data), SY_DEVICE_CPU, 0};
    sy_value_id v = SY_NO_VALUE;
    check(host()->graph_add_constant(g_, hint.c_str(), &t, &v), "graph_add_constant");
    return v;
  }
  void set_type(sy_value_id v, int32_t dtype, const std::optional<std::vector<int64_t>>& dims) {
    check(host()->value_set_type(g_, v, dtype, dims ? dims->data() : nullptr, dims ? static_cast<int32_t>(dims->size()) : -1),
          "value_set_type");
  }
  // False when there is no output of that name.
  bool remove_output(const std::string& name) { return host()->graph_remove_output(g_, name.c_str()) == SY_OK; }
  void replace_all_uses(sy_value_id from, sy_value_id to) { check(host()->graph_replace_all_uses(g_, from, to), "replace_all_uses"); }
  void remove_node(sy_node_id n) { check(host()->graph_remove_node(g_, n), "remove_node"); }
  // ABI 1.1: this rewrite is approximate (the host's equivalence probe skips
  // it). A no-op on older hosts, which have no probe.
  void mark_approximate(const std::string& reason) {
    if (SY_HAS_FIELD(host(), sy_host_api, graph_mark_approximate)) check(host()->graph_mark_approximate(g_, reason.c_str()), "graph_mark_approximate");
  }

 private:
  sy_graph* g_;
};

// The node a kernel is being created for.
struct NodeRef {
  GraphReader graph;
  sy_node_id node;
  int64_t opset;
  int32_t device;
};

// ------------------------------------------------------------------ kernels

class KernelIO {
 public:
  explicit KernelIO(sy_kernel_context* ctx) : ctx_(ctx) {}
  int32_t input_count() const { return host()->kernel_input_count(ctx_); }
  int32_t output_count() const { return host()->kernel_output_count(ctx_); }
  bool has_input(int32_t i) const {
    sy_tensor t;
    return i < input_count() && host()->kernel_input(ctx_, i, &t) == SY_OK;
  }
  TensorView input(int32_t i) const {
    TensorView t;
    check(host()->kernel_input(ctx_, i, &t.raw), "kernel input");
    return t;
  }
  TensorView allocate_output(int32_t i, int32_t dtype, const std::vector<int64_t>& dims) {
    TensorView t;
    check(host()->kernel_allocate_output(ctx_, i, dtype, dims.data(), static_cast<int32_t>(dims.size()), &t.raw),
          "kernel output");
    return t;
  }
  const sy_step_context* step() const { return host()->kernel_step_context(ctx_); }
  // Host thread pool; fn(begin, end) must not throw.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) const {
    auto tramp = [](void* user, int64_t b, int64_t e) { (*static_cast<const std::function<void(int64_t, int64_t)>*>(user))(b, e); };
    check(host()->parallel_for(n, grain, tramp, const_cast<std::function<void(int64_t, int64_t)>*>(&fn)), "parallel_for");
  }

 private:
  sy_kernel_context* ctx_;
};

// ------------------------------------------------------------------ device memory

// Device memory from the host's allocator (the session's caching allocator
// on CUDA), freed when the buffer goes away. Device kernels keep their
// converted weights and scratch in these.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(int32_t device, size_t bytes) : device_(device), bytes_(bytes) {
    check(host()->device_alloc(device, bytes ? bytes : 1, &ptr_), "device_alloc");
  }
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : device_(o.device_), bytes_(o.bytes_), ptr_(o.ptr_) { o.ptr_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      device_ = o.device_;
      bytes_ = o.bytes_;
      ptr_ = o.ptr_;
      o.ptr_ = nullptr;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }
  void reset() {
    if (ptr_) host()->device_free(device_, ptr_);
    ptr_ = nullptr;
  }

 private:
  int32_t device_ = SY_DEVICE_CPU;
  size_t bytes_ = 0;
  void* ptr_ = nullptr;
};

// The stream a kernel on `device` must order its work on (cudaStream_t on CUDA).
inline void* device_stream(int32_t device) { return host()->device_stream(device); }

// ------------------------------------------------------------------ registration

struct KernelSpec {
  std::string name, version, domain, op_type;
  int32_t device = SY_DEVICE_CPU;
  std::vector<int32_t> dtypes;
  int32_t type_input = 0;
  int32_t priority = 0;
  uint32_t capabilities = 0;  // SY_KERNEL_CAP_* (1.9)
};

// A drafter's tree of proposals (1.9, plugin.h's propose_tree): node i
// proposes tokens[i] after node parents[i] (an earlier node), or after the
// sequence's last token for -1.
struct DraftTree {
  std::vector<int32_t> tokens, parents;
};

namespace detail {
template <typename K>
struct KernelTrampolines {
  static sy_status create(void*, const sy_kernel_create_info* info, void** state) {
    return guard([&] { *state = new K(NodeRef{GraphReader(info->graph), info->node, info->opset, info->device}); });
  }
  static sy_status compute(void* state, sy_kernel_context* ctx) {
    return guard([&] {
      KernelIO io(ctx);
      static_cast<K*>(state)->compute(io);
    });
  }
  static void destroy(void* state) { delete static_cast<K*>(state); }
};
template <typename P>
struct PassTrampolines {
  static sy_status run(void*, sy_graph* g, const sy_options* o, int32_t* changed) {
    return guard([&] {
      GraphRef ref(g);
      *changed = P::run(ref, Options(o)) ? 1 : 0;
    });
  }
};
// Optional members of a drafter class, detected at compile time.
template <typename D, typename = void>
struct has_accepted : std::false_type {};
template <typename D>
struct has_accepted<D, std::void_t<decltype(std::declval<D&>().accepted(uint64_t{}, int32_t{}, int32_t{}))>> : std::true_type {};
template <typename D, typename = void>
struct has_release : std::false_type {};
template <typename D>
struct has_release<D, std::void_t<decltype(std::declval<D&>().release(uint64_t{}))>> : std::true_type {};
template <typename D, typename = void>
struct has_propose_sampled : std::false_type {};
template <typename D>
struct has_propose_sampled<D, std::void_t<decltype(std::declval<D&>().propose_sampled(
                                  uint64_t{}, std::declval<const Tokens&>(), int32_t{}, std::declval<const sy_draft_sampling&>(),
                                  int64_t{}, static_cast<float*>(nullptr)))>> : std::true_type {};

template <typename D, typename = void>
struct has_propose_tree : std::false_type {};
template <typename D>
struct has_propose_tree<D, std::void_t<decltype(std::declval<D&>().propose_tree(uint64_t{}, std::declval<const Tokens&>(), int32_t{}))>>
    : std::true_type {};

template <typename D, typename = void>
struct has_observe : std::false_type {};
template <typename D>
struct has_observe<D, std::void_t<decltype(std::declval<D&>().observe(uint64_t{}, std::declval<const Tokens&>(),
                                                                      static_cast<const int32_t*>(nullptr),
                                                                      static_cast<const int32_t*>(nullptr)))>> : std::true_type {};

template <typename D, typename = void>
struct has_hidden_state : std::false_type {};
template <typename D>
struct has_hidden_state<D, std::void_t<decltype(std::declval<D&>().hidden_state(uint64_t{}, static_cast<const float*>(nullptr),
                                                                                int32_t{}))>> : std::true_type {};

template <typename D>
struct DrafterTrampolines {
  static sy_status create(void*, const sy_options* o, void** state) {
    return guard([&] { *state = new D(Options(o)); });
  }
  static sy_status propose(void* state, uint64_t seq, const int32_t* tokens, int32_t n, int32_t k, int32_t* out, int32_t* count) {
    return guard([&] { *count = copy_out(static_cast<D*>(state)->propose(seq, Tokens{tokens, n}, k), k, out); });
  }
  static sy_status propose_sampled(void* state, uint64_t seq, const int32_t* tokens, int32_t n, int32_t k,
                                   const sy_draft_sampling* sampling, int64_t vocab_size, int32_t* out, float* probs,
                                   int32_t* count) {
    return guard([&] {
      *count = copy_out(static_cast<D*>(state)->propose_sampled(seq, Tokens{tokens, n}, k, *sampling, vocab_size, probs), k, out);
    });
  }
  static sy_status propose_tree(void* state, uint64_t seq, const int32_t* tokens, int32_t n, int32_t max_nodes, int32_t* out_tokens,
                                int32_t* out_parents, int32_t* count) {
    return guard([&] {
      const DraftTree tree = static_cast<D*>(state)->propose_tree(seq, Tokens{tokens, n}, max_nodes);
      if (tree.parents.size() != tree.tokens.size()) throw Error("drafter's tree has " + std::to_string(tree.tokens.size()) +
                                                                 " tokens but " + std::to_string(tree.parents.size()) + " parents");
      *count = copy_out(tree.tokens, max_nodes, out_tokens);
      std::copy(tree.parents.begin(), tree.parents.end(), out_parents);
    });
  }
  static sy_status observe(void* state, uint64_t seq, const int32_t* proposed, const int32_t* parents, int32_t count,
                           const int32_t* target_next) {
    return guard([&] { static_cast<D*>(state)->observe(seq, Tokens{proposed, count}, parents, target_next); });
  }
  static sy_status hidden_state(void* state, uint64_t seq, const float* hidden, int32_t size) {
    return guard([&] { static_cast<D*>(state)->hidden_state(seq, hidden, size); });
  }
  static sy_status accepted(void* state, uint64_t seq, int32_t proposed, int32_t accepted_count) {
    return guard([&] { static_cast<D*>(state)->accepted(seq, proposed, accepted_count); });
  }
  static sy_status release(void* state, uint64_t seq) {
    return guard([&] { static_cast<D*>(state)->release(seq); });
  }
  static void destroy(void* state) { delete static_cast<D*>(state); }

 private:
  static int32_t copy_out(const std::vector<int32_t>& proposal, int32_t k, int32_t* out) {
    if (static_cast<int64_t>(proposal.size()) > k) throw Error("drafter proposed more than its " + std::to_string(k) + " tokens");
    std::copy(proposal.begin(), proposal.end(), out);
    return static_cast<int32_t>(proposal.size());
  }
};
// Optional members of a cache manager class.
template <typename C, typename = void>
struct has_match_prefix : std::false_type {};
template <typename C>
struct has_match_prefix<C, std::void_t<decltype(std::declval<C&>().match_prefix(uint64_t{}, std::declval<const Tokens&>()))>>
    : std::true_type {};
template <typename C, typename = void>
struct has_commit : std::false_type {};
template <typename C>
struct has_commit<C, std::void_t<decltype(std::declval<C&>().commit(uint64_t{}, std::declval<const Tokens&>()))>> : std::true_type {};
template <typename C, typename = void>
struct has_truncate : std::false_type {};
template <typename C>
struct has_truncate<C, std::void_t<decltype(std::declval<C&>().truncate(uint64_t{}, int32_t{}))>> : std::true_type {};
template <typename C, typename = void>
struct has_fork : std::false_type {};
template <typename C>
struct has_fork<C, std::void_t<decltype(std::declval<C&>().fork(uint64_t{}, uint64_t{}))>> : std::true_type {};
template <typename C, typename = void>
struct has_stats : std::false_type {};
template <typename C>
struct has_stats<C, std::void_t<decltype(std::declval<C&>().stats(std::declval<sy_cache_stats&>()))>> : std::true_type {};
template <typename C, typename = void>
struct has_take_events : std::false_type {};
template <typename C>
struct has_take_events<C, std::void_t<decltype(std::declval<C&>().take_events())>> : std::true_type {};

template <typename C>
struct CacheTrampolines {
  static C& self(void* state) { return *static_cast<C*>(state); }
  static sy_status create(void*, const sy_cache_config* config, const sy_options* o, void** state) {
    return guard([&] { *state = new C(*config, Options(o)); });
  }
  static sy_status allocate(void* state, uint64_t seq, int32_t n) {
    bool ok = false;
    const sy_status s = guard([&] { ok = self(state).allocate(seq, n); });
    if (s != SY_OK) return s;
    if (ok) return SY_OK;
    host()->set_error("KV cache full");
    return SY_OUT_OF_MEMORY;  // an answer, not a failure: the engine preempts or waits
  }
  static sy_status match_prefix(void* state, uint64_t seq, const int32_t* t, int32_t n, int32_t* cached) {
    return guard([&] { *cached = self(state).match_prefix(seq, Tokens{t, n}); });
  }
  static sy_status commit(void* state, uint64_t seq, const int32_t* t, int32_t n) {
    return guard([&] { self(state).commit(seq, Tokens{t, n}); });
  }
  static sy_status truncate(void* state, uint64_t seq, int32_t length) {
    return guard([&] { self(state).truncate(seq, length); });
  }
  static sy_status fork(void* state, uint64_t parent, uint64_t child) {
    return guard([&] { self(state).fork(parent, child); });
  }
  static sy_status release(void* state, uint64_t seq) {
    return guard([&] { self(state).release(seq); });
  }
  static sy_status block_table(void* state, uint64_t seq, const int32_t** blocks, int32_t* count) {
    return guard([&] {
      const std::vector<int32_t>& t = self(state).block_table(seq);
      *blocks = t.data();
      *count = static_cast<int32_t>(t.size());
    });
  }
  static sy_status storage(void* state, int32_t layer, sy_tensor* key, sy_tensor* value) {
    return guard([&] { self(state).storage(layer, *key, *value); });
  }
  static sy_status stats(void* state, sy_cache_stats* out) {
    return guard([&] { self(state).stats(*out); });
  }
  static sy_status take_events(void* state, const sy_cache_event** events, int32_t* count) {
    return guard([&] {
      const std::vector<sy_cache_event>& e = self(state).take_events();
      *events = e.data();
      *count = static_cast<int32_t>(e.size());
    });
  }
  static void destroy(void* state) { delete static_cast<C*>(state); }
};

template <typename S>
struct SchedulerTrampolines {
  static sy_status create(void*, const sy_options* o, void** state) {
    return guard([&] { *state = new S(Options(o)); });
  }
  static sy_status plan(void* state, const sy_sched_input* in, sy_sched_decision* out, int32_t capacity, int32_t* count) {
    return guard([&] {
      // A host older than 1.3 passes 1.0-sized elements without
      // remaining_tokens: S always sees this header's layout and meanings.
      std::vector<sy_sched_seq> waiting, running;
      sy_sched_input input = *in;
      const size_t stride = sy_sched_input_seq_size(in);
      if (stride != sizeof(sy_sched_seq)) {
        const bool old_host = !SY_HAS_FIELD(in, sy_sched_input, seq_size);
        auto relay = [&](const sy_sched_seq* from, int32_t n, std::vector<sy_sched_seq>& to) {
          to.assign(static_cast<size_t>(n), sy_sched_seq{});
          for (int32_t i = 0; i < n; ++i) {
            sy_sched_seq& s = to[static_cast<size_t>(i)];
            std::memcpy(&s, reinterpret_cast<const unsigned char*>(from) + static_cast<size_t>(i) * stride, std::min(stride, sizeof(s)));
            if (!old_host) continue;
            // Before 1.3 a waiting sequence's prompt_len included what it had generated.
            if (s.state != SY_SEQ_RUNNING) s.prompt_len -= s.generated;
            s.remaining_tokens = s.prompt_len + s.generated - s.computed_len;
          }
        };
        relay(in->waiting, in->num_waiting, waiting);
        relay(in->running, in->num_running, running);
        input.waiting = waiting.data();
        input.running = running.data();
        input.struct_size = sizeof(input);
        input.seq_size = sizeof(sy_sched_seq);
      }
      const std::vector<sy_sched_decision> d = static_cast<S*>(state)->plan(input);
      if (static_cast<int64_t>(d.size()) > capacity) throw Error("scheduler planned more decisions than sequences");
      std::copy(d.begin(), d.end(), out);
      *count = static_cast<int32_t>(d.size());
    });
  }
  static void destroy(void* state) { delete static_cast<S*>(state); }
};

template <typename L, typename = void>
struct has_set_token_budget : std::false_type {};
template <typename L>
struct has_set_token_budget<L, std::void_t<decltype(std::declval<L&>().set_token_budget(uint64_t{}, int32_t{}))>> : std::true_type {};

template <typename L>
struct LogitsProcessorTrampolines {
  static L& self(void* state) { return *static_cast<L*>(state); }
  static sy_status create(void*, const sy_vocab* vocab, const sy_options* o, void** state) {
    return guard([&] { *state = new L(Vocab(*vocab), Options(o)); });
  }
  static sy_status begin(void* state, uint64_t seq, const char* kind, const char* spec) {
    return guard([&] { self(state).begin(seq, std::string(kind ? kind : ""), std::string(spec ? spec : "")); });
  }
  static sy_status fill_masks(void* state, const uint64_t* seqs, int32_t rows, uint32_t* mask, int32_t words) {
    return guard([&] { self(state).fill_masks(seqs, rows, mask, words); });
  }
  static sy_status accept(void* state, uint64_t seq, int32_t token, int32_t* allowed) {
    return guard([&] { *allowed = self(state).accept(seq, token) ? 1 : 0; });
  }
  static sy_status rollback(void* state, uint64_t seq, int32_t n) {
    return guard([&] { self(state).rollback(seq, n); });
  }
  static sy_status query(void* state, uint64_t seq, int32_t* flags) {
    return guard([&] { *flags = self(state).query(seq); });
  }
  static sy_status end(void* state, uint64_t seq) {
    return guard([&] { self(state).end(seq); });
  }
  static sy_status set_token_budget(void* state, uint64_t seq, int32_t tokens) {
    if constexpr (has_set_token_budget<L>::value) return guard([&] { self(state).set_token_budget(seq, tokens); });
    return SY_UNSUPPORTED;
  }
  static void destroy(void* state) { delete static_cast<L*>(state); }
};
}  // namespace detail

// Builds the sy_plugin_info and owns every string and descriptor it points
// to, for the lifetime of the loaded library.
class PluginBuilder {
 public:
  void info(std::string name, std::string version, std::string description) {
    name_ = keep(name);
    version_ = keep(version);
    description_ = keep(description);
  }

  template <typename P>
  void pass(const std::string& name, const std::string& version, const std::string& description,
            const std::vector<OptionSpec>& options = {}) {
    auto& d = passes_.emplace_back();
    d.struct_size = sizeof(sy_pass_desc);
    d.name = keep(name);
    d.version = keep(version);
    d.description = keep(description);
    set_options(options, d.options, d.num_options);
    d.run = &detail::PassTrampolines<P>::run;
  }

  template <typename K>
  void kernel(const KernelSpec& spec) {
    auto& d = kernels_.emplace_back();
    d.struct_size = sizeof(sy_kernel_desc);
    d.name = keep(spec.name);
    d.version = keep(spec.version);
    d.domain = keep(spec.domain);
    d.op_type = keep(spec.op_type);
    d.device = spec.device;
    auto& types = dtype_lists_.emplace_back(spec.dtypes);
    d.dtypes = types.empty() ? nullptr : types.data();
    d.num_dtypes = static_cast<int32_t>(types.size());
    d.type_input = spec.type_input;
    d.priority = spec.priority;
    d.capabilities = spec.capabilities;
    d.create = &detail::KernelTrampolines<K>::create;
    d.compute = &detail::KernelTrampolines<K>::compute;
    d.destroy = &detail::KernelTrampolines<K>::destroy;
  }

  // A scheduler class S:
  //   explicit S(const Options&);
  //   std::vector<sy_sched_decision> plan(const sy_sched_input& in);   // at most one per sequence in `in`
  template <typename S>
  void scheduler(const std::string& name, const std::string& version, const std::string& description,
                 const std::vector<OptionSpec>& options = {}) {
    using T = detail::SchedulerTrampolines<S>;
    sy_scheduler_desc d = named<sy_scheduler_desc>(name, version, description, options);
    d.create = &T::create;
    d.plan = &T::plan;
    d.destroy = &T::destroy;
    d.seq_size = sizeof(sy_sched_seq);
    d.decision_size = sizeof(sy_sched_decision);
    schedulers_.push_back(d);
  }

  // A KV-cache manager class C:
  //   C(const sy_cache_config& config, const Options&);
  //   bool allocate(uint64_t seq, int32_t num_tokens);          // false: full (nothing changed)
  //   void release(uint64_t seq);
  //   const std::vector<int32_t>& block_table(uint64_t seq);    // valid until the next call
  //   void storage(int32_t layer, sy_tensor& key, sy_tensor& value);
  // and optionally (plugin.h says what leaving one out means)
  //   int32_t match_prefix(uint64_t seq, const Tokens& tokens);  // tokens reused
  //   void commit(uint64_t seq, const Tokens& tokens);
  //   void truncate(uint64_t seq, int32_t length);
  //   void fork(uint64_t parent, uint64_t child);
  //   void stats(sy_cache_stats& out);
  //   const std::vector<sy_cache_event>& take_events();        // since the last call; valid until the next
  template <typename C>
  void cache(const std::string& name, const std::string& version, const std::string& description,
             const std::vector<OptionSpec>& options = {}) {
    using T = detail::CacheTrampolines<C>;
    sy_cache_desc d = named<sy_cache_desc>(name, version, description, options);
    d.create = &T::create;
    d.allocate = &T::allocate;
    d.release = &T::release;
    d.block_table = &T::block_table;
    d.storage = &T::storage;
    if constexpr (detail::has_match_prefix<C>::value) d.match_prefix = &T::match_prefix;
    if constexpr (detail::has_commit<C>::value) d.commit = &T::commit;
    if constexpr (detail::has_truncate<C>::value) d.truncate = &T::truncate;
    if constexpr (detail::has_fork<C>::value) d.fork = &T::fork;
    if constexpr (detail::has_stats<C>::value) d.stats = &T::stats;
    if constexpr (detail::has_take_events<C>::value) d.take_events = &T::take_events;
    d.destroy = &T::destroy;
    caches_.push_back(d);
  }

  // A drafter class D:
  //   explicit D(const Options&);
  //   std::vector<int32_t> propose(uint64_t seq, const Tokens& tokens, int32_t k);       // at most k
  // and optionally
  //   void accepted(uint64_t seq, int32_t proposed, int32_t accepted);
  //   void release(uint64_t seq);                                                        // sequence finished
  //   std::vector<int32_t> propose_sampled(uint64_t seq, const Tokens& tokens, int32_t k,
  //       const sy_draft_sampling& sampling, int64_t vocab_size, float* probs);
  //   DraftTree propose_tree(uint64_t seq, const Tokens& tokens, int32_t max_nodes);  // 1.9
  //   void observe(uint64_t seq, const Tokens& proposed, const int32_t* parents,       // 1.9: the target's
  //                const int32_t* target_next);                                        // next token at each
  //   void hidden_state(uint64_t seq, const float* hidden, int32_t size);               // 1.10: the target's, before
  //                                                                                     // each proposal
  // A drafter that draws its proposals at random defines propose_sampled and
  // writes the distribution proposal i came from to probs[i * vocab_size ...]:
  // verification then accepts more of its drafts (see plugin.h). One that
  // proposes alternatives defines propose_tree (it keeps propose for hosts
  // and steps that verify chains).
  template <typename D>
  void drafter(const std::string& name, const std::string& version, const std::string& description,
               const std::vector<OptionSpec>& options = {}) {
    using T = detail::DrafterTrampolines<D>;
    sy_drafter_desc d = named<sy_drafter_desc>(name, version, description, options);
    d.create = &T::create;
    d.propose = &T::propose;
    if constexpr (detail::has_accepted<D>::value) d.accepted = &T::accepted;
    if constexpr (detail::has_release<D>::value) d.release = &T::release;
    if constexpr (detail::has_propose_sampled<D>::value) d.propose_sampled = &T::propose_sampled;
    if constexpr (detail::has_propose_tree<D>::value) d.propose_tree = &T::propose_tree;
    if constexpr (detail::has_observe<D>::value) d.observe = &T::observe;
    if constexpr (detail::has_hidden_state<D>::value) d.hidden_state = &T::hidden_state;
    d.destroy = &T::destroy;
    drafters_.push_back(d);
  }

  // A logits processor class L (structured output; plugin.h has the contract):
  //   L(const Vocab& vocab, const Options&);        // copy what you keep of vocab
  //   void begin(uint64_t seq, const std::string& kind, const std::string& spec);
  //       // throw Error(msg, SY_INVALID_ARGUMENT) for a spec it refuses
  //   void fill_masks(const uint64_t* seqs, int32_t rows, uint32_t* mask, int32_t words_per_row);
  //   bool accept(uint64_t seq, int32_t token);      // false: not allowed (state unchanged)
  //   void rollback(uint64_t seq, int32_t tokens);
  //   int32_t query(uint64_t seq);                   // SY_CONSTRAINT_* flags
  //   void end(uint64_t seq);
  //   void set_token_budget(uint64_t seq, int32_t tokens);  // optional (1.6)
  template <typename L>
  void logits_processor(const std::string& name, const std::string& version, const std::string& description,
                        const std::vector<OptionSpec>& options = {}) {
    using T = detail::LogitsProcessorTrampolines<L>;
    sy_logits_processor_desc d = named<sy_logits_processor_desc>(name, version, description, options);
    d.create = &T::create;
    d.begin = &T::begin;
    d.fill_masks = &T::fill_masks;
    d.accept = &T::accept;
    d.rollback = &T::rollback;
    d.query = &T::query;
    d.end = &T::end;
    d.destroy = &T::destroy;
    if constexpr (detail::has_set_token_budget<L>::value) d.set_token_budget = &T::set_token_budget;
    logits_processors_.push_back(d);
  }

  // Raw C descriptors (for the kinds without C++ wrappers yet, or for full
  // control): the builder keeps a copy; strings must outlive the plugin.
  void pass_desc(const sy_pass_desc& d) { passes_.push_back(d); }
  void kernel_desc(const sy_kernel_desc& d) { kernels_.push_back(d); }
  void scheduler(const sy_scheduler_desc& d) { schedulers_.push_back(d); }
  void cache(const sy_cache_desc& d) { caches_.push_back(d); }
  void drafter(const sy_drafter_desc& d) { drafters_.push_back(d); }
  void logits_processor(const sy_logits_processor_desc& d) { logits_processors_.push_back(d); }
  // Keeps option descriptors alive and returns the array for a raw descriptor.
  const sy_option_desc* const* options(const std::vector<OptionSpec>& specs, int32_t& count) {
    const sy_option_desc* const* out = nullptr;
    set_options(specs, out, count);
    return out;
  }
  const char* keep(const std::string& s) { return strings_.emplace_back(s).c_str(); }

  const sy_plugin_info* finish() {
    for (auto& d : passes_) pass_ptrs_.push_back(&d);
    for (auto& d : kernels_) kernel_ptrs_.push_back(&d);
    for (auto& d : schedulers_) scheduler_ptrs_.push_back(&d);
    for (auto& d : caches_) cache_ptrs_.push_back(&d);
    for (auto& d : drafters_) drafter_ptrs_.push_back(&d);
    for (auto& d : logits_processors_) logits_processor_ptrs_.push_back(&d);
    info_.struct_size = sizeof(sy_plugin_info);
    info_.abi_major = SY_PLUGIN_ABI_MAJOR;
    info_.abi_minor = SY_PLUGIN_ABI_MINOR;
    info_.name = name_;
    info_.version = version_;
    info_.description = description_;
    info_.passes = pass_ptrs_.data();
    info_.num_passes = static_cast<int32_t>(pass_ptrs_.size());
    info_.kernels = kernel_ptrs_.data();
    info_.num_kernels = static_cast<int32_t>(kernel_ptrs_.size());
    info_.schedulers = scheduler_ptrs_.data();
    info_.num_schedulers = static_cast<int32_t>(scheduler_ptrs_.size());
    info_.caches = cache_ptrs_.data();
    info_.num_caches = static_cast<int32_t>(cache_ptrs_.size());
    info_.drafters = drafter_ptrs_.data();
    info_.num_drafters = static_cast<int32_t>(drafter_ptrs_.size());
    info_.logits_processors = logits_processor_ptrs_.data();
    info_.num_logits_processors = static_cast<int32_t>(logits_processor_ptrs_.size());
    return &info_;
  }

 private:
  // The common head of a component descriptor: size, name, version,
  // description and options (kept alive by the builder).
  template <typename Desc>
  Desc named(const std::string& name, const std::string& version, const std::string& description,
             const std::vector<OptionSpec>& options) {
    Desc d{};
    d.struct_size = sizeof(Desc);
    d.name = keep(name);
    d.version = keep(version);
    d.description = keep(description);
    set_options(options, d.options, d.num_options);
    return d;
  }
  void set_options(const std::vector<OptionSpec>& specs, const sy_option_desc* const*& out, int32_t& count) {
    auto& ptrs = option_ptr_lists_.emplace_back();
    for (const auto& s : specs) {
      auto& o = options_.emplace_back();
      o.struct_size = sizeof(sy_option_desc);
      o.name = keep(s.name);
      o.type = s.type;
      o.default_value = s.default_value ? keep(*s.default_value) : nullptr;
      o.help = keep(s.help);
      ptrs.push_back(&o);
    }
    out = ptrs.empty() ? nullptr : ptrs.data();
    count = static_cast<int32_t>(ptrs.size());
  }

  // deques: element addresses stay stable as they grow.
  std::deque<std::string> strings_;
  std::deque<sy_pass_desc> passes_;
  std::deque<sy_kernel_desc> kernels_;
  std::deque<sy_scheduler_desc> schedulers_;
  std::deque<sy_cache_desc> caches_;
  std::deque<sy_drafter_desc> drafters_;
  std::deque<sy_logits_processor_desc> logits_processors_;
  std::deque<sy_option_desc> options_;
  std::deque<std::vector<const sy_option_desc*>> option_ptr_lists_;
  std::deque<std::vector<int32_t>> dtype_lists_;
  std::vector<const sy_pass_desc*> pass_ptrs_;
  std::vector<const sy_kernel_desc*> kernel_ptrs_;
  std::vector<const sy_scheduler_desc*> scheduler_ptrs_;
  std::vector<const sy_cache_desc*> cache_ptrs_;
  std::vector<const sy_drafter_desc*> drafter_ptrs_;
  std::vector<const sy_logits_processor_desc*> logits_processor_ptrs_;
  const char* name_ = "";
  const char* version_ = "";
  const char* description_ = "";
  sy_plugin_info info_{};
};

// Common part of the entry point: version check, then the author's setup.
inline const sy_plugin_info* init_plugin(const sy_host_api* h, void (*setup)(PluginBuilder&)) noexcept {
  if (!h) return nullptr;
  if (h->abi_major != SY_PLUGIN_ABI_MAJOR) {
    // Only the versions are read from a host of another major (the first
    // fields of sy_host_api and sy_plugin_info never move). The plugin
    // answers with a description that carries nothing but its version, so
    // the host refuses it with its own message naming both versions.
    static const sy_plugin_info versions_only = [] {
      sy_plugin_info i{};
      i.struct_size = offsetof(sy_plugin_info, abi_minor) + sizeof(i.abi_minor);
      i.abi_major = SY_PLUGIN_ABI_MAJOR;
      i.abi_minor = SY_PLUGIN_ABI_MINOR;
      return i;
    }();
    return &versions_only;
  }
  detail::host_slot().store(h, std::memory_order_release);
  // A library opened twice (two sessions, possibly on two threads at once)
  // is mapped once and its init runs again: the description is built once,
  // under a lock, and handed out to every caller; one in use is never freed.
  static std::mutex mu;
  static std::unique_ptr<PluginBuilder> builder;
  static const sy_plugin_info* result = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (result) return result;
  sy_status s = guard([&] {
    auto b = std::make_unique<PluginBuilder>();
    setup(*b);
    result = b->finish();
    builder = std::move(b);
  });
  return s == SY_OK ? result : nullptr;
}

}  // namespace sy::plugin

// Defines the exported entry point; the body configures `builder`.
#define SY_PLUGIN(builder)                                                                        \
  static void sy_plugin_setup_(::sy::plugin::PluginBuilder& builder);                             \
  extern "C" SY_PLUGIN_EXPORT const sy_plugin_info* switchyard_plugin_init(const sy_host_api* h) { \
    return ::sy::plugin::init_plugin(h, &sy_plugin_setup_);                                       \
  }                                                                                               \
  static void sy_plugin_setup_(::sy::plugin::PluginBuilder& builder)

#endif  // SWITCHYARD_PLUGIN_HPP_
