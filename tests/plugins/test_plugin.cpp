// Real plugin libraries for the ABI conformance tests, one source compiled
// into several .so files by TEST_PLUGIN_VARIANT:
//   GOOD          pass "test-noop", a Sigmoid kernel, scheduler, cache, drafter
//   DUPLICATE     another plugin registering pass "test-noop"
//   FAILING_PASS  a pass that returns an error with a message
//   THROWING      a pass and a kernel whose raw C callbacks throw C++ exceptions
//   INCOMPLETE_CACHE  a cache manager without block_table (which the engine calls)
#include <switchyard/plugin.hpp>

#define GOOD 1
#define DUPLICATE 2
#define FAILING_PASS 3
#define THROWING 4
#define INCOMPLETE_CACHE 5

#include <cmath>
#include <map>
#include <stdexcept>

namespace {

using namespace sy::plugin;

#if TEST_PLUGIN_VARIANT == GOOD || TEST_PLUGIN_VARIANT == DUPLICATE
// Counts nodes; changes nothing.
struct NoopPass {
  static bool run(GraphRef& g, const Options& o) {
    int64_t live = 0;
    for (sy_node_id n = 0; n < g.node_count(); ++n) live += !g.op_type(n).empty();
    if (o.get_bool("verbose")) log(SY_LOG_INFO, "graph has " + std::to_string(live) + " nodes");
    return false;
  }
};
#endif

#if TEST_PLUGIN_VARIANT == GOOD
// A Sigmoid kernel that outranks the built-in one (priority 10).
struct SigmoidKernel {
  explicit SigmoidKernel(const NodeRef&) {}
  void compute(KernelIO& io) {
    auto x = io.input(0);
    auto y = io.allocate_output(0, SY_DTYPE_FLOAT32, x.dims());
    for (int64_t i = 0; i < x.numel(); ++i) y.data<float>()[i] = 1.0f / (1.0f + std::exp(-x.data<float>()[i]));
  }
};

// FCFS scheduler: running sequences decode one token, waiting ones prefill
// whole, within the token budget.
struct Fcfs {
  int64_t max_prefill;
};
sy_status fcfs_create(void*, const sy_options* o, void** state) {
  return guard([&] { *state = new Fcfs{Options(o).get_int("max_prefill")}; });
}
sy_status fcfs_plan(void* state, const sy_sched_input* in, sy_sched_decision* out, int32_t cap, int32_t* count) {
  return guard([&] {
    auto* s = static_cast<Fcfs*>(state);
    int32_t n = 0, budget = in->token_budget;
    for (int32_t i = 0; i < in->num_running && n < cap && budget > 0; ++i, --budget) out[n++] = {in->running[i].id, SY_SCHED_RUN, 1};
    for (int32_t i = 0; i < in->num_waiting && n < cap; ++i) {
      int32_t want = std::min<int32_t>(in->waiting[i].prompt_len, static_cast<int32_t>(s->max_prefill));
      if (want > budget) break;
      out[n++] = {in->waiting[i].id, SY_SCHED_RUN, want};
      budget -= want;
    }
    *count = n;
  });
}
void fcfs_destroy(void* state) { delete static_cast<Fcfs*>(state); }

// A cache that only counts tokens per sequence against a capacity.
struct Counter {
  int64_t capacity, used = 0;
  std::map<uint64_t, int32_t> seqs;
};
sy_status counter_create(void*, const sy_cache_config* cfg, const sy_options* o, void** state) {
  return guard([&] {
    if (cfg->num_layers <= 0) throw Error("num_layers must be positive", SY_INVALID_ARGUMENT);
    *state = new Counter{Options(o).get_int("capacity_tokens")};
  });
}
sy_status counter_allocate(void* state, uint64_t seq, int32_t n) {
  auto* c = static_cast<Counter*>(state);
  if (c->used + n > c->capacity) {
    host()->set_error("cache full");
    return SY_OUT_OF_MEMORY;
  }
  c->used += n;
  c->seqs[seq] += n;
  return SY_OK;
}
sy_status counter_release(void* state, uint64_t seq) {
  auto* c = static_cast<Counter*>(state);
  auto it = c->seqs.find(seq);
  if (it == c->seqs.end()) {
    host()->set_error("unknown sequence");
    return SY_NOT_FOUND;
  }
  c->used -= it->second;
  c->seqs.erase(it);
  return SY_OK;
}
sy_status counter_storage(void*, int32_t, sy_tensor* k, sy_tensor* v) {
  *k = sy_tensor{};
  *v = sy_tensor{};
  return SY_OK;
}
// No paged storage: every sequence has an empty block table.
sy_status counter_block_table(void*, uint64_t, const int32_t** blocks, int32_t* count) {
  *blocks = nullptr;
  *count = 0;
  return SY_OK;
}
sy_status counter_stats(void* state, sy_cache_stats* s) {
  auto* c = static_cast<Counter*>(state);
  s->total_blocks = static_cast<int32_t>(c->capacity);
  s->free_blocks = static_cast<int32_t>(c->capacity - c->used);
  return SY_OK;
}
void counter_destroy(void* state) { delete static_cast<Counter*>(state); }

// Drafter: proposes the last token k times.
sy_status repeat_create(void*, const sy_options*, void** state) {
  *state = nullptr;
  return SY_OK;
}
sy_status repeat_propose(void*, uint64_t, const int32_t* tokens, int32_t n, int32_t k, int32_t* out, int32_t* count) {
  *count = n > 0 ? k : 0;
  for (int32_t i = 0; i < *count; ++i) out[i] = tokens[n - 1];
  return SY_OK;
}
void repeat_destroy(void*) {}
#endif

#if TEST_PLUGIN_VARIANT == FAILING_PASS
struct FailingPass {
  static bool run(GraphRef&, const Options&) { throw Error("refusing to rewrite this graph (test)", SY_INVALID_ARGUMENT); }
};
#endif

#if TEST_PLUGIN_VARIANT == THROWING
// Raw C callbacks that throw: the host's own catch is the last line of defence.
sy_status throwing_pass_run(void*, sy_graph*, const sy_options*, int32_t*) { throw std::runtime_error("pass exploded"); }
sy_status throwing_kernel_create(void*, const sy_kernel_create_info*, void** state) {
  *state = nullptr;
  return SY_OK;
}
sy_status throwing_kernel_compute(void*, sy_kernel_context*) { throw std::logic_error("kernel exploded"); }
void throwing_kernel_destroy(void*) {}
#endif

}  // namespace

SY_PLUGIN(builder) {
#if TEST_PLUGIN_VARIANT == GOOD
  builder.info("test-kernels", "2.1.0", "conformance test plugin");
  builder.pass<NoopPass>("test-noop", "1.0.0", "counts nodes", {option_bool("verbose", "false", "log the count")});
  builder.kernel<SigmoidKernel>({"sigmoid_f32", "1.0.0", "", "Sigmoid", SY_DEVICE_CPU, {SY_DTYPE_FLOAT32}, 0, 10});
  sy_scheduler_desc s{};
  s.struct_size = sizeof(s);
  s.name = "test-fcfs";
  s.version = "1.0.0";
  s.options = builder.options({option_int("max_prefill", "512", "longest prefill chunk")}, s.num_options);
  s.create = fcfs_create;
  s.plan = fcfs_plan;
  s.destroy = fcfs_destroy;
  builder.scheduler(s);
  sy_cache_desc c{};
  c.struct_size = sizeof(c);
  c.name = "test-counter";
  c.version = "1.0.0";
  c.options = builder.options({option_int("capacity_tokens", nullptr, "tokens the cache holds (required)")}, c.num_options);
  c.create = counter_create;
  c.allocate = counter_allocate;
  c.release = counter_release;
  c.storage = counter_storage;
  c.block_table = counter_block_table;
  c.stats = counter_stats;
  c.destroy = counter_destroy;
  builder.cache(c);
  sy_drafter_desc d{};
  d.struct_size = sizeof(d);
  d.name = "test-repeat";
  d.version = "1.0.0";
  d.create = repeat_create;
  d.propose = repeat_propose;
  d.destroy = repeat_destroy;
  builder.drafter(d);
#elif TEST_PLUGIN_VARIANT == INCOMPLETE_CACHE
  builder.info("test-incomplete", "1.0.0", "a cache manager without block_table");
  sy_cache_desc c{};
  c.struct_size = sizeof(c);
  c.name = "test-no-tables";
  c.version = "1.0.0";
  c.create = [](void*, const sy_cache_config*, const sy_options*, void** state) -> sy_status {
    *state = nullptr;
    return SY_OK;
  };
  c.allocate = [](void*, uint64_t, int32_t) -> sy_status { return SY_OK; };
  c.release = [](void*, uint64_t) -> sy_status { return SY_OK; };
  c.storage = [](void*, int32_t, sy_tensor*, sy_tensor*) -> sy_status { return SY_OK; };
  c.destroy = [](void*) {};
  builder.cache(c);
#elif TEST_PLUGIN_VARIANT == DUPLICATE
  builder.info("test-duplicate", "1.0.0", "registers a pass name another plugin has");
  builder.pass<NoopPass>("test-noop", "1.0.0", "counts nodes", {option_bool("verbose", "false", "")});
#elif TEST_PLUGIN_VARIANT == FAILING_PASS
  builder.info("test-failing", "1.0.0", "a pass that fails");
  builder.pass<FailingPass>("test-fail", "1.0.0", "always fails");
#elif TEST_PLUGIN_VARIANT == THROWING
  builder.info("test-throwing", "1.0.0", "callbacks that throw across the ABI");
  sy_pass_desc pass{};
  pass.struct_size = sizeof(pass);
  pass.name = "test-throw";
  pass.version = "1.0.0";
  pass.run = throwing_pass_run;
  sy_kernel_desc kernel{};
  kernel.struct_size = sizeof(kernel);
  kernel.name = "throwing_softmax";
  kernel.version = "1.0.0";
  kernel.domain = "";
  kernel.op_type = "Softmax";
  kernel.priority = 100;
  kernel.create = throwing_kernel_create;
  kernel.compute = throwing_kernel_compute;
  kernel.destroy = throwing_kernel_destroy;
  builder.pass_desc(pass);
  builder.kernel_desc(kernel);
#endif
}
