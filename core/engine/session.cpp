#include "engine/session.h"

#include "device/device_registry.h"
#include "text/tokenizer.h"
#include "switchyard/plugin.h"

#include <exception>
#include <filesystem>
#include <sstream>

namespace sy {

namespace {

SelectedComponent select(const ComponentRegistry& reg, ComponentKind kind, const ComponentSelection& sel) {
  const ComponentEntry& e = reg.get(kind, sel.name, sel.where);
  return SelectedComponent{&e, OptionValues::validate(e.options, sel.options, e.label())};
}

void check_providers(const KernelPolicy& policy, const KernelRegistry& kernels, const std::string& manifest) {
  std::set<std::string> known;
  for (const KernelDef* d : kernels.all()) known.insert(d->provider);
  auto check = [&](const std::string& p, const std::string& key) {
    if (known.count(p)) return;
    std::ostringstream os;
    os << manifest << ": " << key << ": unknown kernel provider '" << p << "'; known providers:";
    for (const auto& k : known) os << " " << k;
    throw Error(os.str());
  };
  for (const auto& p : policy.forbid) check(p, "kernels.forbid");
  for (const auto& [op, p] : policy.pin) check(p, "kernels.pin." + op);
}

}  // namespace

std::unique_ptr<Session> Session::create(const EngineConfig& config) {
  if (!config.unfused_fallback || (config.passes.empty() && !config.cache)) return create_exactly(config);
  try {
    return create_exactly(config);
  } catch (const Error& e) {
    // The graph as exported; if even that fails, the first error is the one
    // that names the problem.
    const std::exception_ptr first = std::current_exception();
    EngineConfig plain = config;
    plain.passes.clear();
    plain.cache.reset();
    plain.scheduler.reset();
    plain.drafter.reset();
    std::unique_ptr<Session> s;
    try {
      s = create_exactly(plain);
    } catch (const std::exception&) {
      std::rethrow_exception(first);
    }
    s->fallback_reason_ = e.what();
    return s;
  }
}

// Session::create_exactly reads as its stages; each stage is one member below.
std::unique_ptr<Session> Session::create_exactly(const EngineConfig& config) {
  std::unique_ptr<Session> s(new Session());
  s->config_ = config;
  SY_CHECK(!config.model.empty(), (config.manifest_path.empty() ? std::string("no model given")
                                                                 : config.manifest_path + ": no model (set 'model:' or pass --model)"));
  s->folder_ = ModelFolder::open(config.model, {config.tokenizer, config.chat_template, config.tool_parser});
  s->load_plugins();
  s->select_components();
  s->open_device();
  s->prepare_model();
  if (s->cache_) {
    s->create_cache_manager();
    s->create_step_engine();
    if (s->drafter_) s->attach_drafter();
  } else {
    s->create_baseline();
  }
  if (s->logits_processor_) s->attach_logits_processor();
  return s;
}

// Registries with the built-ins, then every plugin of the manifest, in order.
void Session::load_plugins() {
  threads_ = std::make_unique<ThreadPool>(config_.threads);
  kernels_ = KernelRegistry::with_builtins();
  components_ = ComponentRegistry::with_builtins();
  host_ = std::make_unique<HostContext>(HostContext{threads_.get(), nullptr});
  plugins_ = std::make_unique<PluginHost>(kernels_, components_, host_.get());
  for (const PluginSpec& p : config_.plugins) {
    try {
      plugins_->load(p.path, p.sha256);
    } catch (const Error& e) {
      SY_THROW_KIND(e.kind(), p.where << ": " << e.what());
    }
  }
  check_providers(config_.kernels, kernels_, config_.manifest_path);
}

// The manifest's passes, scheduler, cache manager and drafter by name, with
// their options checked against each component's schema.
void Session::select_components() {
  for (const auto& sel : config_.passes) passes_.push_back(select(components_, ComponentKind::Pass, sel));
  if (config_.scheduler) scheduler_ = select(components_, ComponentKind::Scheduler, *config_.scheduler);
  if (config_.cache) cache_ = select(components_, ComponentKind::Cache, *config_.cache);
  if (config_.drafter) drafter_ = select(components_, ComponentKind::Drafter, *config_.drafter);
  if (config_.logits_processor)
    logits_processor_ = select(components_, ComponentKind::LogitsProcessor, *config_.logits_processor);
}

// The manifest's device, resolved against what the machine has; plugin
// calls of this session reach it through the HostContext.
void Session::open_device() {
  const DeviceSpec spec = parse_device_spec(config_.device);
  const bool wants_cuda = spec.automatic || spec.kind == Device::CUDA;
  const DeviceSpec resolved = resolve_device(spec, wants_cuda ? probe_cuda() : DeviceProbe{});
  device_ = sy::open_device(resolved);
  host_->device = device_;
  register_device_kernels(kernels_, resolved.kind);
}

// Import, simplify, the passes in order (each proven by the equivalence
// probe), simplify again, plan.
void Session::prepare_model() {
  std::vector<std::unique_ptr<GraphPass>> passes;
  std::vector<GraphPass*> pass_ptrs;
  for (const auto& p : passes_) {
    passes.push_back(instantiate_pass(*p.entry, p.options, host_.get()));
    pass_ptrs.push_back(passes.back().get());
  }
  // The step engine samples from one row per sequence (or its drafts'):
  // the LM head runs on those rows only.
  std::unique_ptr<GraphPass> select_logits;
  if (config_.cache) {
    select_logits = make_select_logits_pass();
    pass_ptrs.push_back(select_logits.get());
  }
  ModelOptions mo;
  mo.simplify = config_.simplify;
  mo.max_context = config_.max_context;
  mo.executor.device = device_ ? device_->kind() : Device::CPU;
  mo.executor.backend = device_;
  mo.executor.forbidden_providers = config_.kernels.forbid;
  mo.executor.pinned_providers = config_.kernels.pin;
  mo.import.max_file_bytes = config_.limits.max_model_bytes;
  mo.import.max_tensors = config_.limits.max_tensors;
  mo.import.max_graph_depth = config_.limits.max_graph_depth;
  mo.gguf.dequantize = config_.gguf_dequantize;
  model_ = DecoderModel::load(*folder_, kernels_, threads_.get(), mo, pass_ptrs, &report_);
}

namespace {

// What a cache tier that outlives the process keys its KV by: the model
// file (its canonical path, size and modification time) and every choice
// that shapes its keys and values (the passes with their options, GGUF
// dequantization, the device). FNV-1a 64; never 0.
uint64_t model_fingerprint(const std::string& model_file, const EngineConfig& c, Device device) {
  std::ostringstream id;
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::weakly_canonical(model_file, ec);
  id << (ec ? model_file : p.string()) << '|' << std::filesystem::file_size(model_file, ec) << '|'
     << std::filesystem::last_write_time(model_file, ec).time_since_epoch().count() << '|' << c.gguf_dequantize << '|'
     << static_cast<int>(device);
  for (const auto& sel : c.passes) {
    id << '|' << sel.name;
    for (const auto& [k, v] : sel.options) id << ',' << k << '=' << v.text;
  }
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : id.str()) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h ? h : 1;
}

}  // namespace

// The KV cache where the attention kernels run, checked against limits.max_kv_mb.
void Session::create_cache_manager() {
  DecoderModel& m = *model_;
  SY_CHECK(m.paged_attention(), cache_->entry->label() << " needs the model's attention fused: add the 'attention-fusion' pass "
                                                          "(plugin switchyard-attention) to 'passes:'");
  sy_cache_config cc{};
  cc.struct_size = sizeof(cc);
  cc.num_layers = m.num_layers();
  cc.kv_heads = static_cast<int32_t>(m.kv_heads());
  cc.head_dim = static_cast<int32_t>(m.head_dim());
  cc.value_head_dim = static_cast<int32_t>(m.value_dim());
  cc.dtype = SY_DTYPE_FLOAT32;
  cc.device = SY_DEVICE_CPU;
  cc.device_index = 0;
  for (const NodePlacement& p : m.executor().placements())
    if (p.op == SY_OP_DOMAIN "::" SY_OP_PAGED_ATTENTION && p.device == Device::CUDA) {
      cc.device = SY_DEVICE_CUDA;
      cc.device_index = device_ ? device_->index() : 0;
    }
  cc.model_fingerprint = model_fingerprint(folder_->model_file(), config_, cc.device == SY_DEVICE_CUDA ? Device::CUDA : Device::CPU);
  // block_size and budget_bytes are reserved (0): each cache manager takes
  // them as its own options, where the manifest checks them.
  cache_manager_ = std::make_unique<PluginCacheManager>(*cache_->entry, cc, cache_->options, host_.get());
  sy_tensor k = cache_manager_->storage(0).first;
  int64_t per_layer = static_cast<int64_t>(dtype_size(static_cast<DType>(k.dtype)));
  for (int32_t i = 0; i < k.rank; ++i) per_layer *= k.dims[i];
  const int64_t total_mb = 2 * per_layer * cc.num_layers / (1024 * 1024);
  SY_CHECK(config_.limits.max_kv_mb <= 0 || total_mb <= config_.limits.max_kv_mb,
           cache_->entry->label() << " holds " << total_mb << " MiB of KV storage, over the limit of " << config_.limits.max_kv_mb
                                  << " MiB (limits.max_kv_mb)");
}

void Session::create_step_engine() {
  if (scheduler_) scheduler_instance_ = std::make_unique<PluginScheduler>(*scheduler_->entry, scheduler_->options, host_.get());
  step_engine_ = std::make_unique<StepEngine>(*model_, *cache_manager_, scheduler_instance_.get(),
                                              StepEngineOptions{config_.max_batch_tokens, config_.max_seqs,
                                                                config_.limits.max_prompt_tokens, config_.limits.max_queue,
                                                                static_cast<int>(std::max<int64_t>(1, config_.limits.max_plugin_failures)),
                                                                config_.scheduler && config_.scheduler->on_failure == "builtin"});
}

// A plugin drafter, or the built-in draft model (its path relative to the manifest).
void Session::attach_drafter() {
  SY_CHECK_KIND(cache_manager_->can_truncate(), ErrorKind::Unsupported,
                drafter_->entry->label() << " needs a cache manager that can roll rejected drafts back: " << cache_->entry->label()
                                         << " has no truncate");
  const ComponentEntry& e = *drafter_->entry;
  const OptionValues& o = drafter_->options;
  auto int_option = [&](const char* name, int64_t fallback) {
    const OptionValue* v = o.find(name);
    return v && std::holds_alternative<int64_t>(*v) ? std::get<int64_t>(*v) : fallback;
  };
  const auto k = static_cast<int32_t>(int_option("k", 4));
  if (!e.library) {
    std::filesystem::path draft(std::get<std::string>(*o.find("model")));
    if (draft.is_relative() && !config_.manifest_path.empty())
      draft = std::filesystem::path(config_.manifest_path).parent_path() / draft;
    const std::string path = draft.lexically_normal().string();
    if (e.name == "heads") {
      SY_CHECK(model_->hidden_states >= 0, e.label() << " drafts from the target's hidden states: " << config_.model
                                                     << "'s LM head is not one the logits-selection pass can split off "
                                                        "(a MatMul or quantized MatMul with constant weights)");
      drafter_instance_ = make_heads_drafter(path, lm_head(), kernels_, threads_.get(), static_cast<int32_t>(int_option("top", 3)));
    } else {
      drafter_instance_ = make_draft_model_drafter(path, kernels_, threads_.get(), k, model_->vocab_size());
    }
  } else {
    drafter_instance_ = make_plugin_drafter(std::make_unique<PluginDrafter>(e, o, host_.get()), model_->vocab_size());
    SY_CHECK(!drafter_instance_->reads_hidden() || model_->hidden_states >= 0,
             e.label() << " reads the target's hidden states: " << config_.model
                       << "'s LM head is not one the logits-selection pass can split off (a MatMul or quantized MatMul with "
                          "constant weights)");
  }
  step_engine_->set_drafter(drafter_instance_.get(), k, config_.drafter->draft_length == "adaptive");
}

LmHead& Session::lm_head() {
  std::call_once(lm_head_once_, [&] { lm_head_ = LmHead::split_off(model_->graph(), kernels_, threads_.get()); });
  SY_CHECK_KIND(lm_head_, ErrorKind::Unsupported,
                config_.model << ": the LM head is not split off from the model (it needs the step engine's logits selection and a "
                                 "MatMul or quantized MatMul head with constant weights)");
  return *lm_head_;
}

// No cache manager: the graph as exported, so nothing that needs the step
// engine may be selected.
void Session::create_baseline() {
  SY_CHECK(!scheduler_, scheduler_->entry->label() << " drives the step engine: select a cache manager ('cache:') "
                                                      "and the attention-fusion pass");
  SY_CHECK(!drafter_, drafter_->entry->label() << " verifies drafts in the step engine: select a cache manager ('cache:') "
                                                  "and the attention-fusion pass");
  SY_CHECK(!model_->paged_attention(), config_.model << ": attention is fused (PagedAttention) but no cache manager is selected: "
                                                        "set 'cache:' (e.g. paged) in the manifest");
  baseline_ = std::make_unique<BaselineGenerator>(*model_);
}

// Structured output: the processor gets the model's vocabulary as the bytes
// each token adds to the text, from the tokenizer the model comes with.
void Session::attach_logits_processor() {
  const ComponentEntry& e = *logits_processor_->entry;
  if (folder_->tokenizer_file().empty()) {
    // The model still runs; only constrained requests are refused, saying why.
    const std::string why = e.label() + " needs the model's tokenizer: none beside " + config_.model + " (set 'tokenizer:' in the manifest)";
    if (step_engine_) step_engine_->set_token_masker(nullptr, why);
    if (baseline_) baseline_->set_token_masker(nullptr, why);
    return;
  }
  const std::shared_ptr<const Tokenizer> tok = folder_->tokenizer();
  const int64_t width = model_->vocab_size() > 0 ? model_->vocab_size() : tok->vocab_size();
  VocabBytes v;
  v.tokens.resize(static_cast<size_t>(width));
  v.special.assign(static_cast<size_t>(width), 1);
  for (int id = 0; id < std::min<int64_t>(width, tok->vocab_size()); ++id) {
    v.tokens[static_cast<size_t>(id)] = tok->token_bytes(id);
    v.special[static_cast<size_t>(id)] = tok->is_special(id) || v.tokens[static_cast<size_t>(id)].empty();
  }
  for (int id : model_->eos_ids())
    if (id >= 0 && id < width) v.stop_tokens.push_back(id);
  token_masker_ = std::make_unique<TokenMasker>(std::make_unique<PluginLogitsProcessor>(e, v, logits_processor_->options, host_.get()));
  if (step_engine_) step_engine_->set_token_masker(token_masker_.get());
  if (baseline_) baseline_->set_token_masker(token_masker_.get());
}

std::vector<GenerationResult> Session::generate(const std::vector<GenerationRequest>& requests, const TokenCallback& on_token) {
  return step_engine_ ? step_engine_->generate(requests, on_token) : baseline_->generate(requests, on_token);
}

std::vector<float> Session::last_logits(const std::vector<int>& prompt) {
  return step_engine_ ? step_engine_->last_logits(prompt) : baseline_->last_logits(prompt);
}

Session::~Session() {
  // Engines first, then the cache manager and kernel instances (which call
  // into their plugins' destroy), then the libraries.
  step_engine_.reset();
  drafter_instance_.reset();
  baseline_.reset();
  token_masker_.reset();
  scheduler_instance_.reset();
  cache_manager_.reset();
  model_.reset();
  plugins_.reset();
}

}  // namespace sy
