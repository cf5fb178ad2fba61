#include "engine/session.h"

#include "device/device_registry.h"
#include "switchyard/plugin.h"

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
  std::unique_ptr<Session> s(new Session());
  s->config_ = config;
  SY_CHECK(!config.model.empty(), (config.manifest_path.empty() ? std::string("no model given")
                                                                 : config.manifest_path + ": no model (set 'model:' or pass --model)"));
  s->threads_ = std::make_unique<ThreadPool>(config.threads);
  s->kernels_ = KernelRegistry::with_builtins();
  s->components_ = ComponentRegistry::with_builtins();
  s->host_ = std::make_unique<HostContext>(HostContext{s->threads_.get(), nullptr});
  s->plugins_ = std::make_unique<PluginHost>(s->kernels_, s->components_, s->host_.get());
  for (const PluginSpec& p : config.plugins) {
    try {
      s->plugins_->load(p.path, p.sha256);
    } catch (const Error& e) {
      SY_THROW_KIND(e.kind(), p.where << ": " << e.what());
    }
  }
  check_providers(config.kernels, s->kernels_, config.manifest_path);
  for (const auto& sel : config.passes) s->passes_.push_back(select(s->components_, ComponentKind::Pass, sel));
  if (config.scheduler) s->scheduler_ = select(s->components_, ComponentKind::Scheduler, *config.scheduler);
  if (config.cache) s->cache_ = select(s->components_, ComponentKind::Cache, *config.cache);
  if (config.drafter) s->drafter_ = select(s->components_, ComponentKind::Drafter, *config.drafter);

  std::vector<std::unique_ptr<GraphPass>> passes;
  std::vector<GraphPass*> pass_ptrs;
  for (const auto& p : s->passes_) {
    passes.push_back(instantiate_pass(*p.entry, p.options, s->host_.get()));
    pass_ptrs.push_back(passes.back().get());
  }
  // The step engine samples from one row per sequence (or its drafts'):
  // the LM head runs on those rows only.
  std::unique_ptr<GraphPass> select_logits;
  if (config.cache) {
    select_logits = make_select_logits_pass();
    pass_ptrs.push_back(select_logits.get());
  }
  ModelOptions mo;
  mo.simplify = config.simplify;
  mo.max_context = config.max_context;
  {
    const DeviceSpec spec = parse_device_spec(config.device);
    const bool wants_cuda = spec.automatic || spec.kind == Device::CUDA;
    const DeviceSpec resolved = resolve_device(spec, wants_cuda ? probe_cuda() : DeviceProbe{});
    s->device_ = open_device(resolved);
    s->host_->device = s->device_;
    register_device_kernels(s->kernels_, resolved.kind);
    mo.executor.device = resolved.kind;
    mo.executor.backend = s->device_;
  }
  mo.executor.forbidden_providers = config.kernels.forbid;
  mo.executor.pinned_providers = config.kernels.pin;
  mo.import.max_file_bytes = config.limits.max_model_bytes;
  mo.import.max_tensors = config.limits.max_tensors;
  mo.import.max_graph_depth = config.limits.max_graph_depth;
  s->model_ = DecoderModel::load(config.model, s->kernels_, s->threads_.get(), mo, pass_ptrs, &s->report_);
  DecoderModel& m = *s->model_;
  if (s->cache_) {
    SY_CHECK(m.paged_attention(), s->cache_->entry->label()
                                      << " needs the model's attention fused: add the 'attention-fusion' pass (plugin "
                                         "switchyard-attention) to 'passes:'");
    sy_cache_config cc{};
    cc.struct_size = sizeof(cc);
    cc.num_layers = m.num_layers();
    cc.kv_heads = static_cast<int32_t>(m.kv_heads());
    cc.head_dim = static_cast<int32_t>(m.head_dim());
    cc.dtype = SY_DTYPE_FLOAT32;
    // The KV cache lives where the attention kernels run.
    cc.device = SY_DEVICE_CPU;
    cc.device_index = 0;
    for (const NodePlacement& p : m.executor().placements())
      if (p.op == SY_OP_DOMAIN "::" SY_OP_PAGED_ATTENTION && p.device == Device::CUDA) {
        cc.device = SY_DEVICE_CUDA;
        cc.device_index = s->device_ ? s->device_->index() : 0;
      }
    // block_size and budget_bytes are reserved (0): each cache manager takes
    // them as its own options, where the manifest checks them.
    s->cache_manager_ = std::make_unique<PluginCacheManager>(*s->cache_->entry, cc, s->cache_->options, s->host_.get());
    {
      // The KV storage the cache manager took, against limits.max_kv_mb.
      sy_tensor k = s->cache_manager_->storage(0).first;
      int64_t per_layer = static_cast<int64_t>(dtype_size(static_cast<DType>(k.dtype)));
      for (int32_t i = 0; i < k.rank; ++i) per_layer *= k.dims[i];
      const int64_t total_mb = 2 * per_layer * cc.num_layers / (1024 * 1024);
      SY_CHECK(config.limits.max_kv_mb <= 0 || total_mb <= config.limits.max_kv_mb,
               s->cache_->entry->label() << " holds " << total_mb << " MiB of KV storage, over the limit of " << config.limits.max_kv_mb
                                         << " MiB (limits.max_kv_mb)");
    }
    if (s->scheduler_)
      s->scheduler_instance_ = std::make_unique<PluginScheduler>(*s->scheduler_->entry, s->scheduler_->options, s->host_.get());
    s->step_engine_ = std::make_unique<StepEngine>(m, *s->cache_manager_, s->scheduler_instance_.get(),
                                                   StepEngineOptions{config.max_batch_tokens, config.max_seqs, config.limits.max_prompt_tokens, config.limits.max_queue});
    if (s->drafter_) {
      SY_CHECK_KIND(s->cache_manager_->can_truncate(), ErrorKind::Unsupported,
                    s->drafter_->entry->label() << " needs a cache manager that can roll rejected drafts back: "
                                                << s->cache_->entry->label() << " has no truncate");
      const ComponentEntry& e = *s->drafter_->entry;
      const OptionValues& o = s->drafter_->options;
      auto int_option = [&](const char* name, int64_t fallback) {
        const OptionValue* v = o.find(name);
        return v && std::holds_alternative<int64_t>(*v) ? std::get<int64_t>(*v) : fallback;
      };
      if (!e.library) {
        std::filesystem::path draft(std::get<std::string>(*o.find("model")));
        if (draft.is_relative() && !config.manifest_path.empty()) draft = std::filesystem::path(config.manifest_path).parent_path() / draft;
        s->drafter_instance_ = make_draft_model_drafter(draft.lexically_normal().string(), s->kernels_, s->threads_.get(),
                                                         static_cast<int32_t>(int_option("k", 4)), m.vocab_size());
      } else {
        s->drafter_instance_ = make_plugin_drafter(std::make_unique<PluginDrafter>(e, o, s->host_.get()), m.vocab_size());
      }
      s->step_engine_->set_drafter(s->drafter_instance_.get(), static_cast<int32_t>(int_option("k", 4)));
    }
  } else {
    SY_CHECK(!s->scheduler_, s->scheduler_->entry->label() << " drives the step engine: select a cache manager ('cache:') "
                                                              "and the attention-fusion pass");
    SY_CHECK(!s->drafter_, s->drafter_->entry->label() << " verifies drafts in the step engine: select a cache manager ('cache:') "
                                                          "and the attention-fusion pass");
    SY_CHECK(!m.paged_attention(), config.model << ": attention is fused (PagedAttention) but no cache manager is selected: "
                                                   "set 'cache:' (e.g. paged) in the manifest");
    s->baseline_ = std::make_unique<BaselineGenerator>(m);
  }
  return s;
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
  scheduler_instance_.reset();
  cache_manager_.reset();
  model_.reset();
  plugins_.reset();
}

}  // namespace sy
