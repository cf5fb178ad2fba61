// Switchyard plugin test harness: unit-test a scheduler, KV-cache manager or
// drafter plugin without the engine.
//
//   #include <switchyard/plugin_testing.hpp>
//   sy::plugin::testing::MockHost host;
//   host.load("libmy_plugin.so");
//   auto report = sy::plugin::testing::check_scheduler(host, "my-scheduler", {{"chunk_size", "64"}});
//   if (!report.ok()) { std::cerr << report.summary(); return 1; }
//
// MockHost implements the host functions these kinds use (errors, logging,
// memory, a serial parallel_for, options from a map checked against the
// component's declared options) and loads a real plugin library through
// its entry point, as the engine does. The check_* drivers feed generated
// inputs and check the invariants the engine relies on, the ones
// plugin.h's contracts state: a scheduler's token budget and sequence
// limit, no sequence named twice, valid ids and actions, progress (nobody
// starves); a cache manager's block accounting (tables sized for the tokens
// held, blocks in range, no block a sequence will write shared with another
// live sequence, everything free again after release, refusals that change
// nothing); a drafter's counts, vocabulary and draft distributions. Each
// returns a Report listing the violations (empty when the plugin keeps the
// contract). Header-only; needs dlopen (link ${CMAKE_DL_LIBS}).
#pragma once

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "switchyard/plugin.h"

namespace sy::plugin::testing {

// What a check found. violations: each broken rule, with the step or call.
struct Report {
  std::string component;
  int64_t calls = 0;  // calls into the plugin
  int64_t steps = 0;  // scheduler steps simulated
  int64_t preemptions = 0;
  std::vector<std::string> violations;
  bool ok() const { return violations.empty(); }
  std::string summary() const {
    std::ostringstream os;
    os << component << ": " << calls << " calls";
    if (steps) os << ", " << steps << " steps, " << preemptions << " preemptions";
    os << ", " << violations.size() << " violations\n";
    for (size_t i = 0; i < violations.size() && i < 20; ++i) os << "  - " << violations[i] << "\n";
    return os.str();
  }
  void add(const std::string& v) {
    if (violations.size() < 1000) violations.push_back(v);
  }
};

namespace detail {

inline std::string& thread_error() {
  thread_local std::string e;
  return e;
}

// The options a component receives: the test's values over the declared
// defaults. The plugin sees this through an opaque sy_options pointer.
struct MockOptions {
  const sy_option_desc* const* declared = nullptr;
  int32_t count = 0;
  std::map<std::string, std::string> values;
  const sy_option_desc* find(const char* name) const {
    for (int32_t i = 0; i < count; ++i)
      if (declared[i] && std::strcmp(declared[i]->name, name) == 0) return declared[i];
    return nullptr;
  }
  // SY_NOT_FOUND for an undeclared name or a required option the test did not give.
  sy_status raw(const char* name, int32_t type, std::string& out) const {
    const sy_option_desc* d = find(name);
    if (!d) {
      thread_error() = std::string("option '") + name + "' was not declared";
      return SY_NOT_FOUND;
    }
    if (d->type != type) {
      thread_error() = std::string("option '") + name + "' read as another type than declared";
      return SY_INVALID_ARGUMENT;
    }
    auto it = values.find(name);
    if (it != values.end()) out = it->second;
    else if (d->default_value) out = d->default_value;
    else {
      thread_error() = std::string("required option '") + name + "' not given";
      return SY_NOT_FOUND;
    }
    return SY_OK;
  }
};
inline const MockOptions& opts(const sy_options* o) { return *reinterpret_cast<const MockOptions*>(o); }

inline void set_error(const char* m) { thread_error() = m ? m : ""; }
inline const char* last_error() { return thread_error().c_str(); }
inline void log(int32_t, const char*) {}
inline void* alloc(size_t bytes, size_t alignment) {
  alignment = std::max<size_t>(alignment, alignof(std::max_align_t));
  return std::aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment);
}
inline void free_(void* p) { std::free(p); }
inline sy_status device_alloc(int32_t device, size_t bytes, void** out) {
  if (device != SY_DEVICE_CPU) return SY_UNSUPPORTED;
  *out = alloc(bytes, 64);
  return *out ? SY_OK : SY_OUT_OF_MEMORY;
}
inline sy_status device_free(int32_t, void* p) {
  std::free(p);
  return SY_OK;
}
inline void* device_stream(int32_t) { return nullptr; }
inline sy_status parallel_for(int64_t n, int64_t, sy_parallel_fn fn, void* user) {
  if (n > 0) fn(user, 0, n);
  return SY_OK;
}
inline int32_t num_threads() { return 1; }
inline sy_status option_bool(const sy_options* o, const char* name, int32_t* out) {
  std::string v;
  if (sy_status s = opts(o).raw(name, SY_OPTION_BOOL, v); s != SY_OK) return s;
  *out = v == "true" || v == "1";
  return SY_OK;
}
inline sy_status option_int(const sy_options* o, const char* name, int64_t* out) {
  std::string v;
  if (sy_status s = opts(o).raw(name, SY_OPTION_INT, v); s != SY_OK) return s;
  *out = std::strtoll(v.c_str(), nullptr, 10);
  return SY_OK;
}
inline sy_status option_float(const sy_options* o, const char* name, double* out) {
  std::string v;
  if (sy_status s = opts(o).raw(name, SY_OPTION_FLOAT, v); s != SY_OK) return s;
  *out = std::strtod(v.c_str(), nullptr);
  return SY_OK;
}
inline sy_status option_string(const sy_options* o, const char* name, const char** out) {
  thread_local std::string keep;
  if (sy_status s = opts(o).raw(name, SY_OPTION_STRING, keep); s != SY_OK) return s;
  *out = keep.c_str();
  return SY_OK;
}

}  // namespace detail

// A host for one plugin library at a time (graph and kernel functions are
// NULL: passes and kernels are tested through the engine).
class MockHost {
 public:
  MockHost() {
    api_.struct_size = sizeof(api_);
    api_.abi_major = SY_PLUGIN_ABI_MAJOR;
    api_.abi_minor = SY_PLUGIN_ABI_MINOR;
    api_.set_error = detail::set_error;
    api_.last_error = detail::last_error;
    api_.log = detail::log;
    api_.alloc = detail::alloc;
    api_.free = detail::free_;
    api_.device_alloc = detail::device_alloc;
    api_.device_free = detail::device_free;
    api_.device_stream = detail::device_stream;
    api_.parallel_for = detail::parallel_for;
    api_.num_threads = detail::num_threads;
    api_.option_bool = detail::option_bool;
    api_.option_int = detail::option_int;
    api_.option_float = detail::option_float;
    api_.option_string = detail::option_string;
  }
  ~MockHost() {
    if (info_ && SY_HAS_FIELD(info_, sy_plugin_info, shutdown) && info_->shutdown) info_->shutdown(info_->plugin_data);
    if (lib_) dlclose(lib_);
  }
  MockHost(const MockHost&) = delete;
  MockHost& operator=(const MockHost&) = delete;

  // Loads the library and calls its entry point; throws std::runtime_error naming the problem.
  const sy_plugin_info& load(const std::string& path) {
    lib_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib_) throw std::runtime_error(path + ": " + dlerror());
    using Init = const sy_plugin_info* (*)(const sy_host_api*);
    auto init = reinterpret_cast<Init>(dlsym(lib_, "switchyard_plugin_init"));
    if (!init) throw std::runtime_error(path + ": no switchyard_plugin_init");
    info_ = init(&api_);
    if (!info_) throw std::runtime_error(path + ": switchyard_plugin_init returned no description: " + detail::thread_error());
    if (info_->abi_major != SY_PLUGIN_ABI_MAJOR)
      throw std::runtime_error(path + ": built for plugin ABI " + std::to_string(info_->abi_major) + "." + std::to_string(info_->abi_minor) +
                               ", this harness implements " + std::to_string(SY_PLUGIN_ABI_MAJOR) + "." + std::to_string(SY_PLUGIN_ABI_MINOR));
    return *info_;
  }
  const sy_plugin_info& info() const { return *info_; }
  const sy_host_api* api() const { return &api_; }

  template <typename Desc>
  static const Desc* find(const Desc* const* list, int32_t n, const std::string& name, const char* kind) {
    for (int32_t i = 0; i < n; ++i)
      if (list[i] && list[i]->name && name == list[i]->name) return list[i];
    throw std::runtime_error(std::string("the plugin has no ") + kind + " '" + name + "'");
  }
  const sy_scheduler_desc* scheduler(const std::string& n) const { return find(info_->schedulers, info_->num_schedulers, n, "scheduler"); }
  const sy_cache_desc* cache(const std::string& n) const { return find(info_->caches, info_->num_caches, n, "cache manager"); }
  const sy_drafter_desc* drafter(const std::string& n) const { return find(info_->drafters, info_->num_drafters, n, "drafter"); }

  // The options handle for a component (owned by the host; valid while it lives).
  const sy_options* options(const sy_option_desc* const* declared, int32_t count, std::map<std::string, std::string> values) {
    options_.push_back(std::make_unique<detail::MockOptions>(detail::MockOptions{declared, count, std::move(values)}));
    return reinterpret_cast<const sy_options*>(options_.back().get());
  }
  static std::string error() { return detail::thread_error(); }

 private:
  sy_host_api api_{};
  void* lib_ = nullptr;
  const sy_plugin_info* info_ = nullptr;
  std::vector<std::unique_ptr<detail::MockOptions>> options_;
};

// ------------------------------------------------------------- schedulers

struct SchedulerWorkload {
  int32_t sequences = 40;
  int32_t prompt_min = 1, prompt_max = 300;
  int32_t output_min = 1, output_max = 48;
  int32_t arrivals_per_step = 3;  // new sequences join the queue each step until all arrived
  int32_t block_size = 16;
  int32_t num_blocks = 64;  // small enough to force preemptions
  int32_t token_budget = 256;
  int32_t max_seqs = 16;
  int64_t max_steps = 20000;
  int64_t stall_steps = 500;  // steps without progress that count as starvation
  uint64_t seed = 1;
};

// Drives the scheduler as the step engine does (core/engine/step_planning.cpp):
// preemptions first, then running sequences (a refused allocation preempts
// that sequence), then admissions in plan order (stopping at the first that
// does not fit, and at max_seqs). Checks every plan against the contract.
inline Report check_scheduler(MockHost& host, const std::string& name, std::map<std::string, std::string> options = {},
                              SchedulerWorkload w = {}) {
  const sy_scheduler_desc* d = host.scheduler(name);
  Report r;
  r.component = "scheduler '" + name + "'";
  // The element sizes the plugin was built with (as the host reads them).
  const size_t seq_size = sy_scheduler_seq_size(d), decision_size = sy_scheduler_decision_size(d);
  void* state = nullptr;
  ++r.calls;
  if (d->create(nullptr, host.options(d->options, d->num_options, std::move(options)), &state) != SY_OK) {
    r.add("create failed: " + MockHost::error());
    return r;
  }
  struct Seq {
    uint64_t id;
    int32_t prompt, output, generated = 0, computed = 0, blocks = 0;
    bool running = false, done = false, arrived = false;
    double arrival = 0;
    int32_t total() const { return prompt + generated; }
    int32_t remaining() const { return total() - computed; }
  };
  std::mt19937_64 rng(w.seed);
  auto uniform = [&](int32_t lo, int32_t hi) { return lo + static_cast<int32_t>(rng() % static_cast<uint64_t>(hi - lo + 1)); };
  std::vector<Seq> seqs;
  for (int32_t i = 0; i < w.sequences; ++i) {
    // Never larger than the whole cache (the engine refuses those itself).
    const int32_t cap = w.block_size * w.num_blocks - w.output_max;
    seqs.push_back({static_cast<uint64_t>(1000 + i), std::min(uniform(w.prompt_min, w.prompt_max), cap), uniform(w.output_min, w.output_max)});
  }
  int32_t free_blocks = w.num_blocks, arrived = 0;
  std::vector<Seq*> waiting, running;
  auto blocks_for = [&](int32_t tokens) { return (tokens + w.block_size - 1) / w.block_size; };
  auto view = [&](const Seq& s) {
    sy_sched_seq v{};
    v.id = s.id;
    v.state = s.running ? SY_SEQ_RUNNING : s.generated > 0 ? SY_SEQ_PREEMPTED : SY_SEQ_WAITING;
    v.prompt_len = s.prompt;
    v.computed_len = s.computed;
    v.generated = s.generated;
    v.max_tokens = s.output;
    v.blocks_needed = blocks_for(s.total()) - s.blocks;
    v.arrival_time = s.arrival;
    v.remaining_tokens = s.remaining();
    return v;
  };
  auto preempt = [&](Seq* s) {
    free_blocks += s->blocks;
    s->blocks = 0;
    s->computed = 0;
    s->running = false;
    running.erase(std::find(running.begin(), running.end(), s));
    waiting.insert(waiting.begin(), s);
    ++r.preemptions;
  };
  int64_t finished = 0, last_progress = 0;
  for (int64_t step = 0; step < w.max_steps && finished < w.sequences; ++step) {
    for (int32_t k = 0; k < w.arrivals_per_step && arrived < w.sequences; ++k, ++arrived) {
      seqs[static_cast<size_t>(arrived)].arrival = static_cast<double>(step) * 0.01;
      waiting.push_back(&seqs[static_cast<size_t>(arrived)]);
    }
    // Inputs laid out at the plugin's stride.
    auto lay_out = [&](const std::vector<Seq*>& list) {
      std::vector<unsigned char> bytes(std::max<size_t>(1, list.size()) * seq_size);
      for (size_t i = 0; i < list.size(); ++i) {
        sy_sched_seq v = view(*list[i]);
        std::memcpy(bytes.data() + i * seq_size, &v, std::min(seq_size, sizeof(v)));
      }
      return bytes;
    };
    std::vector<unsigned char> wbytes = lay_out(waiting), rbytes = lay_out(running);
    sy_sched_input in{};
    in.struct_size = sizeof(in);
    in.waiting = reinterpret_cast<const sy_sched_seq*>(wbytes.data());
    in.num_waiting = static_cast<int32_t>(waiting.size());
    in.running = reinterpret_cast<const sy_sched_seq*>(rbytes.data());
    in.num_running = static_cast<int32_t>(running.size());
    in.free_blocks = free_blocks;
    in.block_size = w.block_size;
    in.token_budget = w.token_budget;
    in.max_seqs = w.max_seqs;
    in.now = static_cast<double>(step) * 0.01;
    in.seq_size = static_cast<uint32_t>(seq_size);
    const int32_t capacity = in.num_waiting + in.num_running;
    std::vector<unsigned char> out(std::max<size_t>(1, static_cast<size_t>(capacity)) * decision_size);
    int32_t count = -1;
    ++r.calls;
    ++r.steps;
    const std::string at = "step " + std::to_string(step) + ": ";
    if (d->plan(state, &in, reinterpret_cast<sy_sched_decision*>(out.data()), capacity, &count) != SY_OK) {
      r.add(at + "plan failed: " + MockHost::error());
      break;
    }
    if (count < 0 || count > capacity) {
      r.add(at + "plan returned " + std::to_string(count) + " decisions for " + std::to_string(capacity) + " sequences");
      break;
    }
    std::vector<sy_sched_decision> plan(static_cast<size_t>(count));
    for (int32_t i = 0; i < count; ++i)
      std::memcpy(&plan[static_cast<size_t>(i)], out.data() + static_cast<size_t>(i) * decision_size, std::min(decision_size, sizeof(sy_sched_decision)));
    // The contract.
    std::set<uint64_t> named;
    int64_t tokens = 0;
    int32_t runs = 0;
    bool valid = true;
    auto lookup = [&](uint64_t id) -> Seq* {
      for (Seq* s : waiting)
        if (s->id == id) return s;
      for (Seq* s : running)
        if (s->id == id) return s;
      return nullptr;
    };
    for (const auto& dec : plan) {
      Seq* s = lookup(dec.seq_id);
      if (!s) r.add(at + "unknown sequence id " + std::to_string(dec.seq_id)), valid = false;
      else if (!named.insert(dec.seq_id).second) r.add(at + "sequence " + std::to_string(dec.seq_id) + " named twice"), valid = false;
      else if (dec.action == SY_SCHED_PREEMPT && !s->running)
        r.add(at + "preempted sequence " + std::to_string(dec.seq_id) + ", which is not running"), valid = false;
      else if (dec.action == SY_SCHED_RUN && dec.num_tokens < 1)
        r.add(at + "gave sequence " + std::to_string(dec.seq_id) + " " + std::to_string(dec.num_tokens) + " tokens"), valid = false;
      else if (dec.action != SY_SCHED_RUN && dec.action != SY_SCHED_PREEMPT) r.add(at + "unknown action " + std::to_string(dec.action)), valid = false;
      if (valid && dec.action == SY_SCHED_RUN) {
        tokens += dec.num_tokens;  // as the engine counts (it then uses at most remaining_tokens)
        ++runs;
      }
    }
    if (tokens > w.token_budget) r.add(at + "planned " + std::to_string(tokens) + " tokens, over the budget of " + std::to_string(w.token_budget)), valid = false;
    if (runs > w.max_seqs) r.add(at + "ran " + std::to_string(runs) + " sequences, over max_seqs " + std::to_string(w.max_seqs)), valid = false;
    if (!valid) break;
    // Apply it as the engine does.
    struct Run {
      Seq* s;
      int32_t n;
    };
    std::vector<Run> batch;
    for (const auto& dec : plan)
      if (dec.action == SY_SCHED_PREEMPT) preempt(lookup(dec.seq_id));
    for (const auto& dec : plan) {
      Seq* s = lookup(dec.seq_id);
      if (dec.action != SY_SCHED_RUN || !s->running) continue;
      const int32_t n = std::min(dec.num_tokens, s->remaining());
      const int32_t more = blocks_for(s->computed + n) - s->blocks;
      if (more > free_blocks) {
        preempt(s);
        continue;
      }
      free_blocks -= more;
      s->blocks += more;
      batch.push_back({s, n});
    }
    for (const auto& dec : plan) {
      Seq* s = lookup(dec.seq_id);
      if (dec.action != SY_SCHED_RUN || s->running || std::find(waiting.begin(), waiting.end(), s) == waiting.end()) continue;
      if (static_cast<int32_t>(running.size()) >= w.max_seqs) break;
      const int32_t n = std::min(dec.num_tokens, s->remaining());
      if (blocks_for(n) > free_blocks) break;  // no overtaking
      free_blocks -= blocks_for(n);
      s->blocks = blocks_for(n);
      s->running = true;
      waiting.erase(std::find(waiting.begin(), waiting.end(), s));
      running.push_back(s);
      batch.push_back({s, n});
    }
    // Run the step: KV computed; complete sequences sample a token.
    for (const Run& b : batch) {
      b.s->computed += b.n;
      last_progress = step;
      if (b.s->computed < b.s->total()) continue;
      ++b.s->generated;
      if (b.s->generated < b.s->output) continue;
      b.s->done = true;
      b.s->running = false;
      free_blocks += b.s->blocks;
      b.s->blocks = 0;
      running.erase(std::find(running.begin(), running.end(), b.s));
      ++finished;
    }
    if (step - last_progress > w.stall_steps) {
      std::string ids;
      for (Seq* s : waiting) ids += " " + std::to_string(s->id);
      for (Seq* s : running) ids += " " + std::to_string(s->id);
      r.add(at + "no progress for " + std::to_string(w.stall_steps) + " steps; still queued:" + ids.substr(0, 200));
      break;
    }
  }
  if (r.ok() && finished < w.sequences)
    r.add(std::to_string(w.sequences - finished) + " of " + std::to_string(w.sequences) + " sequences unfinished after " + std::to_string(w.max_steps) + " steps");
  if (r.ok() && free_blocks != w.num_blocks) r.add("blocks not all free at the end (harness accounting)");
  d->destroy(state);
  return r;
}

// ------------------------------------------------------------- cache managers

struct CacheWorkload {
  int32_t num_layers = 2, kv_heads = 2, head_dim = 8;
  int32_t operations = 3000;
  int32_t max_live = 12;         // sequences alive at once
  int32_t prompt_max = 96;
  int32_t shared_prefix = 40;    // tokens every prompt starts with (prefix sharing)
  uint64_t seed = 1;
};

// Random admissions (match_prefix, allocate, commit), growth, truncation
// and releases against the cache manager, with its block tables checked
// after every call.
inline Report check_cache(MockHost& host, const std::string& name, std::map<std::string, std::string> options = {}, CacheWorkload w = {}) {
  const sy_cache_desc* d = host.cache(name);
  Report r;
  r.component = "cache manager '" + name + "'";
  sy_cache_config cfg{};
  cfg.struct_size = sizeof(cfg);
  cfg.num_layers = w.num_layers;
  cfg.kv_heads = w.kv_heads;
  cfg.head_dim = w.head_dim;
  cfg.dtype = SY_DTYPE_FLOAT32;
  cfg.device = SY_DEVICE_CPU;
  void* state = nullptr;
  ++r.calls;
  if (d->create(nullptr, &cfg, host.options(d->options, d->num_options, std::move(options)), &state) != SY_OK) {
    r.add("create failed: " + MockHost::error());
    return r;
  }
  // Storage: [num_blocks, kv_heads, block_size, head_dim], in place for the cache's lifetime.
  std::vector<std::pair<void*, void*>> where;
  int64_t num_blocks = 0, block_size = 0;
  for (int32_t l = 0; l < w.num_layers; ++l) {
    sy_tensor k{}, v{};
    ++r.calls;
    if (d->storage(state, l, &k, &v) != SY_OK) {
      r.add("storage(" + std::to_string(l) + ") failed: " + MockHost::error());
      d->destroy(state);
      return r;
    }
    if (k.rank != 4 || v.rank != 4 || !k.data || !v.data || k.dims[1] != w.kv_heads || k.dims[3] != w.head_dim || v.dims[0] != k.dims[0] ||
        v.dims[2] != k.dims[2]) {
      r.add("storage(" + std::to_string(l) + ") is not [blocks, " + std::to_string(w.kv_heads) + ", block_size, " + std::to_string(w.head_dim) + "]");
      d->destroy(state);
      return r;
    }
    num_blocks = k.dims[0];
    block_size = k.dims[2];
    where.emplace_back(k.data, v.data);
  }
  auto stats = [&](sy_cache_stats& s) {
    s = sy_cache_stats{};
    s.struct_size = sizeof(s);
    ++r.calls;
    return !d->stats || d->stats(state, &s) == SY_OK;
  };
  struct Live {
    std::vector<int32_t> tokens;
    int32_t held = 0;       // tokens the cache has room for
    int32_t committed = 0;  // tokens committed
  };
  std::map<uint64_t, Live> live;
  std::mt19937_64 rng(w.seed);
  auto pick = [&](int32_t lo, int32_t hi) { return lo + static_cast<int32_t>(rng() % static_cast<uint64_t>(hi - lo + 1)); };
  uint64_t next_id = 1;
  auto table = [&](uint64_t id, std::vector<int32_t>& out, const std::string& at) {
    const int32_t* blocks = nullptr;
    int32_t n = -1;
    ++r.calls;
    if (d->block_table(state, id, &blocks, &n) != SY_OK) {
      r.add(at + "block_table(" + std::to_string(id) + ") failed: " + MockHost::error());
      return false;
    }
    if (n < 0 || (n > 0 && !blocks)) {
      r.add(at + "block_table returned a bad table");
      return false;
    }
    out.assign(blocks, blocks + n);
    return true;
  };
  // Every live table: sized for its tokens, blocks in range, and the block
  // each sequence writes next (past what it shares) owned by it alone.
  auto check_tables = [&](const std::string& at) {
    std::map<int32_t, uint64_t> writers;
    std::map<int32_t, int32_t> uses;
    std::map<uint64_t, std::vector<int32_t>> tables;
    for (const auto& [id, s] : live) {
      std::vector<int32_t> t;
      if (!table(id, t, at)) return;
      const auto need = static_cast<size_t>((s.held + block_size - 1) / block_size);
      if (t.size() < need) r.add(at + "sequence " + std::to_string(id) + " holds " + std::to_string(s.held) + " tokens in " + std::to_string(t.size()) + " blocks");
      for (int32_t b : t)
        if (b < -1 || b >= num_blocks) r.add(at + "sequence " + std::to_string(id) + " has block " + std::to_string(b) + " of " + std::to_string(num_blocks));
      tables[id] = t;
    }
    for (const auto& [id, t] : tables) {
      // Blocks from the one holding the first uncommitted position on are
      // written by this sequence (committed full blocks may be shared).
      const size_t first_own = static_cast<size_t>(live[id].committed / block_size);
      for (size_t i = 0; i < t.size(); ++i)
        if (t[i] >= 0) {
          ++uses[t[i]];
          if (i >= first_own) {
            auto [it, fresh] = writers.emplace(t[i], id);
            if (!fresh) r.add(at + "block " + std::to_string(t[i]) + " is written by sequences " + std::to_string(it->second) + " and " + std::to_string(id));
          }
        }
    }
    for (const auto& [b, writer] : writers)
      if (uses[b] > 1) r.add(at + "block " + std::to_string(b) + ", written by sequence " + std::to_string(writer) + ", also appears in another table");
    sy_cache_stats st;
    if (!stats(st)) r.add(at + "stats failed: " + MockHost::error());
    else if (d->stats && (st.free_blocks < 0 || st.free_blocks > st.total_blocks || st.total_blocks != num_blocks ||
                          static_cast<int64_t>(uses.size()) > st.total_blocks - st.free_blocks))
      r.add(at + "stats say " + std::to_string(st.free_blocks) + " of " + std::to_string(st.total_blocks) + " blocks free with " +
            std::to_string(uses.size()) + " in tables (storage has " + std::to_string(num_blocks) + ")");
  };
  std::vector<int32_t> prefix;
  for (int32_t i = 0; i < w.shared_prefix; ++i) prefix.push_back(3 + i);
  for (int32_t op = 0; op < w.operations && r.violations.size() < 20; ++op) {
    const std::string at = "operation " + std::to_string(op) + ": ";
    const int32_t kind = pick(0, 9);
    if ((kind <= 2 && static_cast<int32_t>(live.size()) < w.max_live) || live.empty()) {
      // Admission: prefix lookup, then room for the rest.
      const uint64_t id = next_id++;
      Live s;
      s.tokens = prefix;
      s.tokens.resize(static_cast<size_t>(pick(1, w.prompt_max)), 0);
      for (size_t i = prefix.size(); i < s.tokens.size(); ++i) s.tokens[i] = pick(3, 500);
      if (s.tokens.size() < prefix.size()) s.tokens.assign(prefix.begin(), prefix.begin() + static_cast<long>(s.tokens.size()));
      const auto n = static_cast<int32_t>(s.tokens.size());
      int32_t cached = 0;
      if (d->match_prefix) {
        ++r.calls;
        if (d->match_prefix(state, id, s.tokens.data(), n, &cached) != SY_OK) {
          r.add(at + "match_prefix failed: " + MockHost::error());
          continue;
        }
        if (cached < 0 || cached > n) r.add(at + "match_prefix reported " + std::to_string(cached) + " cached of " + std::to_string(n));
      }
      ++r.calls;
      const sy_status st = d->allocate(state, id, n - cached);
      if (st == SY_OUT_OF_MEMORY) {
        ++r.calls;
        if (cached > 0 && d->release(state, id) != SY_OK) r.add(at + "release after a refused admission failed: " + MockHost::error());
        continue;
      }
      if (st != SY_OK) {
        r.add(at + "allocate failed with status " + std::to_string(st) + ": " + MockHost::error());
        continue;
      }
      s.held = n;
      live[id] = s;
      if (d->commit) {
        ++r.calls;
        if (d->commit(state, id, s.tokens.data(), n) != SY_OK) r.add(at + "commit failed: " + MockHost::error());
        live[id].committed = n;
      }
    } else if (kind <= 6) {
      // Growth by a few tokens (decode or drafts).
      auto it = std::next(live.begin(), pick(0, static_cast<int32_t>(live.size()) - 1));
      const int32_t more = pick(1, 5);
      std::vector<int32_t> before;
      if (!table(it->first, before, at)) continue;
      ++r.calls;
      const sy_status st = d->allocate(state, it->first, more);
      if (st == SY_OUT_OF_MEMORY) {
        std::vector<int32_t> after;
        if (table(it->first, after, at) && after != before) r.add(at + "a refused allocation changed sequence " + std::to_string(it->first) + "'s table");
        continue;
      }
      if (st != SY_OK) {
        r.add(at + "allocate failed with status " + std::to_string(st) + ": " + MockHost::error());
        continue;
      }
      for (int32_t i = 0; i < more; ++i) it->second.tokens.push_back(pick(3, 500));
      it->second.held += more;
      if (d->commit) {  // their KV computed, as after a step
        ++r.calls;
        if (d->commit(state, it->first, it->second.tokens.data(), it->second.held) != SY_OK) r.add(at + "commit failed: " + MockHost::error());
        it->second.committed = it->second.held;
      }
    } else if (kind == 7 && d->truncate) {
      auto it = std::next(live.begin(), pick(0, static_cast<int32_t>(live.size()) - 1));
      const int32_t keep = std::max(it->second.committed, it->second.held - pick(0, 4));
      ++r.calls;
      if (d->truncate(state, it->first, keep) != SY_OK) r.add(at + "truncate failed: " + MockHost::error());
      it->second.held = keep;
      it->second.tokens.resize(static_cast<size_t>(keep));
    } else {
      auto it = std::next(live.begin(), pick(0, static_cast<int32_t>(live.size()) - 1));
      ++r.calls;
      if (d->release(state, it->first) != SY_OK) r.add(at + "release failed: " + MockHost::error());
      live.erase(it);
    }
    check_tables(at);
  }
  for (const auto& [id, s] : live) {
    ++r.calls;
    if (d->release(state, id) != SY_OK) r.add("final release failed: " + MockHost::error());
  }
  live.clear();
  sy_cache_stats st;
  if (d->stats && stats(st) && st.free_blocks != st.total_blocks)
    r.add("after releasing every sequence " + std::to_string(st.free_blocks) + " of " + std::to_string(st.total_blocks) + " blocks are free (a leak)");
  for (int32_t l = 0; l < w.num_layers; ++l) {
    sy_tensor k{}, v{};
    ++r.calls;
    if (d->storage(state, l, &k, &v) != SY_OK || k.data != where[static_cast<size_t>(l)].first || v.data != where[static_cast<size_t>(l)].second)
      r.add("storage of layer " + std::to_string(l) + " moved (it must stay in place for the cache's lifetime)");
  }
  d->destroy(state);
  return r;
}

// ------------------------------------------------------------- drafters

struct DrafterWorkload {
  int64_t vocab_size = 512;
  int32_t sequences = 8;
  int32_t steps = 64;  // propose calls per sequence
  int32_t k = 4;
  uint64_t seed = 1;
};

// Sequences that grow by what the drafter proposed (some accepted), with
// every proposal checked: status, count <= k, ids in the vocabulary, draft
// distributions that are distributions and give their token mass.
inline Report check_drafter(MockHost& host, const std::string& name, std::map<std::string, std::string> options = {}, DrafterWorkload w = {}) {
  const sy_drafter_desc* d = host.drafter(name);
  Report r;
  r.component = "drafter '" + name + "'";
  void* state = nullptr;
  ++r.calls;
  if (d->create(nullptr, host.options(d->options, d->num_options, std::move(options)), &state) != SY_OK) {
    r.add("create failed: " + MockHost::error());
    return r;
  }
  const bool sampled = SY_HAS_FIELD(d, sy_drafter_desc, propose_sampled) && d->propose_sampled;
  std::mt19937_64 rng(w.seed);
  for (int32_t q = 0; q < w.sequences && r.violations.size() < 20; ++q) {
    const auto id = static_cast<uint64_t>(q + 1);
    // Repetitive text, so lookup drafters find something to propose.
    std::vector<int32_t> tokens{1};
    for (int32_t i = 0; i < 40; ++i) tokens.push_back(3 + static_cast<int32_t>((i % 7) * 13 + q));
    for (int32_t step = 0; step < w.steps; ++step) {
      const std::string at = "sequence " + std::to_string(id) + " step " + std::to_string(step) + ": ";
      std::vector<int32_t> out(static_cast<size_t>(w.k), -1);
      std::vector<float> probs(sampled ? static_cast<size_t>(w.k * w.vocab_size) : 0);
      int32_t count = -1;
      sy_draft_sampling sampling{sizeof(sy_draft_sampling), 0.8f, 0, 1.0f, w.seed};
      ++r.calls;
      const sy_status st = sampled ? d->propose_sampled(state, id, tokens.data(), static_cast<int32_t>(tokens.size()), w.k, &sampling,
                                                        w.vocab_size, out.data(), probs.data(), &count)
                                   : d->propose(state, id, tokens.data(), static_cast<int32_t>(tokens.size()), w.k, out.data(), &count);
      if (st != SY_OK) {
        r.add(at + "propose failed: " + MockHost::error());
        break;
      }
      if (count < 0 || count > w.k) {
        r.add(at + "proposed " + std::to_string(count) + " tokens, k is " + std::to_string(w.k));
        break;
      }
      for (int32_t i = 0; i < count; ++i) {
        if (out[static_cast<size_t>(i)] < 0 || out[static_cast<size_t>(i)] >= w.vocab_size)
          r.add(at + "proposed token id " + std::to_string(out[static_cast<size_t>(i)]) + ", outside the vocabulary of " + std::to_string(w.vocab_size));
        if (!sampled) continue;
        const float* row = probs.data() + static_cast<int64_t>(i) * w.vocab_size;
        double sum = 0;
        bool negative = false;
        for (int64_t t = 0; t < w.vocab_size; ++t) {
          sum += row[t];
          negative |= !(row[t] >= 0);
        }
        if (negative || std::fabs(sum - 1.0) > 1e-3) r.add(at + "draft distribution " + std::to_string(i) + " sums to " + std::to_string(sum));
        else if (out[static_cast<size_t>(i)] >= 0 && out[static_cast<size_t>(i)] < w.vocab_size && !(row[out[static_cast<size_t>(i)]] > 0))
          r.add(at + "proposal " + std::to_string(i) + " has probability 0 in its own draft distribution");
      }
      // Accept a random prefix of the proposal, then one token of our own.
      const int32_t accepted = count > 0 ? static_cast<int32_t>(rng() % static_cast<uint64_t>(count + 1)) : 0;
      if (d->accepted) {
        ++r.calls;
        if (d->accepted(state, id, count, accepted) != SY_OK) r.add(at + "accepted failed: " + MockHost::error());
      }
      for (int32_t i = 0; i < accepted; ++i) tokens.push_back(out[static_cast<size_t>(i)]);
      tokens.push_back(3 + static_cast<int32_t>(rng() % 50));
    }
    if (d->release) {
      ++r.calls;
      if (d->release(state, id) != SY_OK) r.add("release of sequence " + std::to_string(id) + " failed: " + MockHost::error());
    }
  }
  d->destroy(state);
  return r;
}

}  // namespace sy::plugin::testing
