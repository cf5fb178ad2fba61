// A plugin that misbehaves on purpose, for the fault-injection tests
// (tests/plugin/test_fault_injection.cpp). Everything is real: a .so loaded
// through the ABI, its components chosen by the manifest.
//   pass "fault-wrap"        moves every Sigmoid onto fault::Sigmoid (exact),
//                            the first one (layer 0) failing on its Nth call
//                            and/or sleeping on each call; option fail: the
//                            pass itself fails
//   cache "refusing-paged"   a paged cache that refuses to grow a sequence past
//                            max_tokens_per_seq (the fault cache, not failing)
//   drafter "bad-drafter"    proposes token ids outside any vocabulary
//   scheduler "fault-scheduler", cache "fault-cache", drafter "fault-drafter":
//                            a plain FCFS scheduler, a paged cache and a
//                            repeat-the-last-token drafter whose function
//                            `fail_in` fails (see Fault) by an error status
//                            or by an exception escaping across the ABI
#include <switchyard/plugin.hpp>

#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "block_cache.h"

namespace {

using sy::plugin::Error;
using sy::plugin::guard;
using sy::plugin::Options;

struct FaultWrap {
  static bool run(sy::plugin::GraphRef& g, const Options& o) {
    const int64_t fail_on = o.get_int("fail_on_call"), delay = o.get_int("delay_ms");
    int wrapped = 0;
    const int32_t count = g.node_count();
    for (sy_node_id n = 0; n < count; ++n) {
      if (!g.is(n, "Sigmoid")) continue;
      std::vector<sy_value_id> out;
      sy_node_id f = g.add_node("fault", "Sigmoid", g.name(n) + "_fault", {g.input(n, 0)}, out);
      if (wrapped == 0) {
        g.set_attr(f, "fail_on_call", fail_on);
        g.set_attr(f, "delay_ms", delay);
      }
      g.set_type(out[0], SY_DTYPE_FLOAT32, g.value_shape(g.output(n, 0)));
      g.replace_all_uses(g.output(n, 0), out[0]);
      g.remove_node(n);
      ++wrapped;
    }
    // Kernels set to fail or stall are not to be run by the load-time
    // equivalence probe (it would consume the configured failure).
    if (fail_on > 0 || delay > 0) g.mark_approximate("fault injection configured");
    // Fails after having rewritten the graph: the host must not run it.
    if (o.get_bool("fail")) throw Error("fault-wrap: failing after rewriting " + std::to_string(wrapped) + " nodes, as configured");
    return wrapped > 0;
  }
};

class FaultySigmoid {
 public:
  explicit FaultySigmoid(const sy::plugin::NodeRef& n)
      : fail_on_(n.graph.attr_int(n.node, "fail_on_call").value_or(0)), delay_ms_(n.graph.attr_int(n.node, "delay_ms").value_or(0)) {}
  void compute(sy::plugin::KernelIO& io) {
    ++calls_;
    if (fail_on_ > 0 && calls_ == fail_on_)
      throw Error("fault injection: fault::Sigmoid failed on call " + std::to_string(calls_) + " as configured", SY_ERROR);
    if (delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
    auto x = io.input(0);
    auto y = io.allocate_output(0, SY_DTYPE_FLOAT32, x.dims());
    const float* a = x.data<float>();
    float* b = y.data<float>();
    for (int64_t i = 0; i < x.numel(); ++i) b[i] = 1.f / (1.f + std::exp(-a[i]));
  }

 private:
  int64_t fail_on_, delay_ms_, calls_ = 0;
};

// ---- fault-scheduler, fault-cache, fault-drafter

// When and how an injected fault fires: the component's function named
// `fail_in` succeeds for its first `after` calls, then fails `times` times
// (0: for ever), by returning SY_ERROR with a message (mode "status") or by
// throwing a C++ exception out of the C function (mode "throw": an ABI
// violation the host must survive all the same).
struct Fault {
  std::string component, in, mode;
  int64_t after, times, calls = 0, fired = 0;
  Fault(std::string c, const Options& o)
      : component(std::move(c)), in(o.get_string("fail_in")), mode(o.get_string("mode")), after(o.get_int("after")), times(o.get_int("times")) {
    if (mode != "status" && mode != "throw") throw Error(component + ": mode must be 'status' or 'throw', got '" + mode + "'");
  }
  // At the top of function `fn`: SY_OK, or the injected failure.
  sy_status check(const char* fn) {
    if (in != fn || ++calls <= after || (times > 0 && fired >= times)) return SY_OK;
    const std::string msg = component + " " + fn + ": injected failure " + std::to_string(++fired) + " (mode " + mode + ")";
    if (mode == "throw") throw std::runtime_error(msg);
    sy::plugin::host()->set_error(msg.c_str());
    return SY_ERROR;
  }
};
std::vector<sy::plugin::OptionSpec> fault_options(const char* functions, const char* fail_in) {
  using sy::plugin::option_int;
  using sy::plugin::option_string;
  const std::string help = std::string("the function that fails: ") + functions + ", or none";
  return {option_string("fail_in", fail_in, help.c_str()),
          option_string("mode", "status", "status (an error status and message) or throw (an exception across the ABI)"),
          option_int("after", "0", "calls of that function that succeed first"),
          option_int("times", "0", "failures before it recovers (0: never recovers)")};
}

struct FaultScheduler {
  Fault fault;
  bool ignore_budget;  // breaks the contract instead of failing (for the plugin test harness)
};
sy_status fs_create(void*, const sy_options* o, void** state) {
  return guard([&] { *state = new FaultScheduler{Fault("fault-scheduler", Options(o)), Options(o).get_bool("ignore_budget")}; });
}
// FCFS: running sequences first, then admissions, within the token budget.
sy_status fs_plan(void* state, const sy_sched_input* in, sy_sched_decision* out, int32_t capacity, int32_t* count) {
  if (sy_status st = static_cast<FaultScheduler*>(state)->fault.check("plan"); st != SY_OK) return st;
  int32_t n = 0, budget = static_cast<FaultScheduler*>(state)->ignore_budget ? 1 << 30 : in->token_budget, seqs = 0;
  auto run = [&](const sy_sched_seq& s) {
    const int32_t t = std::min(budget, s.remaining_tokens);
    if (t <= 0 || n >= capacity || seqs >= in->max_seqs) return false;
    out[n++] = {s.id, SY_SCHED_RUN, t};
    budget -= t;
    ++seqs;
    return true;
  };
  for (int32_t i = 0; i < in->num_running; ++i) run(in->running[i]);
  for (int32_t i = 0; i < in->num_waiting; ++i)
    if (!run(in->waiting[i])) break;
  *count = n;
  return SY_OK;
}
void fs_destroy(void* state) { delete static_cast<FaultScheduler*>(state); }

// One paged cache behind two descriptors: "fault-cache" (its fail_in
// function fails) and "refusing-paged" (it refuses, as a full cache does, to
// grow a sequence past max_tokens_per_seq; nothing fails).
struct FaultCache {
  std::unique_ptr<sy_cache::BlockCache> cache;
  std::vector<int64_t> dims;
  Fault fault;
  int64_t max_tokens;  // per sequence (0: no ceiling)
  std::map<uint64_t, int32_t> held;
};
FaultCache& fc(void* s) { return *static_cast<FaultCache*>(s); }
sy_status fc_create(void*, const sy_cache_config* c, const sy_options* o, void** out) {
  return guard([&] {
    Options opts(o);
    sy_cache::Config cfg{c->num_layers, c->kv_heads, c->head_dim, static_cast<int32_t>(opts.get_int("block_size")), opts.get_int("num_blocks"),
                         opts.get_bool("prefix_caching")};
    auto s = std::make_unique<FaultCache>(FaultCache{std::make_unique<sy_cache::BlockCache>(cfg, sy::plugin::host()),
                                                     {cfg.num_blocks, cfg.kv_heads, cfg.block_size, cfg.head_dim},
                                                     Fault("fault-cache", opts), opts.get_int("max_tokens_per_seq"), {}});
    *out = s.release();
  });
}
// The fault check runs outside guard(): mode "throw" must really escape.
#define FAULT_CHECK(state, fn)                                             \
  if (sy_status st = fc(state).fault.check(fn); st != SY_OK) return st
sy_status fc_allocate(void* s, uint64_t seq, int32_t n) {
  FAULT_CHECK(s, "allocate");
  FaultCache& c = fc(s);
  if (c.max_tokens > 0 && c.held[seq] + n > c.max_tokens) {
    sy::plugin::host()->set_error(("refusing-paged: sequence would hold " + std::to_string(c.held[seq] + n) + " tokens, over the configured " +
                                   std::to_string(c.max_tokens))
                                      .c_str());
    return SY_OUT_OF_MEMORY;
  }
  bool ok = false;
  sy_status st = guard([&] { ok = c.cache->allocate(seq, n); });
  if (st != SY_OK) return st;
  if (!ok) return SY_OUT_OF_MEMORY;
  c.held[seq] += n;
  return SY_OK;
}
sy_status fc_match(void* s, uint64_t seq, const int32_t* t, int32_t n, int32_t* cached) {
  FAULT_CHECK(s, "match_prefix");
  return guard([&] { fc(s).held[seq] += (*cached = fc(s).cache->match_prefix(seq, t, n)); });
}
sy_status fc_commit(void* s, uint64_t seq, const int32_t* t, int32_t n) {
  FAULT_CHECK(s, "commit");
  return guard([&] { fc(s).cache->commit(seq, t, n); });
}
sy_status fc_truncate(void* s, uint64_t seq, int32_t len) {
  FAULT_CHECK(s, "truncate");
  return guard([&] {
    fc(s).cache->truncate(seq, len);
    fc(s).held[seq] = std::min(fc(s).held[seq], len);
  });
}
sy_status fc_fork(void* s, uint64_t parent, uint64_t child) {
  return guard([&] {
    fc(s).cache->fork(parent, child);
    fc(s).held[child] = fc(s).held[parent];
  });
}
sy_status fc_release(void* s, uint64_t seq) {
  FAULT_CHECK(s, "release");
  return guard([&] {
    fc(s).cache->release(seq);
    fc(s).held.erase(seq);
  });
}
sy_status fc_table(void* s, uint64_t seq, const int32_t** blocks, int32_t* n) {
  FAULT_CHECK(s, "block_table");
  return guard([&] {
    const auto& t = fc(s).cache->table(seq);
    *blocks = t.data();
    *n = static_cast<int32_t>(t.size());
  });
}
sy_status fc_storage(void* s, int32_t layer, sy_tensor* k, sy_tensor* v) {
  return guard([&] {
    FaultCache& c = fc(s);
    *k = sy_tensor{SY_DTYPE_FLOAT32, 4, c.dims.data(), c.cache->keys(layer), SY_DEVICE_CPU, 0};
    *v = sy_tensor{SY_DTYPE_FLOAT32, 4, c.dims.data(), c.cache->values(layer), SY_DEVICE_CPU, 0};
  });
}
sy_status fc_stats(void* s, sy_cache_stats* out) {
  FAULT_CHECK(s, "stats");
  return guard([&] {
    out->total_blocks = static_cast<int32_t>(fc(s).cache->config().num_blocks);
    out->free_blocks = static_cast<int32_t>(fc(s).cache->free_blocks());
  });
}
void fc_destroy(void* s) { delete static_cast<FaultCache*>(s); }
#undef FAULT_CHECK

struct FaultDrafter {
  Fault fault;
};
sy_status fd_create(void*, const sy_options* o, void** state) {
  return guard([&] { *state = new FaultDrafter{Fault("fault-drafter", Options(o))}; });
}
// Proposes the last token again (always a valid id).
sy_status fd_propose(void* state, uint64_t, const int32_t* tokens, int32_t n, int32_t k, int32_t* out, int32_t* count) {
  if (sy_status st = static_cast<FaultDrafter*>(state)->fault.check("propose"); st != SY_OK) return st;
  *count = n > 0 ? std::min<int32_t>(k, 2) : 0;
  for (int32_t i = 0; i < *count; ++i) out[i] = tokens[n - 1];
  return SY_OK;
}
sy_status fd_accepted(void* state, uint64_t, int32_t, int32_t) { return static_cast<FaultDrafter*>(state)->fault.check("accepted"); }
void fd_destroy(void* state) { delete static_cast<FaultDrafter*>(state); }

// ---- bad-drafter: ids no vocabulary has

sy_status bd_create(void*, const sy_options*, void** state) {
  *state = nullptr;
  return SY_OK;
}
sy_status bd_propose(void*, uint64_t, const int32_t*, int32_t, int32_t k, int32_t* out, int32_t* count) {
  const int32_t bad[] = {1 << 30, -7, 2147483647, 5};
  *count = std::min<int32_t>(k, 4);
  for (int32_t i = 0; i < *count; ++i) out[i] = bad[i];
  return SY_OK;
}
sy_status bd_accepted(void*, uint64_t, int32_t, int32_t) { return SY_OK; }
sy_status bd_release(void*, uint64_t) { return SY_OK; }
void bd_destroy(void*) {}

}  // namespace

SY_PLUGIN(builder) {
  using sy::plugin::option_bool;
  using sy::plugin::option_int;
  builder.info("fault-injection", "1.0.0", "misbehaves on purpose: failing and slow kernels, a failing pass, a refusing cache, a bad drafter");
  builder.pass<FaultWrap>("fault-wrap", "1.0.0", "moves Sigmoid onto fault::Sigmoid",
                          {option_int("fail_on_call", "0", "the layer-0 kernel fails on this call (0: never)"),
                           option_int("delay_ms", "0", "the layer-0 kernel sleeps this long on each call"),
                           option_bool("fail", "false", "the pass fails after rewriting")});
  builder.kernel<FaultySigmoid>({"fault_sigmoid", "1.0.0", "fault", "Sigmoid", SY_DEVICE_CPU, {SY_DTYPE_FLOAT32}});
  sy_drafter_desc d{};
  d.struct_size = sizeof(d);
  d.name = "bad-drafter";
  d.version = "1.0.0";
  d.description = "proposes token ids outside any vocabulary";
  d.options = builder.options({}, d.num_options);
  d.create = bd_create;
  d.propose = bd_propose;
  d.accepted = bd_accepted;
  d.release = bd_release;
  d.destroy = bd_destroy;
  builder.drafter(d);

  sy_scheduler_desc fs{};
  fs.struct_size = sizeof(fs);
  fs.name = "fault-scheduler";
  fs.version = "1.0.0";
  fs.description = "FCFS scheduler whose plan fails as configured";
  auto scheduler_options = fault_options("plan", "plan");
  scheduler_options.push_back(option_bool("ignore_budget", "false", "plan every remaining token, over the step's budget"));
  fs.options = builder.options(scheduler_options, fs.num_options);
  fs.create = fs_create;
  fs.plan = fs_plan;
  fs.destroy = fs_destroy;
  builder.scheduler(fs);

  // The two caches: the same functions, other option defaults.
  auto paged_cache = [&](const char* name, const char* description, const char* fail_in, const char* max_tokens, const char* prefix) {
    sy_cache_desc c{};
    c.struct_size = sizeof(c);
    c.name = name;
    c.version = "1.0.0";
    c.description = description;
    auto options = fault_options("allocate, match_prefix, commit, truncate, release, block_table, stats", fail_in);
    options.push_back(option_int("block_size", "16", "tokens per block"));
    options.push_back(option_int("num_blocks", "256", "blocks"));
    options.push_back(option_int("max_tokens_per_seq", max_tokens, "refuse allocations past this many tokens per sequence (0: none)"));
    options.push_back(option_bool("prefix_caching", prefix, "share committed full blocks across sequences"));
    c.options = builder.options(options, c.num_options);
    c.create = fc_create;
    c.allocate = fc_allocate;
    c.match_prefix = fc_match;
    c.commit = fc_commit;
    c.truncate = fc_truncate;
    c.fork = fc_fork;
    c.release = fc_release;
    c.block_table = fc_table;
    c.storage = fc_storage;
    c.stats = fc_stats;
    c.destroy = fc_destroy;
    builder.cache(c);
  };
  paged_cache("refusing-paged", "paged cache refusing to grow a sequence past max_tokens_per_seq", "none", "64", "false");
  paged_cache("fault-cache", "paged prefix cache whose chosen function fails as configured", "allocate", "0", "true");

  sy_drafter_desc fdd{};
  fdd.struct_size = sizeof(fdd);
  fdd.name = "fault-drafter";
  fdd.version = "1.0.0";
  fdd.description = "repeats the last token; its chosen function fails as configured";
  fdd.options = builder.options(fault_options("propose, accepted", "propose"), fdd.num_options);
  fdd.create = fd_create;
  fdd.propose = fd_propose;
  fdd.accepted = fd_accepted;
  fdd.destroy = fd_destroy;
  builder.drafter(fdd);
}
