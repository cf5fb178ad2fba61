#include "plugin_host/components.h"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <sstream>
#include <tuple>

#include "plugin_host/host_api.h"

namespace sy {

const char* component_kind_name(ComponentKind k) {
  switch (k) {
    case ComponentKind::Pass: return "pass";
    case ComponentKind::Scheduler: return "scheduler";
    case ComponentKind::Cache: return "cache manager";
    case ComponentKind::Drafter: return "drafter";
    case ComponentKind::LogitsProcessor: return "logits processor";
  }
  return "component";
}

std::string ComponentEntry::label() const {
  std::ostringstream os;
  os << component_kind_name(kind) << " '" << name << "' " << version << " (";
  if (library) os << "plugin " << provider << " " << library->version() << ", " << library->path();
  else os << "built in";
  os << ")";
  return os.str();
}

void ComponentRegistry::add(ComponentEntry e) {
  auto key = std::make_pair(e.kind, e.name);
  auto it = entries_.find(key);
  SY_CHECK(it == entries_.end(), "two providers register " << component_kind_name(e.kind) << " '" << e.name
                                                            << "': " << it->second.label() << " and " << e.label());
  entries_.emplace(key, std::move(e));
}

const ComponentEntry& ComponentRegistry::get(ComponentKind kind, const std::string& name, const std::string& where) const {
  auto it = entries_.find({kind, name});
  if (it != entries_.end()) return it->second;
  std::ostringstream os;
  os << where << ": unknown " << component_kind_name(kind) << " '" << name << "'; known: ";
  auto known = list(kind);
  if (known.empty()) os << "none (load a plugin that provides one)";
  for (size_t i = 0; i < known.size(); ++i)
    os << (i ? ", " : "") << known[i]->name << " (" << (known[i]->library ? "plugin " + known[i]->provider : "built in") << ")";
  throw Error(os.str(), ErrorKind::NotFound);
}

std::vector<const ComponentEntry*> ComponentRegistry::list(ComponentKind kind) const {
  std::vector<const ComponentEntry*> out;
  for (const auto& [key, e] : entries_)
    if (key.first == kind) out.push_back(&e);
  return out;
}

void ComponentRegistry::remove_provider(const std::string& provider) {
  for (auto it = entries_.begin(); it != entries_.end();)
    it = it->second.provider == provider ? entries_.erase(it) : std::next(it);
}

ComponentRegistry ComponentRegistry::with_builtins() {
  ComponentRegistry r;
  auto add_builtin = [&](const std::string& name, const std::string& desc, std::unique_ptr<GraphPass> (*make)()) {
    ComponentEntry e;
    e.kind = ComponentKind::Pass;
    e.name = name;
    e.version = "1.0.0";
    e.description = desc;
    e.builtin_pass = [make](const OptionValues&) { return make(); };
    r.add(std::move(e));
  };
  add_builtin("constant-folding", "evaluate nodes whose inputs are all constants", make_constant_folding_pass);
  add_builtin("shape-folding", "Shape/Gather(Shape) of static dims to constants", make_shape_folding_pass);
  add_builtin("cse", "merge equal constants and equal nodes", make_cse_pass);
  add_builtin("identity-elimination", "drop nodes that return their input", make_identity_elimination_pass);
  add_builtin("dead-node-elimination", "drop nodes nothing reads", make_dead_node_elimination_pass);
  auto add_drafter = [&](const std::string& name, const std::string& desc, std::vector<OptionSchema> options) {
    ComponentEntry e;
    e.kind = ComponentKind::Drafter;
    e.name = name;
    e.version = "1.0.0";
    e.description = desc;
    e.options = std::move(options);
    r.add(std::move(e));
  };
  // The draft-model drafter runs a second model, so the engine provides it.
  add_drafter("draft-model", "a second decoder model (smaller, or the same under other settings) proposes k tokens",
              {OptionSchema{"model", SY_OPTION_STRING, std::nullopt, "draft model (.onnx), relative to the manifest"},
               OptionSchema{"k", SY_OPTION_INT, std::string("4"), "tokens proposed per step"}});
  // Medusa-style heads read the target's hidden states and score with its
  // LM head, so the engine provides them too.
  add_drafter("heads", "Medusa-style heads (ONNX, from `python -m switchyard.distill heads`) propose a tree from the target's hidden state",
              {OptionSchema{"model", SY_OPTION_STRING, std::nullopt, "heads file (.onnx), relative to the manifest"},
               OptionSchema{"k", SY_OPTION_INT, std::string("4"), "tokens proposed per step at most (tree depth)"},
               OptionSchema{"top", SY_OPTION_INT, std::string("3"), "candidates per head the tree chooses from"}});
  return r;
}

namespace {

// A plugin pass as a GraphPass.
class PluginPass : public GraphPass {
 public:
  PluginPass(const ComponentEntry& e, OptionValues options, const HostContext* host)
      : lib_(e.library), d_(static_cast<const sy_pass_desc*>(e.desc)), name_(e.name), options_(std::move(options)),
        host_(host) {}
  std::string name() const override { return name_; }
  bool probed() const override { return true; }
  bool run(Graph& g, PassContext& ctx) override {
    sy_graph handle{&g, ctx.env};
    sy_options opts{&options_};
    int32_t changed = 0;
    call_plugin(lib_->name(), host_, "pass '" + name_ + "'",
                [&] { return d_->run(lib_->info().plugin_data, &handle, &opts, &changed); });
    return changed != 0;
  }

 private:
  std::shared_ptr<PluginLibrary> lib_;
  const sy_pass_desc* d_;
  std::string name_;
  OptionValues options_;
  const HostContext* host_;
};

}  // namespace

std::unique_ptr<GraphPass> instantiate_pass(const ComponentEntry& e, const OptionValues& options, const HostContext* host) {
  SY_CHECK(e.kind == ComponentKind::Pass, e.label() << " is not a pass");
  if (e.builtin_pass) return e.builtin_pass(options);
  return std::make_unique<PluginPass>(e, options, host);
}

// ---- scheduler

std::pair<size_t, size_t> scheduler_element_sizes(const sy_scheduler_desc* d, const std::string& who) {
  constexpr size_t seq_1_0 = SY_SCHED_SEQ_SIZE_1_0, decision_1_0 = sizeof(sy_sched_decision);
  const size_t seq = sy_scheduler_seq_size(d), decision = sy_scheduler_decision_size(d);
  SY_CHECK(seq >= seq_1_0 && seq % alignof(sy_sched_seq) == 0,
           who << ": scheduler '" << d->name << "' declares seq_size " << d->seq_size << " (at least " << seq_1_0 << ", a multiple of "
               << alignof(sy_sched_seq) << ")");
  SY_CHECK(decision >= decision_1_0 && decision % alignof(sy_sched_decision) == 0,
           who << ": scheduler '" << d->name << "' declares decision_size " << d->decision_size << " (at least " << decision_1_0
               << ", a multiple of " << alignof(sy_sched_decision) << ")");
  return {seq, decision};
}

PluginScheduler::PluginScheduler(const ComponentEntry& e, const OptionValues& options, const HostContext* host)
    : PluginComponent(e, ComponentKind::Scheduler, options, host) {
  std::tie(seq_size_, decision_size_) = scheduler_element_sizes(d_, who());
  create([&](const sy_options* o, void** state) { return d_->create(plugin_data(), o, state); });
}

namespace {
// Host elements re-laid at the plugin's stride: the fields both know copied,
// the plugin's newer ones zero.
template <typename T>
std::vector<std::byte> at_stride(const T* items, int32_t n, size_t stride) {
  std::vector<std::byte> out(static_cast<size_t>(n) * stride);
  for (int32_t i = 0; i < n; ++i) std::memcpy(out.data() + static_cast<size_t>(i) * stride, &items[i], std::min(sizeof(T), stride));
  return out;
}
}  // namespace

std::vector<sy_sched_decision> PluginScheduler::plan(const sy_sched_input& host_input) {
  const int32_t capacity = host_input.num_waiting + host_input.num_running;
  sy_sched_input input = host_input;
  input.struct_size = sizeof(input);
  input.seq_size = static_cast<uint32_t>(seq_size_);
  std::vector<std::byte> waiting, running;
  if (seq_size_ != sizeof(sy_sched_seq)) {
    waiting = at_stride(host_input.waiting, host_input.num_waiting, seq_size_);
    running = at_stride(host_input.running, host_input.num_running, seq_size_);
    input.waiting = reinterpret_cast<const sy_sched_seq*>(waiting.data());
    input.running = reinterpret_cast<const sy_sched_seq*>(running.data());
  }
  // Decisions come back at the plugin's stride (std::vector<std::byte>'s
  // storage is suitably aligned for them: operator new's alignment).
  std::vector<std::byte> raw(static_cast<size_t>(capacity) * decision_size_ + 1);
  int32_t count = 0;
  call("scheduler plan", [&] {
    return d_->plan(state_, &input, reinterpret_cast<sy_sched_decision*>(raw.data()), capacity, &count);
  });
  SY_CHECK_KIND(count >= 0 && count <= capacity, ErrorKind::PluginFailure,
                who() << ": scheduler plan returned " << count << " decisions for " << capacity << " sequences");
  std::vector<sy_sched_decision> out(static_cast<size_t>(count));
  for (int32_t i = 0; i < count; ++i)
    std::memcpy(&out[static_cast<size_t>(i)], raw.data() + static_cast<size_t>(i) * decision_size_, std::min(sizeof(sy_sched_decision), decision_size_));
  return out;
}

// ---- cache manager

PluginCacheManager::PluginCacheManager(const ComponentEntry& e, const sy_cache_config& config, const OptionValues& options,
                                       const HostContext* host)
    : PluginComponent(e, ComponentKind::Cache, options, host) {
  create([&](const sy_options* o, void** state) { return d_->create(plugin_data(), &config, o, state); });
}
bool PluginCacheManager::allocate(uint64_t seq, int32_t n) {
  sy_status s = call_status("cache allocate", [&] { return d_->allocate(state_, seq, n); });
  if (s == SY_OUT_OF_MEMORY) {
    last_refusal_ = take_plugin_error();
    return false;
  }
  check_plugin_status(lib_->name(), s, "cache allocate");
  return true;
}
int32_t PluginCacheManager::match_prefix(uint64_t seq, const std::vector<int32_t>& tokens) {
  if (!d_->match_prefix) return 0;
  int32_t cached = 0;
  call("cache match_prefix", [&] { return d_->match_prefix(state_, seq, tokens.data(), static_cast<int32_t>(tokens.size()), &cached); });
  SY_CHECK_KIND(cached >= 0 && cached <= static_cast<int32_t>(tokens.size()), ErrorKind::PluginFailure,
                who() << ": cache match_prefix reported " << cached << " cached tokens of " << tokens.size());
  return cached;
}
void PluginCacheManager::commit(uint64_t seq, const int32_t* tokens, int32_t count) {
  if (d_->commit) call("cache commit", [&] { return d_->commit(state_, seq, tokens, count); });
}
void PluginCacheManager::truncate(uint64_t seq, int32_t length) {
  SY_CHECK_KIND(d_->truncate, ErrorKind::Unsupported, who() << ": this cache manager cannot truncate (no rollback)");
  call("cache truncate", [&] { return d_->truncate(state_, seq, length); });
}
void PluginCacheManager::fork(uint64_t parent, uint64_t child) {
  SY_CHECK_KIND(d_->fork, ErrorKind::Unsupported, who() << ": this cache manager cannot fork sequences");
  call("cache fork", [&] { return d_->fork(state_, parent, child); });
}
void PluginCacheManager::release(uint64_t seq) {
  call("cache release", [&] { return d_->release(state_, seq); });
}
std::vector<int32_t> PluginCacheManager::block_table(uint64_t seq) {
  const int32_t* blocks = nullptr;
  int32_t n = 0;
  call("cache block_table", [&] { return d_->block_table(state_, seq, &blocks, &n); });
  SY_CHECK_KIND(n >= 0 && (n == 0 || blocks), ErrorKind::PluginFailure, who() << ": cache block_table returned a bad table");
  return std::vector<int32_t>(blocks, blocks + n);
}
std::pair<sy_tensor, sy_tensor> PluginCacheManager::storage(int32_t layer) {
  sy_tensor k{}, v{};
  call("cache storage", [&] { return d_->storage(state_, layer, &k, &v); });
  return {k, v};
}
sy_cache_stats PluginCacheManager::stats() {
  sy_cache_stats s{};
  s.struct_size = sizeof(s);
  if (d_->stats) call("cache stats", [&] { return d_->stats(state_, &s); });
  return s;
}
std::vector<PluginCacheManager::Event> PluginCacheManager::take_events() {
  std::vector<Event> out;
  if (!has_events()) return out;
  const sy_cache_event* events = nullptr;
  int32_t n = 0;
  call("cache take_events", [&] { return d_->take_events(state_, &events, &n); });
  SY_CHECK_KIND(n >= 0 && (n == 0 || events), ErrorKind::PluginFailure, who() << ": cache take_events returned a bad list");
  out.reserve(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    const sy_cache_event& e = events[i];
    SY_CHECK_KIND(e.kind >= SY_CACHE_BLOCK_STORED && e.kind <= SY_CACHE_ALL_CLEARED, ErrorKind::PluginFailure,
                  who() << ": cache event " << i << " has unknown kind " << e.kind);
    SY_CHECK_KIND(e.kind != SY_CACHE_BLOCK_STORED || (e.num_tokens > 0 && e.tokens), ErrorKind::PluginFailure,
                  who() << ": cache event " << i << " stores block " << e.block << " without its tokens");
    Event copy{e.kind, e.block, e.parent, {}};
    if (e.kind == SY_CACHE_BLOCK_STORED) copy.tokens.assign(e.tokens, e.tokens + e.num_tokens);
    out.push_back(std::move(copy));
  }
  return out;
}

// ---- drafter

PluginDrafter::PluginDrafter(const ComponentEntry& e, const OptionValues& options, const HostContext* host)
    : PluginComponent(e, ComponentKind::Drafter, options, host) {
  create([&](const sy_options* o, void** state) { return d_->create(plugin_data(), o, state); });
}
DraftProposal PluginDrafter::propose(uint64_t seq, const std::vector<int32_t>& tokens, int32_t k, const sy_draft_sampling& sampling,
                                     int64_t vocab_size) {
  DraftProposal p;
  p.tokens.resize(static_cast<size_t>(std::max(k, 0)));
  int32_t count = 0;
  const auto n = static_cast<int32_t>(tokens.size());
  if (SY_HAS_FIELD(d_, sy_drafter_desc, propose_sampled) && d_->propose_sampled && vocab_size > 0) {
    std::vector<float> probs(static_cast<size_t>(std::max(k, 0)) * static_cast<size_t>(vocab_size));
    call("drafter propose_sampled", [&] {
      return d_->propose_sampled(state_, seq, tokens.data(), n, k, &sampling, vocab_size, p.tokens.data(), probs.data(), &count);
    });
    SY_CHECK_KIND(count >= 0 && count <= k, ErrorKind::PluginFailure, who() << ": drafter proposed " << count << " tokens, k is " << k);
    for (int32_t i = 0; i < count; ++i) {
      const float* row = probs.data() + static_cast<size_t>(i) * static_cast<size_t>(vocab_size);
      std::vector<double> q(row, row + vocab_size);
      double sum = 0;
      bool finite = true;
      for (double v : q) {
        finite = finite && std::isfinite(v) && v >= 0;
        sum += v;
      }
      SY_CHECK_KIND(finite && std::abs(sum - 1.0) < 1e-3, ErrorKind::PluginFailure,
                    who() << ": drafter propose_sampled: the distribution of proposal " << i
                          << " is not a probability distribution (sum " << sum << (finite ? "" : ", negative or non-finite entries")
                          << ")");
      for (double& v : q) v /= sum;
      p.probs.push_back(std::move(q));
    }
  } else {
    call("drafter propose", [&] { return d_->propose(state_, seq, tokens.data(), n, k, p.tokens.data(), &count); });
    SY_CHECK_KIND(count >= 0 && count <= k, ErrorKind::PluginFailure, who() << ": drafter proposed " << count << " tokens, k is " << k);
  }
  p.tokens.resize(static_cast<size_t>(count));
  return p;
}
bool PluginDrafter::proposes_trees() const { return SY_HAS_FIELD(d_, sy_drafter_desc, propose_tree) && d_->propose_tree; }

DraftTreeProposal PluginDrafter::propose_tree(uint64_t seq, const std::vector<int32_t>& tokens, int32_t max_nodes) {
  DraftTreeProposal t;
  t.tokens.assign(static_cast<size_t>(std::max(max_nodes, 0)), -1);
  t.parents.assign(static_cast<size_t>(std::max(max_nodes, 0)), -2);
  const auto n = static_cast<int32_t>(tokens.size());
  call("drafter propose_tree",
       [&] { return d_->propose_tree(state_, seq, tokens.data(), n, max_nodes, t.tokens.data(), t.parents.data(), &t.count); });
  return t;
}

bool PluginDrafter::observes() const { return SY_HAS_FIELD(d_, sy_drafter_desc, observe) && d_->observe; }

void PluginDrafter::observe(uint64_t seq, const std::vector<int32_t>& proposed, const std::vector<int32_t>& parents,
                            const std::vector<int32_t>& target_next) {
  call("drafter observe", [&] {
    return d_->observe(state_, seq, proposed.data(), parents.empty() ? nullptr : parents.data(), static_cast<int32_t>(proposed.size()),
                       target_next.data());
  });
}

bool PluginDrafter::reads_hidden() const { return SY_HAS_FIELD(d_, sy_drafter_desc, hidden_state) && d_->hidden_state; }

void PluginDrafter::hidden_state(uint64_t seq, const float* hidden, int64_t size) {
  call("drafter hidden_state", [&] { return d_->hidden_state(state_, seq, hidden, static_cast<int32_t>(size)); });
}

void PluginDrafter::accepted(uint64_t seq, int32_t proposed, int32_t accepted_count) {
  if (d_->accepted) call("drafter accepted", [&] { return d_->accepted(state_, seq, proposed, accepted_count); });
}
void PluginDrafter::release(uint64_t seq) {
  if (d_->release) call("drafter release", [&] { return d_->release(state_, seq); });
}

// ---- logits processor

PluginLogitsProcessor::PluginLogitsProcessor(const ComponentEntry& e, const VocabBytes& vocab, const OptionValues& options,
                                             const HostContext* host)
    : PluginComponent(e, ComponentKind::LogitsProcessor, options, host), vocab_size_(static_cast<int32_t>(vocab.tokens.size())) {
  SY_CHECK(vocab.special.size() == vocab.tokens.size(), "logits processor vocabulary: special flags do not match the tokens");
  std::string bytes;
  std::vector<int64_t> offsets{0};
  for (const auto& t : vocab.tokens) {
    bytes += t;
    offsets.push_back(static_cast<int64_t>(bytes.size()));
  }
  sy_vocab v{};
  v.struct_size = sizeof(v);
  v.vocab_size = vocab_size_;
  v.bytes = bytes.data();
  v.offsets = offsets.data();
  v.special = vocab.special.data();
  v.stop_tokens = vocab.stop_tokens.data();
  v.num_stop_tokens = static_cast<int32_t>(vocab.stop_tokens.size());
  create([&](const sy_options* o, void** state) { return d_->create(plugin_data(), &v, o, state); });
}
void PluginLogitsProcessor::begin(uint64_t seq, const std::string& kind, const std::string& spec) {
  const sy_status st = call_status("logits processor begin", [&] { return d_->begin(state_, seq, kind.c_str(), spec.c_str()); });
  if (st == SY_OK) return;
  std::string msg = take_plugin_error();
  if (msg.empty()) msg = "refused the constraint";
  // A refused spec is the request's fault (a 400), anything else the plugin's.
  const ErrorKind k = st == SY_INVALID_ARGUMENT || st == SY_UNSUPPORTED ? ErrorKind::InvalidArgument : ErrorKind::PluginFailure;
  SY_THROW_KIND(k, label() << ": " << kind << " constraint: " << msg);
}
void PluginLogitsProcessor::fill_masks(const uint64_t* seqs, int32_t rows, uint32_t* mask, int32_t words_per_row) {
  call("logits processor fill_masks", [&] { return d_->fill_masks(state_, seqs, rows, mask, words_per_row); });
}
bool PluginLogitsProcessor::accept(uint64_t seq, int32_t token) {
  int32_t allowed = 0;
  call("logits processor accept", [&] { return d_->accept(state_, seq, token, &allowed); });
  return allowed != 0;
}
void PluginLogitsProcessor::rollback(uint64_t seq, int32_t tokens) {
  if (tokens > 0) call("logits processor rollback", [&] { return d_->rollback(state_, seq, tokens); });
}
int32_t PluginLogitsProcessor::query(uint64_t seq) {
  int32_t flags = 0;
  call("logits processor query", [&] { return d_->query(state_, seq, &flags); });
  return flags;
}
void PluginLogitsProcessor::end(uint64_t seq) {
  call("logits processor end", [&] { return d_->end(state_, seq); });
}
bool PluginLogitsProcessor::set_token_budget(uint64_t seq, int32_t tokens) {
  if (!SY_HAS_FIELD(d_, sy_logits_processor_desc, set_token_budget) || !d_->set_token_budget) return false;
  const sy_status st = call_status("logits processor set_token_budget", [&] { return d_->set_token_budget(state_, seq, tokens); });
  if (st == SY_UNSUPPORTED) take_plugin_error();
  else if (st != SY_OK) SY_THROW_KIND(ErrorKind::PluginFailure, label() << ": set_token_budget: " << take_plugin_error());
  return st == SY_OK;
}

}  // namespace sy
