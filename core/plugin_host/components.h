// Named components a manifest can select (passes, schedulers, KV-cache
// managers, drafters, logits processors), from plugins or built in, and the host-side wrappers
// that call a plugin's C functions with its errors turned into sy::Error.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "passes/pass.h"
#include "plugin_host/host_api.h"
#include "plugin_host/options.h"
#include "plugin_host/plugin_library.h"

namespace sy {

enum class ComponentKind { Pass, Scheduler, Cache, Drafter, LogitsProcessor };
// "pass", "scheduler", "cache manager", "drafter", "logits processor"
const char* component_kind_name(ComponentKind k);

struct ComponentEntry {
  ComponentKind kind = ComponentKind::Pass;
  std::string name, version, description;
  std::string provider = "builtin";  // plugin name or "builtin"
  std::vector<OptionSchema> options;
  std::shared_ptr<PluginLibrary> library;  // null for built-ins
  const void* desc = nullptr;              // the plugin's sy_*_desc
  // Built-in passes only.
  std::function<std::unique_ptr<GraphPass>(const OptionValues&)> builtin_pass;
  std::string label() const;  // "pass 'x' 1.0 (plugin y 2.0)"
};

class ComponentRegistry {
 public:
  // Refuses a second component of the same kind and name, naming both providers.
  void add(ComponentEntry e);
  // Throws "<where>: unknown <kind> 'x'; known <kind>s: a (provider), ..." for unknown names.
  const ComponentEntry& get(ComponentKind kind, const std::string& name, const std::string& where) const;
  std::vector<const ComponentEntry*> list(ComponentKind kind) const;
  void remove_provider(const std::string& provider);

  // A registry with the built-in simplification passes.
  static ComponentRegistry with_builtins();

 private:
  std::map<std::pair<ComponentKind, std::string>, ComponentEntry> entries_;
};

// An instance of a pass component with its options.
std::unique_ptr<GraphPass> instantiate_pass(const ComponentEntry& e, const OptionValues& options, const HostContext* host);

// What every plugin component instance shares: the library (kept loaded
// while the instance lives), its descriptor and options, the state its
// create returned, and the guarded call into it. destroy runs once, only for
// a state create returned.
template <typename Desc>
class PluginComponent {
 public:
  PluginComponent(const PluginComponent&) = delete;
  PluginComponent& operator=(const PluginComponent&) = delete;
  // "scheduler 'x' 1.0.0 (plugin y 1.0.0)", for messages about the component.
  const std::string& label() const { return label_; }

 protected:
  PluginComponent(const ComponentEntry& e, ComponentKind kind, const OptionValues& options, const HostContext* host)
      : lib_(e.library), d_(static_cast<const Desc*>(e.desc)), options_(options), host_(host), name_(e.name), label_(e.label()), kind_(kind) {
    SY_CHECK(e.kind == kind && lib_, e.label() << " is not a plugin " << component_kind_name(kind));
  }
  ~PluginComponent() {
    if (created_) call_plugin_noexcept(lib_->name(), host_, [&] { d_->destroy(state_); });
  }
  // Runs the plugin's create (f receives the options handle and &state_).
  template <typename F>
  void create(F&& f) {
    sy_options o{&options_};
    call_plugin(lib_->name(), host_, std::string(component_kind_name(kind_)) + " '" + name_ + "' create",
                [&] { return f(&o, &state_); });
    created_ = true;
  }
  template <typename F>
  void call(const char* what, F&& f) {
    call_plugin(lib_->name(), host_, what, std::forward<F>(f));
  }
  template <typename F>
  sy_status call_status(const char* what, F&& f) {
    return call_plugin_status(lib_->name(), host_, what, std::forward<F>(f));
  }
  // "plugin 'name'" for messages about what a call returned.
  std::string who() const { return "plugin '" + lib_->name() + "'"; }
  void* plugin_data() const { return lib_->info().plugin_data; }

  std::shared_ptr<PluginLibrary> lib_;
  const Desc* d_;
  OptionValues options_;
  const HostContext* host_;
  std::string name_;
  std::string label_;
  void* state_ = nullptr;

 private:
  ComponentKind kind_;
  bool created_ = false;
};

// The element sizes of a scheduler's arrays as the plugin was built
// (sy_scheduler_desc.seq_size / decision_size, or the 1.0 sizes for a
// descriptor without them). Throws naming the plugin for sizes below 1.0's.
std::pair<size_t, size_t> scheduler_element_sizes(const sy_scheduler_desc* d, const std::string& who);

// Host-side handles for the other plugin kinds.
class PluginScheduler : PluginComponent<sy_scheduler_desc> {
 public:
  using PluginComponent::label;
  PluginScheduler(const ComponentEntry& e, const OptionValues& options, const HostContext* host);
  // input's arrays hold this host's sy_sched_seq; they reach the plugin laid
  // out with the element size it was built with (ABI 1.3 growable arrays).
  std::vector<sy_sched_decision> plan(const sy_sched_input& input);

 private:
  size_t seq_size_, decision_size_;  // the plugin's element sizes
};

class PluginCacheManager : PluginComponent<sy_cache_desc> {
 public:
  using PluginComponent::label;
  PluginCacheManager(const ComponentEntry& e, const sy_cache_config& config, const OptionValues& options, const HostContext* host);
  // false when the cache is full (SY_OUT_OF_MEMORY); other errors throw.
  bool allocate(uint64_t seq, int32_t num_tokens);
  // What the cache manager said when it last refused an allocation ("" if nothing).
  const std::string& last_refusal() const { return last_refusal_; }
  int32_t match_prefix(uint64_t seq, const std::vector<int32_t>& tokens);
  void commit(uint64_t seq, const int32_t* tokens, int32_t count);
  void truncate(uint64_t seq, int32_t length);
  bool can_truncate() const { return d_->truncate != nullptr; }  // speculative rollback
  bool caches_prefixes() const { return d_->match_prefix != nullptr; }  // blocks shared across requests
  void fork(uint64_t parent, uint64_t child);
  void release(uint64_t seq);
  std::vector<int32_t> block_table(uint64_t seq);
  std::pair<sy_tensor, sy_tensor> storage(int32_t layer);
  sy_cache_stats stats();
  // 1.5: whether the cache manager reports KV-cache events, and the ones
  // since the last call (copied: the plugin's list lives until its next call).
  bool has_events() const { return SY_HAS_FIELD(d_, sy_cache_desc, take_events) && d_->take_events; }
  struct Event {
    int32_t kind, block, parent;
    std::vector<int32_t> tokens;
  };
  std::vector<Event> take_events();

 private:
  std::string last_refusal_;
};

// A drafter's proposals; probs (when the drafter sampled them) holds, for
// each proposal, the distribution it was drawn from over the vocabulary.
struct DraftProposal {
  std::vector<int32_t> tokens;
  std::vector<std::vector<double>> probs;  // empty: deterministic proposals (point masses)
};

// A tree of proposals (ABI 1.9): node i proposes tokens[i] after node
// parents[i] (-1: the sequence's last token), as the drafter returned it;
// count is the node count it reported (checked by the engine, which drops a
// malformed tree naming the fault).
struct DraftTreeProposal {
  std::vector<int32_t> tokens, parents;
  int32_t count = 0;
};

class PluginDrafter : PluginComponent<sy_drafter_desc> {
 public:
  PluginDrafter(const ComponentEntry& e, const OptionValues& options, const HostContext* host);
  // sampling: the request's (temperature 0 = greedy); vocab_size: the target's.
  DraftProposal propose(uint64_t seq, const std::vector<int32_t>& tokens, int32_t k, const sy_draft_sampling& sampling,
                        int64_t vocab_size);
  // 1.9: whether it proposes trees, and a tree of at most max_nodes nodes
  // (tokens and parents sized max_nodes; count as the drafter reported it).
  bool proposes_trees() const;
  DraftTreeProposal propose_tree(uint64_t seq, const std::vector<int32_t>& tokens, int32_t max_nodes);
  // 1.9: whether it observes verification, and the observation (parents
  // empty for a chain; target_next has proposed.size() + 1 entries).
  bool observes() const;
  void observe(uint64_t seq, const std::vector<int32_t>& proposed, const std::vector<int32_t>& parents,
               const std::vector<int32_t>& target_next);
  // 1.10: whether it reads the target's hidden states, and one of them.
  bool reads_hidden() const;
  void hidden_state(uint64_t seq, const float* hidden, int64_t size);
  void accepted(uint64_t seq, int32_t proposed, int32_t accepted);
  void release(uint64_t seq);
  using PluginComponent::label;
};

// The vocabulary handed to a logits processor: each token's bytes, which ids
// are control tokens, and the ids that end a sequence.
struct VocabBytes {
  std::vector<std::string> tokens;  // [vocab_size]: the bytes each token adds to the text ("" for special ones)
  std::vector<uint8_t> special;     // [vocab_size]
  std::vector<int32_t> stop_tokens;
};

class PluginLogitsProcessor : PluginComponent<sy_logits_processor_desc> {
 public:
  using PluginComponent::label;
  PluginLogitsProcessor(const ComponentEntry& e, const VocabBytes& vocab, const OptionValues& options, const HostContext* host);
  // Throws ErrorKind::InvalidArgument with the plugin's message when it
  // refuses the constraint (unknown kind, a schema it cannot compile).
  void begin(uint64_t seq, const std::string& kind, const std::string& spec);
  // Rows of words_per_row words, one per sequence, in the order of seqs.
  void fill_masks(const uint64_t* seqs, int32_t rows, uint32_t* mask, int32_t words_per_row);
  bool accept(uint64_t seq, int32_t token);  // false: the constraint does not allow it
  void rollback(uint64_t seq, int32_t tokens);
  int32_t query(uint64_t seq);  // SY_CONSTRAINT_* flags
  void end(uint64_t seq);
  // ABI 1.6: the tokens seq may still emit; false when the processor does
  // not take a budget (older plugins, or it returned SY_UNSUPPORTED).
  bool set_token_budget(uint64_t seq, int32_t tokens);
  int32_t vocab_size() const { return vocab_size_; }

 private:
  int32_t vocab_size_;
};

}  // namespace sy
