/*
 * Switchyard plugin ABI.
 *
 * The one contract between the Switchyard host and plugin libraries. C only
 * (C99), no dependency on any other header of the project; plugins include
 * this (or plugin.hpp) and nothing of the core.
 *
 * Rules that keep old plugins loading in new hosts (and say why):
 *  - One exported entry point, switchyard_plugin_init(). The host passes its
 *    function table; the plugin returns a description of everything it
 *    provides. No static initialisers register anything.
 *  - Versions: SY_PLUGIN_ABI_MAJOR must match exactly (the host refuses other
 *    majors with a message naming both versions). Minor versions only ever
 *    APPEND fields at the end of structs; every struct that can grow starts
 *    with `struct_size`, and readers use SY_HAS_FIELD before touching a field.
 *    A plugin built against a newer minor loads in an older host (which reads
 *    the fields it knows); a plugin must check host->struct_size (or use
 *    SY_HAS_FIELD on the host table) before calling functions newer than the
 *    host's minor.
 *  - Only C types cross: integers, floats, C strings, plain structs, opaque
 *    handles and integer ids. No C++ exception may leave a plugin function;
 *    plugin.hpp's helpers catch them and turn them into status codes.
 *  - Errors: functions return sy_status (SY_OK = 0). Before returning an
 *    error a plugin calls host->set_error(message); host functions that fail
 *    leave a message readable with host->last_error(). Messages are copied by
 *    the receiver; no allocation changes owner across the boundary.
 *  - Memory: the host owns tensors. Plugins allocate through host->alloc /
 *    host->device_alloc, and never free what the host allocated otherwise.
 *  - Strings returned by the host stay valid until the next call that
 *    modifies the same object (graph, options) or the end of the callback.
 *
 * The contract, function by function (each comment below says which part
 * applies; what is not said here holds for all):
 *  - Required or optional. Every function pointer in a descriptor is
 *    required unless its comment says "optional"; the loader refuses a
 *    plugin whose descriptor lacks a required one, naming it. An optional
 *    pointer may be NULL; its comment says what the host does then.
 *  - Ownership and lifetime. Descriptors, names and option arrays a plugin
 *    returns stay valid until its library is unloaded (after shutdown).
 *    Pointers the host passes into a call (tokens, inputs, graphs, configs,
 *    output buffers) are valid during that call only; copy what you keep.
 *    Pointers a plugin returns from a call (block tables, tensors) must stay
 *    valid until the next call on the same instance, unless the comment says
 *    longer ("for the cache's lifetime"). `state` belongs to the plugin from
 *    create until destroy; the host never reads it.
 *  - Threads. The host calls one instance (one `state`) from one thread at a
 *    time: a session's passes and kernel creation run on the thread creating
 *    the session; a kernel's compute on that session's executing thread;
 *    schedulers, cache managers and drafters on the session's step-engine
 *    thread. Different sessions may call the same plugin's functions at the
 *    same time on different instances: state shared across instances
 *    (statics, plugin_data) must be thread-safe. parallel_for runs fn on the
 *    host's pool threads, concurrently; fn must not call back into the host
 *    other than set_error/log.
 *  - Errors. Return SY_OK or an SY_* code; call host->set_error(message)
 *    first (the host copies it). The code says the kind: SY_OUT_OF_MEMORY
 *    from a cache manager's allocate means "full" (an answer, not a fault),
 *    SY_UNSUPPORTED from a pass means "this graph is not for me", any other
 *    non-OK status fails the operation (the session is not created, the step
 *    fails its requests) with the plugin's name and message. A C++ exception
 *    escaping a plugin function is an ABI violation; the host catches it as a
 *    last resort and reports a plugin failure.
 *  - Devices. Host functions a plugin calls (device_alloc, device_stream,
 *    parallel_for) act for the session that made the current call: its
 *    device (sy_kernel_create_info.device_index, sy_cache_config.device_index
 *    say which) and its thread pool.
 *
 * Changelog (append only):
 *   1.0  initial ABI: passes, kernels, schedulers, cache managers, drafters.
 *   1.1  model-aware passes: graph_value_role, graph_model_info,
 *        graph_evaluate (run part of the graph on synthetic decoder inputs),
 *        graph_mark_approximate (opt out of the host's equivalence probe).
 *   1.2  drafters that sample: sy_drafter_desc.propose_sampled with
 *        sy_draft_sampling (draft probabilities used in verification);
 *        device ordinals: sy_kernel_create_info.device_index,
 *        sy_cache_config.device_index (device_alloc, device_free and
 *        device_stream act on the device of the session making the call).
 *   1.3  growable scheduler arrays: sy_scheduler_desc.seq_size and
 *        decision_size (the element sizes the plugin was built with) and
 *        sy_sched_input.seq_size (the stride of waiting/running);
 *        sy_sched_seq.remaining_tokens; prompt_len always the request's
 *        prompt (1.0-1.2 hosts passed prompt + generated for preempted
 *        sequences); blocks_needed documented as the engine computes it.
 *   1.4  logits processors (structured output): sy_logits_processor_desc,
 *        sy_vocab, sy_plugin_info.logits_processors.
 *   1.5  KV-cache events: sy_cache_desc.take_events with sy_cache_event (the
 *        prefix-cache blocks stored and removed, for KV-aware routers).
 *   1.6  structured output that finishes: sy_logits_processor_desc.
 *        set_token_budget (the tokens a constrained request may still emit).
 *   1.7  quantized KV caches: SY_DTYPE_FLOAT8E4M3FN, and the row layout of
 *        SY_DTYPE_INT8 / SY_DTYPE_FLOAT8E4M3FN cache storage (SY_KV_ROW_*);
 *        sy_cache_config.model_fingerprint (for KV tiers on disk).
 *   1.8  cache value rows of their own size: sy_cache_config.value_head_dim
 *        (latent attention's compressed values).
 *   1.9  token trees: sy_step_context.token_parents,
 *        SY_KERNEL_CAP_TOKEN_TREES, sy_drafter_desc.propose_tree and observe.
 *   1.10 drafters that read the target's hidden states:
 *        sy_drafter_desc.hidden_state.
 *   1.11 the host's float32 matrix product for kernels: sy_host_api.matmul_f32.
 */
#ifndef SWITCHYARD_PLUGIN_H_
#define SWITCHYARD_PLUGIN_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SY_PLUGIN_ABI_MAJOR 1
#define SY_PLUGIN_ABI_MINOR 11

#if defined(_WIN32)
#define SY_PLUGIN_EXPORT __declspec(dllexport)
#else
#define SY_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

/* True when a struct that starts with `struct_size` (as read from the other
 * side) contains `field`. */
#define SY_HAS_FIELD(ptr, type, field) \
  ((ptr) != NULL && (size_t)(ptr)->struct_size >= offsetof(type, field) + sizeof(((type*)0)->field))

/* ---------------------------------------------------------------- status */

typedef int32_t sy_status;
enum {
  SY_OK = 0,
  SY_ERROR = 1,            /* anything else */
  SY_INVALID_ARGUMENT = 2, /* bad input, bad option, bad graph */
  SY_NOT_FOUND = 3,
  SY_OUT_OF_MEMORY = 4,    /* allocation failed; for cache managers: full */
  SY_UNSUPPORTED = 5,      /* valid request this component does not handle */
  SY_CANCELLED = 6
};

/* -------------------------------------------------------- operator names */

/* Operators the host and plugins agree on by name. The host gives the first
 * two meaning: a graph with SY_OP_PAGED_ATTENTION nodes runs in the step
 * engine (each node reads sy_step_context and the cache manager's KV), and
 * the logits-row selection pass looks through SY_OP_QMATMUL and
 * SY_ORT_OP_MATMUL_NBITS heads. The attention-fusion pass writes
 * PagedAttention; the quantize pass writes QMatMul; exports from
 * onnxruntime-genai's model builder carry the com.microsoft ones. */
#define SY_OP_DOMAIN "switchyard"
#define SY_OP_PAGED_ATTENTION "PagedAttention"
#define SY_OP_QMATMUL "QMatMul"
#define SY_ORT_DOMAIN "com.microsoft"
#define SY_ORT_OP_MATMUL_NBITS "MatMulNBits"
#define SY_ORT_OP_GROUP_QUERY_ATTENTION "GroupQueryAttention"

/* An int attribute (1) the host sets on every custom-domain node of the
 * graphs its equivalence probe evaluates (ABI 1.5, host-side only: older
 * plugins ignore it). A kernel whose fast path rounds intermediate values
 * (the int8 activations of a quantized matmul) takes its exact path there:
 * the probe proves a rewrite, and a rounding step downstream of a last-bit
 * difference would otherwise look like a wrong rewrite. */
#define SY_ATTR_PROBE "switchyard_probe"

/* ----------------------------------------------------------- basic types */

/* Element types use ONNX TensorProto.DataType codes. */
enum {
  SY_DTYPE_UNDEFINED = 0,
  SY_DTYPE_FLOAT32 = 1,
  SY_DTYPE_UINT8 = 2,
  SY_DTYPE_INT8 = 3,
  SY_DTYPE_UINT16 = 4,
  SY_DTYPE_INT16 = 5,
  SY_DTYPE_INT32 = 6,
  SY_DTYPE_INT64 = 7,
  SY_DTYPE_BOOL = 9,
  SY_DTYPE_FLOAT16 = 10,
  SY_DTYPE_FLOAT64 = 11,
  SY_DTYPE_UINT32 = 12,
  SY_DTYPE_UINT64 = 13,
  SY_DTYPE_BFLOAT16 = 16,
  SY_DTYPE_FLOAT8E4M3FN = 17 /* 1.7: KV caches only (SY_KV_ROW_*) */
};

enum { SY_DEVICE_CPU = 0, SY_DEVICE_CUDA = 1 };

enum { SY_LOG_DEBUG = 0, SY_LOG_INFO = 1, SY_LOG_WARNING = 2, SY_LOG_ERROR = 3 };

#define SY_MAX_RANK 8

/* A view of a tensor. The host owns `data`; `dims` points at `rank` values.
 * Row-major, contiguous. */
typedef struct sy_tensor {
  int32_t dtype;
  int32_t rank;
  const int64_t* dims;
  void* data;
  int32_t device; /* SY_DEVICE_* */
  int32_t reserved;
} sy_tensor;

/* Opaque handles. Node and value ids are plain integers, valid for the
 * duration of one pass run (the host renumbers between passes). */
typedef struct sy_graph sy_graph;
typedef struct sy_options sy_options;
typedef struct sy_kernel_context sy_kernel_context;
typedef int32_t sy_node_id;
typedef int32_t sy_value_id;
#define SY_NO_VALUE ((sy_value_id)-1)

/* ----------------------------------------------------------- options */

enum { SY_OPTION_BOOL = 0, SY_OPTION_INT = 1, SY_OPTION_FLOAT = 2, SY_OPTION_STRING = 3 };

/* One named, typed option of a component. The manifest's values are checked
 * against these before the component is created: unknown names and wrong
 * types are errors naming the manifest line. */
typedef struct sy_option_desc {
  uint32_t struct_size;
  const char* name;
  int32_t type;              /* SY_OPTION_* */
  const char* default_value; /* as text: "true", "16", "0.5", "name"; NULL = required */
  const char* help;
} sy_option_desc;

/* ------------------------------------------------- per-step batch layout */

/* What one forward pass computes, filled by the engine for every step and
 * readable by kernels (fused attention) and shared with the cache manager.
 * Tokens of all sequences are flattened: sequence i owns tokens
 * [query_start[i], query_start[i+1]) and has context_len[i] tokens of KV in
 * total (cached + new). Baseline (padded) mode sets num_seqs = 0. */
typedef struct sy_step_context {
  uint32_t struct_size;
  int32_t num_seqs;
  int32_t num_tokens;
  const int32_t* query_start;   /* [num_seqs + 1] */
  const int32_t* context_len;   /* [num_seqs] */
  const int64_t* positions;     /* [num_tokens] */
  const uint64_t* seq_ids;      /* [num_seqs] */
  /* Paged KV: block table of sequence i is block_tables[i * max_blocks_per_seq ...]. */
  const int32_t* block_tables;
  int32_t max_blocks_per_seq;
  int32_t block_size;
  /* KV storage per layer, owned by the cache manager: [num_blocks, kv_heads,
   * block_size, head_dim] (quantized rows: head_dim + SY_KV_ROW_SCALE_BYTES);
   * a value row may differ in size from a key row (sy_cache_config 1.8). */
  int32_t num_layers;
  const sy_tensor* key_cache;   /* [num_layers] */
  const sy_tensor* value_cache; /* [num_layers] */
  /* ---- 1.9 ---- */
  /* Token trees (a drafter's tree of proposals verified in one step). Per
   * token: the index, among its sequence's query tokens, of the token it
   * follows, or -1 when it follows the token before it (an ordinary chain).
   * NULL when every token does. A token's key and value are written at its
   * slot as always (context_len - n + j for the sequence's j-th of n query
   * tokens); it attends to the sequence's keys before its first query
   * token, to the query tokens on its path from the first (its ancestors)
   * and to itself, as if those stood at consecutive slots; positions[] is
   * its depth in the tree. Only kernels that declare
   * SY_KERNEL_CAP_TOKEN_TREES are given steps with trees. */
  const int32_t* token_parents;
} sy_step_context;

/* Quantized KV rows (1.7). A cache whose storage dtype is SY_DTYPE_INT8 or
 * SY_DTYPE_FLOAT8E4M3FN holds each (block, kv head, token) row of keys or
 * values as head_dim one-byte codes followed by the row's scale, an IEEE
 * float16 in little-endian order: value[i] = decode(code[i]) * scale, with
 * decode the int8's value or the e4m3fn number. One scale per row (a token's
 * head) lets a row be written once, as it arrives, and read without its
 * neighbours. The storage's last dimension counts the row's bytes:
 * head_dim + SY_KV_ROW_SCALE_BYTES. */
#define SY_KV_ROW_SCALE_BYTES 2
#define SY_KV_ROW_QUANTIZED(dtype) ((dtype) == SY_DTYPE_INT8 || (dtype) == SY_DTYPE_FLOAT8E4M3FN)

/* ------------------------------------------ model facts for passes (1.1) */

/* The role a graph input or output plays in the decoder-with-past interface,
 * as the host's interface discovery sees it (by role, not by one spelling). */
enum {
  SY_ROLE_NONE = 0,
  SY_ROLE_TOKEN_IDS = 1,
  SY_ROLE_ATTENTION_MASK = 2,
  SY_ROLE_POSITION_IDS = 3,
  SY_ROLE_PAST_KEY = 4,
  SY_ROLE_PAST_VALUE = 5,
  SY_ROLE_PRESENT_KEY = 6,
  SY_ROLE_PRESENT_VALUE = 7,
  SY_ROLE_LOGITS = 8
};

/* What the host knows of the model a pass rewrites; 0 where unknown. */
typedef struct sy_model_info {
  uint32_t struct_size;
  int32_t num_layers;
  int32_t kv_heads;
  int32_t head_dim;
  int32_t right_padding; /* 1: rows right-padded, positions from the mask sums */
  int64_t max_context;
  int64_t vocab_size;
} sy_model_info;

/* The shape of a synthetic decoder step for graph_evaluate: `batch` rows of
 * `new_len` new tokens after `past_len` cached tokens each (no padding). */
typedef struct sy_probe_shape {
  uint32_t struct_size;
  int32_t batch;
  int32_t past_len;
  int32_t new_len;
} sy_probe_shape;

/* ----------------------------------------------------------- host API */

typedef void (*sy_parallel_fn)(void* user, int64_t begin, int64_t end);

typedef struct sy_host_api {
  uint32_t struct_size;
  uint16_t abi_major;
  uint16_t abi_minor;

  /* Every function in this table may be called from any plugin function
   * while the host is calling into the plugin, on the calling thread;
   * function groups below say where else (or only where) they are valid.
   *
   * Errors and logging. set_error records the message of the error the
   * current callback is about to return (per thread; copied). last_error:
   * the message of the host function that failed last on this thread, valid
   * until the next host call. log: copied; also valid inside parallel_for. */
  void (*set_error)(const char* message);
  const char* (*last_error)(void);
  void (*log)(int32_t level, const char* message);

  /* Memory: host allocations, aligned (free with host->free only).
   * Device memory on the calling session's device of kind `device`
   * (SY_DEVICE_*; CPU memory for SY_DEVICE_CPU); SY_UNSUPPORTED when the
   * session has no such device, SY_OUT_OF_MEMORY when it is full. Free it
   * with device_free from a call of the same session. */
  void* (*alloc)(size_t bytes, size_t alignment);
  void (*free)(void* ptr);
  sy_status (*device_alloc)(int32_t device, size_t bytes, void** out);
  sy_status (*device_free)(int32_t device, void* ptr);
  /* The stream kernels on `device` must use (a cudaStream_t for CUDA; NULL on CPU). */
  void* (*device_stream)(int32_t device);

  /* The host thread pool: calls fn(user, begin, end) over [0, n) in chunks of
   * at least `grain`, on up to num_threads() threads, and returns when all
   * are done. fn must not throw and must not call parallel_for itself. */
  sy_status (*parallel_for)(int64_t n, int64_t grain, sy_parallel_fn fn, void* user);
  int32_t (*num_threads)(void);

  /* Options passed to a component (validated against its sy_option_desc;
   * valid inside the create/run that received `opts`). SY_NOT_FOUND for a
   * name the component did not declare, SY_INVALID_ARGUMENT for the wrong
   * type. Strings are valid until that create/run returns. */
  sy_status (*option_bool)(const sy_options* opts, const char* name, int32_t* out);
  sy_status (*option_int)(const sy_options* opts, const char* name, int64_t* out);
  sy_status (*option_float)(const sy_options* opts, const char* name, double* out);
  sy_status (*option_string)(const sy_options* opts, const char* name, const char** out);

  /* Graph reading: valid on the graph a pass's run or a kernel's create
   * received, until that call returns. Ids out of range return ""/-1/
   * SY_NOT_FOUND, never crash. */
  int32_t (*graph_node_count)(const sy_graph* g); /* node ids are 0..count-1; removed nodes report op "" */
  const char* (*node_op_type)(const sy_graph* g, sy_node_id n);
  const char* (*node_domain)(const sy_graph* g, sy_node_id n);
  const char* (*node_name)(const sy_graph* g, sy_node_id n);
  int32_t (*node_input_count)(const sy_graph* g, sy_node_id n);
  sy_value_id (*node_input)(const sy_graph* g, sy_node_id n, int32_t i);
  int32_t (*node_output_count)(const sy_graph* g, sy_node_id n);
  sy_value_id (*node_output)(const sy_graph* g, sy_node_id n, int32_t i);
  sy_status (*node_attr_int)(const sy_graph* g, sy_node_id n, const char* name, int64_t* out);
  sy_status (*node_attr_float)(const sy_graph* g, sy_node_id n, const char* name, float* out);
  sy_status (*node_attr_string)(const sy_graph* g, sy_node_id n, const char* name, const char** out);
  /* Copies up to `capacity` values into out and sets *count to the length. */
  sy_status (*node_attr_ints)(const sy_graph* g, sy_node_id n, const char* name, int64_t* out, int32_t capacity,
                              int32_t* count);
  int64_t (*graph_opset)(const sy_graph* g, const char* domain);

  const char* (*value_name)(const sy_graph* g, sy_value_id v);
  int32_t (*value_dtype)(const sy_graph* g, sy_value_id v);
  /* Rank, or -1 when unknown. dims[i] = -1 for a symbolic dimension. */
  int32_t (*value_shape)(const sy_graph* g, sy_value_id v, int64_t* dims, int32_t capacity);
  /* Constant data (initializer or folded), or SY_NOT_FOUND. The view is read-only. */
  sy_status (*value_constant)(const sy_graph* g, sy_value_id v, sy_tensor* out);
  sy_node_id (*value_producer)(const sy_graph* g, sy_value_id v); /* -1 for inputs and constants */
  /* Number of node inputs reading v (graph outputs count too). */
  int32_t (*value_use_count)(const sy_graph* g, sy_value_id v);
  int32_t (*value_is_graph_output)(const sy_graph* g, sy_value_id v);

  /* Graph rewriting: only inside a pass's run. New node outputs are new
   * values (written to outputs[]). Every rewrite is checked afterwards (the
   * equivalence probe) unless the pass calls graph_mark_approximate. */
  sy_status (*graph_add_node)(sy_graph* g, const char* domain, const char* op_type, const char* name,
                              const sy_value_id* inputs, int32_t num_inputs, sy_value_id* outputs,
                              int32_t num_outputs, sy_node_id* out_node);
  sy_status (*node_set_attr_int)(sy_graph* g, sy_node_id n, const char* name, int64_t value);
  sy_status (*node_set_attr_float)(sy_graph* g, sy_node_id n, const char* name, float value);
  sy_status (*node_set_attr_string)(sy_graph* g, sy_node_id n, const char* name, const char* value);
  sy_status (*node_set_attr_ints)(sy_graph* g, sy_node_id n, const char* name, const int64_t* values,
                                  int32_t count);
  /* Copies the data into a new constant value. */
  sy_status (*graph_add_constant)(sy_graph* g, const char* name_hint, const sy_tensor* data, sy_value_id* out);
  /* Declares the type and shape of a value (e.g. a new node's output). dims
   * may be NULL with rank -1 for unknown. */
  sy_status (*value_set_type)(sy_graph* g, sy_value_id v, int32_t dtype, const int64_t* dims, int32_t rank);
  sy_status (*graph_replace_all_uses)(sy_graph* g, sy_value_id from, sy_value_id to);
  sy_status (*graph_remove_node)(sy_graph* g, sy_node_id n);

  /* Kernel execution: only inside sy_kernel_desc.compute, on its ctx.
   * Input tensors are read-only and valid during compute; outputs are
   * allocated by the host (kernel_allocate_output), owned by it, written by
   * the kernel. kernel_step_context: NULL outside the step engine. */
  int32_t (*kernel_input_count)(const sy_kernel_context* ctx);
  /* SY_NOT_FOUND for an omitted optional input. */
  sy_status (*kernel_input)(const sy_kernel_context* ctx, int32_t i, sy_tensor* out);
  int32_t (*kernel_output_count)(const sy_kernel_context* ctx);
  sy_status (*kernel_allocate_output)(sy_kernel_context* ctx, int32_t i, int32_t dtype, const int64_t* dims,
                                      int32_t rank, sy_tensor* out);
  const sy_step_context* (*kernel_step_context)(const sy_kernel_context* ctx);

  /* The graph's interface: runtime inputs and named outputs. */
  int32_t (*graph_input_count)(const sy_graph* g);
  sy_value_id (*graph_input)(const sy_graph* g, int32_t i);
  int32_t (*graph_output_count)(const sy_graph* g);
  const char* (*graph_output_name)(const sy_graph* g, int32_t i);
  sy_value_id (*graph_output_value)(const sy_graph* g, int32_t i);
  /* Drops the named graph output (e.g. present.N.* once a cache manager owns
   * the KV); SY_NOT_FOUND if there is none. Inputs nothing reads any more
   * need not be fed by the engine. */
  sy_status (*graph_remove_output)(sy_graph* g, const char* name);

  /* ---- 1.1: check SY_HAS_FIELD(host, sy_host_api, <name>) before calling. */

  /* The role (SY_ROLE_*) of value v and, for KV roles, its layer (else -1).
   * Valid on the graph a pass is running on. */
  sy_status (*graph_value_role)(const sy_graph* g, sy_value_id v, int32_t* role, int32_t* layer);
  /* Fills what is known of the model (out->struct_size set by the caller). */
  sy_status (*graph_model_info)(const sy_graph* g, sy_model_info* out);
  /* Evaluates `want` values of the graph on synthetic decoder inputs of the
   * given shape (seeded token ids, all-ones mask, positions, random past
   * keys/values), with the `feeds` values supplied from outside (their
   * producers do not run). Only the nodes the wanted values need run. out[i]
   * are host tensors owned by the host, valid until the pass returns. Only
   * inside a pass's run (SY_UNSUPPORTED elsewhere). */
  sy_status (*graph_evaluate)(const sy_graph* g, const sy_probe_shape* shape, const sy_value_id* feed_ids,
                              const sy_tensor* feeds, int32_t num_feeds, const sy_value_id* want, int32_t num_want,
                              sy_tensor* out);
  /* Declares the running pass's rewrite approximate (quantized weights,
   * pooled KV heads): the host's equivalence probe, which otherwise holds
   * every rewrite to the original's outputs, skips it. `reason` is copied. */
  sy_status (*graph_mark_approximate)(sy_graph* g, const char* reason);

  /* ---- 1.11 ---- */

  /* The host's float32 product, on the calling thread (call it inside
   * parallel_for to split the columns): C[m, n0:n1] = A[m, :] . op(B)[:, n0:n1]
   * for m < M, C overwritten. A is M x K row-major with row stride lda; op(B)
   * is K x N: B row-major K x N (ldb >= N) or, with trans_b, B row-major
   * N x K (ldb >= K); C row-major (ldc >= n1). It is the kernel the core's
   * MatMul runs (SIMD chosen for the CPU), and a row's result does not
   * depend on M, n0..n1 or the other rows: a kernel that uses it gives a
   * token the same bits alone, in a batch and in its prompt, and the same
   * bits as the core's MatMul on one row. SY_INVALID_ARGUMENT for sizes or
   * strides that do not fit (last_error says which). Valid anywhere,
   * inside parallel_for included. */
  sy_status (*matmul_f32)(int32_t trans_b, int64_t M, int64_t n0, int64_t n1, int64_t K, const float* A, int64_t lda,
                          const float* B, int64_t ldb, float* C, int64_t ldc);
} sy_host_api;

/* ------------------------------------------------------- component kinds */

/* Graph pass: rewrites the graph through the host's graph functions. */
typedef struct sy_pass_desc {
  uint32_t struct_size;
  const char* name;
  const char* version;
  const char* description;
  const sy_option_desc* const* options;
  int32_t num_options;
  /* Required. Runs once per session that selects the pass, on the thread
   * creating the session. Sets *changed to 1 when it modified the graph.
   * SY_UNSUPPORTED (with a message naming the node or layer) refuses a
   * graph it cannot rewrite correctly: it must never rewrite what it does
   * not understand. */
  sy_status (*run)(void* plugin_data, sy_graph* graph, const sy_options* options, int32_t* changed);
} sy_pass_desc;

/* Kernel creation input: the node it is instantiated for (read through the
 * host's graph functions, read-only) and the opset it was exported under. */
typedef struct sy_kernel_create_info {
  uint32_t struct_size;
  const sy_graph* graph;
  sy_node_id node;
  int64_t opset;
  int32_t device;
  /* ---- 1.2 ---- */
  int32_t device_index; /* which device of that kind (cuda:N); 0 on the CPU */
} sy_kernel_create_info;

typedef struct sy_kernel_desc {
  uint32_t struct_size;
  const char* name;    /* unique within the plugin, e.g. "silu_f32" */
  const char* version;
  const char* domain;  /* "" = ONNX default domain */
  const char* op_type;
  int32_t device;      /* SY_DEVICE_* */
  const int32_t* dtypes; /* accepted dtypes of input `type_input`; NULL/0 = any */
  int32_t num_dtypes;
  int32_t type_input;
  int32_t priority;      /* higher wins over lower; built-in kernels use 0 */
  /* Required. Per-node state; *state may stay NULL. info and the graph it
   * points to are valid during create only: copy the attributes you need.
   * Called once per node when a session is created (the thread creating it). */
  sy_status (*create)(void* plugin_data, const sy_kernel_create_info* info, void** state);
  /* Required. Once per forward step, on the session's executing thread;
   * never concurrently for one state. On CUDA, enqueue on device_stream. */
  sy_status (*compute)(void* state, sy_kernel_context* ctx);
  /* Required. Once per successful create, when the session is destroyed. */
  void (*destroy)(void* state);
  /* ---- 1.9 ---- */
  /* What the kernel handles beyond its op's 1.0 contract (SY_KERNEL_CAP_*);
   * absent or 0: nothing more. */
  uint32_t capabilities;
} sy_kernel_desc;

/* A PagedAttention kernel that reads sy_step_context.token_parents (1.9). */
#define SY_KERNEL_CAP_TOKEN_TREES 1u

/* Scheduler: each step, which sequences run and how many tokens each.
 *
 * The contract (the engine, core/engine/step_planning.cpp, checks every plan
 * and fails the step as a plugin failure when one breaks it):
 *  - Each step the engine passes every live sequence: `running` (holding KV
 *    blocks, in admission order) and `waiting` (new, or preempted and to be
 *    recomputed from scratch, oldest first). It runs on the session's
 *    step-engine thread only: plan is never called concurrently on a state.
 *  - The plan names each sequence at most once: RUN with num_tokens >= 1
 *    (at most remaining_tokens are used), or PREEMPT (running sequences
 *    only: their blocks are freed and they wait to be recomputed). The sum
 *    of num_tokens is at most token_budget; at most max_seqs sequences run.
 *  - A running sequence left out of the plan does not run this step and
 *    keeps its blocks (it stalls; it is not preempted). A waiting sequence
 *    left out keeps waiting.
 *  - The engine applies the plan in order: preemptions, then the running
 *    sequences (allocating room for their tokens), then admissions of
 *    waiting ones in the plan's order. When the cache refuses a running
 *    sequence's tokens the engine preempts that sequence (without asking);
 *    admission stops at the first waiting sequence the cache cannot hold
 *    (no overtaking), and at max_seqs running sequences.
 *  - `capacity` (passed to plan) is the size of `out`: num_waiting +
 *    num_running, enough to name every sequence once.
 *  - Errors: a plan that fails (an error status, or a plan breaking the
 *    rules above) runs nothing that step; the requests stay queued and plan
 *    is asked again next step. After limits.max_plugin_failures failed steps
 *    in a row (3 by default) the scheduler is out of service: the queued
 *    requests fail with its message and the session refuses new ones, or,
 *    with `on_failure: builtin` in the manifest's scheduler section, the
 *    engine serves on with its built-in continuous batcher.
 *  - Arrays grow by minor version: the host lays out waiting/running with
 *    the stride the descriptor declares (seq_size) and reads `out` with
 *    decision_size; fields the other side does not know are zero. */
enum { SY_SEQ_WAITING = 0, SY_SEQ_RUNNING = 1, SY_SEQ_PREEMPTED = 2 };
typedef struct sy_sched_seq {
  uint64_t id;
  int32_t state;         /* SY_SEQ_* */
  int32_t prompt_len;    /* tokens of the request's prompt (generated tokens never counted here) */
  int32_t computed_len;  /* tokens whose KV is in the cache (0 while waiting) */
  int32_t generated;     /* tokens generated so far; a preempted sequence keeps them and recomputes their KV */
  int32_t max_tokens;
  int32_t priority;      /* lower runs first among equals */
  int32_t blocks_needed; /* KV blocks, beyond the ones it holds, that all its remaining_tokens need (a decode
                            token: 0 or 1; prefix-cache hits not counted) */
  int32_t reserved;
  double arrival_time;   /* seconds, engine clock */
  /* ---- 1.3 ---- */
  int32_t remaining_tokens; /* tokens to run before it samples again: prompt_len + generated - computed_len
                               (1 for a decoding sequence, the whole prompt for a new one, prompt + generated
                               for a preempted one) */
  int32_t reserved_1_3;
} sy_sched_seq;

typedef struct sy_sched_input {
  uint32_t struct_size;
  const sy_sched_seq* waiting; /* num_waiting elements, seq_size bytes apart */
  int32_t num_waiting;
  const sy_sched_seq* running; /* num_running elements, seq_size bytes apart */
  int32_t num_running;
  int32_t free_blocks;   /* blocks the cache manager has free now */
  int32_t block_size;    /* tokens per block */
  int32_t token_budget;  /* max tokens in one step */
  int32_t max_seqs;      /* max sequences in one step */
  double now;            /* seconds, engine clock (as arrival_time) */
  /* ---- 1.3 ---- */
  uint32_t seq_size;     /* bytes between elements of waiting and running: the descriptor's seq_size (absent
                            before 1.3: 48, the 1.0 size) */
} sy_sched_input;

enum { SY_SCHED_RUN = 0, SY_SCHED_PREEMPT = 1 };
typedef struct sy_sched_decision {
  uint64_t seq_id;
  int32_t action;     /* SY_SCHED_* */
  int32_t num_tokens; /* RUN: tokens of this sequence in the step (a prompt chunk, or 1 to decode); PREEMPT: 0 */
} sy_sched_decision;

typedef struct sy_scheduler_desc {
  uint32_t struct_size;
  const char* name;
  const char* version;
  const char* description;
  const sy_option_desc* const* options;
  int32_t num_options;
  /* Required. Once per session, on the thread creating it. */
  sy_status (*create)(void* plugin_data, const sy_options* options, void** state);
  /* Required. Once per engine step, on the step-engine thread (see the
   * contract above). input and the arrays it points to are valid during the
   * call. Writes at most `capacity` decisions to out (decision_size bytes
   * apart) and their number to *count. */
  sy_status (*plan)(void* state, const sy_sched_input* input, sy_sched_decision* out, int32_t capacity,
                    int32_t* count);
  /* Required. Once, when the session is destroyed. */
  void (*destroy)(void* state);
  /* ---- 1.3 ---- */
  uint32_t seq_size;      /* sizeof(sy_sched_seq) the plugin was built with; 0: the 1.3 size (56) */
  uint32_t decision_size; /* sizeof(sy_sched_decision) the plugin was built with; 0: the 1.3 size (16).
                             A plugin built against a later minor that grows them sets both (plugin.hpp does) */
} sy_scheduler_desc;

/* The element sizes of a scheduler's arrays, as a host lays them out (one
 * definition for the host, plugin.hpp and the test harness): what the
 * descriptor declares, the 1.3 sizes for 0, the 1.0 sizes for a descriptor
 * built before 1.3. And the stride of an input's arrays as a plugin reads
 * them (the 1.0 size from a host older than 1.3). */
#define SY_SCHED_SEQ_SIZE_1_0 offsetof(sy_sched_seq, remaining_tokens)
#define SY_SCHED_SEQ_SIZE_1_3 (offsetof(sy_sched_seq, reserved_1_3) + sizeof(int32_t))
static inline size_t sy_scheduler_seq_size(const sy_scheduler_desc* d) {
  if (!SY_HAS_FIELD(d, sy_scheduler_desc, decision_size)) return SY_SCHED_SEQ_SIZE_1_0;
  return d->seq_size ? d->seq_size : SY_SCHED_SEQ_SIZE_1_3;
}
static inline size_t sy_scheduler_decision_size(const sy_scheduler_desc* d) {
  if (!SY_HAS_FIELD(d, sy_scheduler_desc, decision_size) || !d->decision_size) return sizeof(sy_sched_decision);
  return d->decision_size;
}
static inline size_t sy_sched_input_seq_size(const sy_sched_input* in) {
  return SY_HAS_FIELD(in, sy_sched_input, seq_size) ? in->seq_size : SY_SCHED_SEQ_SIZE_1_0;
}

/* KV-cache manager. */
typedef struct sy_cache_config {
  uint32_t struct_size;
  int32_t num_layers;
  int32_t kv_heads;
  int32_t head_dim;
  int32_t dtype;
  int32_t device;
  int32_t block_size;   /* reserved: 0. The block size is the cache manager's own option. */
  int64_t budget_bytes; /* reserved: 0. The KV budget is the cache manager's own option. */
  /* ---- 1.2 ---- */
  int32_t device_index; /* which device of that kind (cuda:N) the KV lives on; 0 on the CPU */
  /* ---- 1.7 ---- */
  /* Identifies the model (its file and the rewrites that shape its KV): a
   * cache tier that outlives the process keys what it keeps by it, so KV of
   * another model is never read back. 0 from hosts before 1.7. */
  uint64_t model_fingerprint;
  /* ---- 1.8 ---- */
  /* The value rows' size where it differs from head_dim (a model whose values
   * are smaller than its keys; latent attention, which caches the latent as
   * keys and the shared rotary key as values). 0, or absent (a host before
   * 1.8): values are head_dim wide like keys. Storage's value tensor is then
   * [num_blocks, kv_heads, block_size, value_head_dim]. */
  int32_t value_head_dim;
} sy_cache_config;

/* A cache config's value row size, whatever the host's minor. */
static inline int32_t sy_cache_value_head_dim(const sy_cache_config* c) {
  return SY_HAS_FIELD(c, sy_cache_config, value_head_dim) && c->value_head_dim > 0 ? c->value_head_dim : c->head_dim;
}

typedef struct sy_cache_stats {
  uint32_t struct_size;
  int32_t total_blocks;
  int32_t free_blocks;
  int64_t prefix_queries; /* tokens looked up */
  int64_t prefix_hits;    /* tokens found */
} sy_cache_stats;

/* 1.5: a change to the set of blocks match_prefix can find, reported by
 * take_events. The engine turns them into the KV-cache events of its
 * embedding API (chained block hashes for routers that send a request where
 * its prefix is cached). Frozen: this struct never grows (a later minor
 * would add a new one). */
enum {
  SY_CACHE_BLOCK_STORED = 1,  /* a full block became findable (committed) */
  SY_CACHE_BLOCK_REMOVED = 2, /* a block stopped being findable (evicted, or about to be overwritten) */
  SY_CACHE_ALL_CLEARED = 3    /* every findable block was dropped at once */
};
typedef struct sy_cache_event {
  int32_t kind;          /* SY_CACHE_* above */
  int32_t block;         /* STORED, REMOVED: the block's index in storage */
  int32_t parent;        /* STORED: the previous block of its chain, -1 for a sequence's first block */
  int32_t num_tokens;    /* STORED: the tokens the block holds (the block size) */
  const int32_t* tokens; /* STORED */
} sy_cache_event;

typedef struct sy_cache_desc {
  uint32_t struct_size;
  const char* name;
  const char* version;
  const char* description;
  const sy_option_desc* const* options;
  int32_t num_options;
  /* All functions after create are called one at a time, never
   * concurrently: on the session's step-engine thread, or (teacher-forced
   * logits, KV export and import through the embedding API) on a caller's
   * thread while the step engine waits. Keep no thread-local state.
   * Required. Once per session; config is valid during the call. */
  sy_status (*create)(void* plugin_data, const sy_cache_config* config, const sy_options* options, void** state);
  /* Required. Reserve room for `num_tokens` more tokens of `seq` (a new seq
   * starts empty); SY_OUT_OF_MEMORY when full, with nothing changed: the
   * engine then preempts or waits. */
  sy_status (*allocate)(void* state, uint64_t seq, int32_t num_tokens);
  /* Optional (NULL: no prefix sharing). Reuse cached blocks for the longest
   * cached prefix of tokens of a new seq; sets *cached (<= num_tokens). */
  sy_status (*match_prefix)(void* state, uint64_t seq, const int32_t* tokens, int32_t num_tokens, int32_t* cached);
  /* Optional (NULL: nothing recorded). Tokens [0, n) of seq are computed
   * (so full blocks can be shared). */
  sy_status (*commit)(void* state, uint64_t seq, const int32_t* tokens, int32_t num_tokens);
  /* Optional (NULL: speculative decoding is refused with this cache). Drop
   * the tail of seq so it holds `length` tokens (rejected drafts). */
  sy_status (*truncate)(void* state, uint64_t seq, int32_t length);
  /* Optional (NULL: forking is refused). child shares parent's blocks. */
  sy_status (*fork)(void* state, uint64_t parent, uint64_t child);
  /* Required. The sequence is finished, cancelled or preempted: free it. */
  sy_status (*release)(void* state, uint64_t seq);
  /* Required. The blocks of seq in order (-1 for a block dropped by a
   * sliding window); *blocks stays valid until the next call on this cache. */
  sy_status (*block_table)(void* state, uint64_t seq, const int32_t** blocks, int32_t* count);
  /* Required. Layer `layer`'s key and value storage, [num_blocks, kv_heads,
   * block_size, head_dim] (values: value_head_dim, 1.8) on the config's device (a quantized cache's rows
   * are head_dim + SY_KV_ROW_SCALE_BYTES wide, SY_KV_ROW_*); the data stays
   * valid and in place for the cache's lifetime. */
  sy_status (*storage)(void* state, int32_t layer, sy_tensor* key, sy_tensor* value);
  /* Optional (NULL: no statistics). out->struct_size is set by the host. */
  sy_status (*stats)(void* state, sy_cache_stats* out);
  /* Required. Once, when the session is destroyed. */
  void (*destroy)(void* state);
  /* ---- 1.5 ---- */
  /* Optional (NULL: the engine reports no KV-cache events). The blocks
   * stored and removed since the last call, oldest first; *events stays
   * valid until the next call on this cache. A stored block's parent was
   * stored before it and is removed after it (a child is never findable
   * without its prefix). The engine calls it after every step, so what a
   * plugin keeps between calls stays small. */
  sy_status (*take_events)(void* state, const sy_cache_event** events, int32_t* count);
} sy_cache_desc;

/* 1.2: how the request being drafted for samples (for drafters that draw
 * their proposals at random). */
typedef struct sy_draft_sampling {
  uint32_t struct_size;
  float temperature; /* 0: greedy (verification keeps the target's argmax) */
  int32_t top_k;     /* 0: off */
  float top_p;       /* 1: off */
  uint64_t seed;     /* the request's seed */
} sy_draft_sampling;

/* Speculative drafter: proposes up to k next tokens for a sequence. */
typedef struct sy_drafter_desc {
  uint32_t struct_size;
  const char* name;
  const char* version;
  const char* description;
  const sy_option_desc* const* options;
  int32_t num_options;
  /* All functions after create run on the session's step-engine thread.
   * Required. Once per session. */
  sy_status (*create)(void* plugin_data, const sy_options* options, void** state);
  /* Required. tokens: the sequence so far (prompt + generated), valid
   * during the call. Writes <= k token ids to out; ids outside the model's
   * vocabulary make the host drop the draft (outputs stay exact). */
  sy_status (*propose)(void* state, uint64_t seq, const int32_t* tokens, int32_t num_tokens, int32_t k,
                       int32_t* out, int32_t* count);
  /* Optional (NULL: no feedback). After verification: how many of the
   * proposed tokens were accepted. */
  sy_status (*accepted)(void* state, uint64_t seq, int32_t proposed, int32_t accepted);
  /* Optional (NULL: nothing to free). The sequence finished. */
  sy_status (*release)(void* state, uint64_t seq);
  /* Required. Once, when the session is destroyed. */
  void (*destroy)(void* state);
  /* ---- 1.2, optional (the host checks SY_HAS_FIELD(desc, sy_drafter_desc, propose_sampled)):
   * Like propose, for a drafter that draws its proposals at random. It also
   * writes the distribution proposal i was drawn from to
   * probs[i * vocab_size .. (i + 1) * vocab_size) for i < *count (each row
   * non-negative, summing to 1). Verification then accepts proposal i with
   * probability min(1, p/q) and otherwise resamples from the residual, so
   * sampled outputs keep the target model's distribution exactly. When
   * present it is called instead of propose. Without it, proposals are taken
   * as certain (point masses): still exact (accepting d with probability
   * p(d) and resampling the rest keeps the distribution for any d drawn
   * independently of the verifier), but a drafter that samples then gets
   * fewer drafts accepted: sum min(p, q) >= sum q * p.
   * vocab_size is the target model's; probs is host memory of
   * k * vocab_size floats, valid during the call. */
  sy_status (*propose_sampled)(void* state, uint64_t seq, const int32_t* tokens, int32_t num_tokens, int32_t k,
                               const sy_draft_sampling* sampling, int64_t vocab_size, int32_t* out, float* probs,
                               int32_t* count);
  /* ---- 1.9, optional (the host checks SY_HAS_FIELD(desc, sy_drafter_desc, propose_tree)):
   * A tree of proposals instead of a chain: at most max_nodes nodes, each
   * after its parent: node i proposes out_tokens[i] to follow node
   * out_parents[i] (an earlier node), or, for -1, the sequence's last
   * token. One forward step verifies the whole tree, and the longest path
   * the target agrees with is kept: at each node the target's own choice
   * (its greedy token, or its sample) picks the child that continues, so
   * outputs keep the target's distribution exactly. accepted() then gets
   * the node count and the kept path's length. A tree whose parent index is
   * not an earlier node, whose token is outside the vocabulary, or that has
   * more than max_nodes nodes is refused for that sequence's step (counted
   * and named in the engine's metrics; the sequence decodes without it).
   * When the engine cannot verify trees here (its attention kernel lacks
   * SY_KERNEL_CAP_TOKEN_TREES, a constrained request, a KV cache in device
   * memory) it calls propose instead, so a drafter with propose_tree still
   * implements propose. */
  sy_status (*propose_tree)(void* state, uint64_t seq, const int32_t* tokens, int32_t num_tokens, int32_t max_nodes,
                            int32_t* out_tokens, int32_t* out_parents, int32_t* count);
  /* ---- 1.9, optional (NULL: nothing observed): what verification saw.
   * After a step verified this drafter's proposals for seq (count tokens,
   * parents as propose_tree gave them, or NULL for a chain), the target's
   * greedy choice of the token after each: target_next[0] after the
   * sequence's last token, target_next[1 + i] after proposal i, whatever
   * the request samples with. Past the first proposal the target rejected,
   * these are its continuations of contexts it did not keep (Jacobi
   * iteration's next guesses): the n-grams lookahead decoding collects.
   * Called before accepted(). */
  sy_status (*observe)(void* state, uint64_t seq, const int32_t* proposed, const int32_t* parents, int32_t count,
                       const int32_t* target_next);
  /* ---- 1.10, optional (NULL: hidden states not wanted): the target's
   * final hidden state (the LM head's input, hidden_size floats, valid
   * during the call) at the position whose logits chose seq's last token,
   * given just before each propose / propose_tree for seq: what Medusa- and
   * EAGLE-style heads draft from. A drafter that sets it is refused at load
   * when the target's LM head cannot be split off (the logits-selection
   * pass names why); hidden_size is the target's, the same every call. */
  sy_status (*hidden_state)(void* state, uint64_t seq, const float* hidden, int32_t hidden_size);
} sy_drafter_desc;

/* --------------------------------------------- logits processors (1.4) */

/* The vocabulary a logits processor constrains, handed over once when it is
 * created: the bytes each token id adds to the text (decoded by the host
 * from the model's tokenizer, whatever its scheme: byte-level BPE,
 * SentencePiece pieces with byte fallback, llama2.c pieces), so a processor
 * needs no tokenizer of its own. Valid during create only: copy it. */
typedef struct sy_vocab {
  uint32_t struct_size;
  int32_t vocab_size;          /* the model's logits width; ids the tokenizer lacks are padding (empty, special) */
  const char* bytes;           /* every token's bytes, concatenated (not NUL-terminated; may contain NUL) */
  const int64_t* offsets;      /* [vocab_size + 1]: token i is bytes[offsets[i] .. offsets[i + 1]) */
  const uint8_t* special;      /* [vocab_size]: 1 for control tokens (BOS, EOS, chat markers, padding): never text */
  const int32_t* stop_tokens;  /* the ids that end a sequence (the model's end-of-sequence ids) */
  int32_t num_stop_tokens;
} sy_vocab;

/* Flags of sy_logits_processor_desc.query. */
enum {
  SY_CONSTRAINT_COMPLETE = 1,   /* the text so far is a whole match: a stop token may come next */
  SY_CONSTRAINT_TERMINATED = 2  /* a stop token was accepted: nothing may follow */
};

/* Logits processor: constrains what each request may generate next (JSON,
 * JSON Schema, regular expressions, grammars), one state per request.
 *
 * The contract:
 *  - A request that carries a constraint (a kind and a spec, both strings
 *    the processor interprets) gets begin() when it is admitted and end()
 *    when it finishes for any reason; the others never reach the processor.
 *  - Each step the host asks for the masks of the constrained sequences
 *    that sample, in one batched fill_masks call (a processor may spread
 *    the rows over threads of its own: the call is on one host thread, and
 *    may overlap the model's forward pass). The host sets the logits of
 *    every token outside the mask to -infinity before penalties and
 *    sampling, in every engine mode.
 *  - Every token the request emits is accept()ed, in order.
 *  - Speculative decoding: the host checks draft tokens against the mask by
 *    accepting them one at a time (filling the mask after each, one row per
 *    call) and then rolls them back with rollback(n) before verification; a
 *    draft the processor refuses ends the draft there. Outputs stay what
 *    constrained decoding without drafts produces.
 *  - All calls for one state come from one thread at a time (the session's
 *    step-engine thread, or the thread that runs a baseline generation).
 *  - Errors: begin returning SY_INVALID_ARGUMENT or SY_UNSUPPORTED (with a
 *    message naming the part of the spec it refuses) fails that request
 *    with the message (an HTTP 400 from the server); any other failure
 *    fails the sequences of the call, not the step. */
typedef struct sy_logits_processor_desc {
  uint32_t struct_size;
  const char* name;
  const char* version;
  const char* description;
  const sy_option_desc* const* options;
  int32_t num_options;
  /* Required. Once per session, on the thread creating it. vocab is valid
   * during the call. */
  sy_status (*create)(void* plugin_data, const sy_vocab* vocab, const sy_options* options, void** state);
  /* Required. Starts constraining seq. kind: "json_object" (any JSON
   * object), "json_schema" (spec: the schema as JSON text), "regex",
   * "grammar" (spec: EBNF/GBNF text), "triggered_tags" (1.6; spec:
   * {"triggers": [strings], "tags": [{"begin", "schema", "end"}],
   * "stop_after_first": bool}: free text in which a trigger starts one of
   * the tags whose begin it prefixes, the tag's begin, JSON valid against
   * its schema, its end; strict tool calls), or a kind of the processor's
   * own. Refuse a kind you do not know with SY_UNSUPPORTED.
   * Both strings are valid during the call. */
  sy_status (*begin)(void* state, uint64_t seq, const char* kind, const char* spec);
  /* Required. For each of the num_rows sequences in seqs (distinct), the
   * tokens allowed next, after every token accepted so far: row r is the
   * words_per_row 32-bit words at mask + r * words_per_row; bit (t % 32) of
   * word t / 32 set means token t is allowed. The host owns mask (valid
   * during the call) and zeroes nothing: write every word of each row. */
  sy_status (*fill_masks)(void* state, const uint64_t* seqs, int32_t num_rows, uint32_t* mask, int32_t words_per_row);
  /* Required. Advances seq by token. *allowed = 0 when the constraint does
   * not allow it; the state is then unchanged. */
  sy_status (*accept)(void* state, uint64_t seq, int32_t token, int32_t* allowed);
  /* Required. Undoes the last num_tokens accepted tokens of seq (at most
   * the drafts of one step plus one). */
  sy_status (*rollback)(void* state, uint64_t seq, int32_t num_tokens);
  /* Required. SY_CONSTRAINT_* flags of seq as it stands. */
  sy_status (*query)(void* state, uint64_t seq, int32_t* flags);
  /* Required. seq finished (any reason): free what it holds. */
  sy_status (*end)(void* state, uint64_t seq);
  /* Required. Once, when the session is destroyed. */
  void (*destroy)(void* state);
  /* ---- 1.6 ---- */
  /* Optional (NULL: never called). Right after begin: seq may emit at most
   * `tokens` more tokens (its max_tokens, within what the context leaves).
   * The processor counts what it accepts and rolls back from there, and
   * keeps a whole match within reach: once the tokens left come down to the
   * shortest completion the constraint still needs, its masks allow only
   * tokens on such a completion, so a request that reaches its limit still
   * ends on a whole match (valid JSON, a full regex match). */
  sy_status (*set_token_budget)(void* state, uint64_t seq, int32_t tokens);
} sy_logits_processor_desc;

/* ------------------------------------------------------- the entry point */

typedef struct sy_plugin_info {
  uint32_t struct_size;
  uint16_t abi_major; /* SY_PLUGIN_ABI_MAJOR the plugin was built with */
  uint16_t abi_minor;
  const char* name;
  const char* version;
  const char* description;
  void* plugin_data; /* passed back to every create/run */
  const sy_pass_desc* const* passes;
  int32_t num_passes;
  const sy_kernel_desc* const* kernels;
  int32_t num_kernels;
  const sy_scheduler_desc* const* schedulers;
  int32_t num_schedulers;
  const sy_cache_desc* const* caches;
  int32_t num_caches;
  const sy_drafter_desc* const* drafters;
  int32_t num_drafters;
  /* Called once before the library is closed. May be NULL. */
  void (*shutdown)(void* plugin_data);
  /* ---- 1.4 ---- */
  const sy_logits_processor_desc* const* logits_processors;
  int32_t num_logits_processors;
} sy_plugin_info;

#define SY_PLUGIN_ENTRY_SYMBOL "switchyard_plugin_init"

/* Every plugin library exports this. Returns NULL on failure after calling
 * host->set_error. The returned description must stay valid until the
 * library is unloaded. The same library may be opened more than once while
 * it stays mapped (two sessions in one process): init then runs again and
 * must return a description that is still valid for the earlier callers
 * (return the same one). shutdown runs once per successful init. */
typedef const sy_plugin_info* (*sy_plugin_init_fn)(const sy_host_api* host);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SWITCHYARD_PLUGIN_H_ */
