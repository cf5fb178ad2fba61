#include "plugin_host/plugin_host.h"

#include "device/device_backend.h"
#include "plugin_host/host_api.h"

namespace sy {
namespace {

// A plugin kernel instance for one node, behind the core's Kernel interface.
class PluginKernel : public Kernel {
 public:
  PluginKernel(std::shared_ptr<PluginLibrary> lib, const sy_kernel_desc* d, const KernelCreateInfo& ci, const HostContext* host)
      : lib_(std::move(lib)), d_(d), host_(host), what_("kernel '" + std::string(d->name) + "' for " + ci.node.display_name()) {
    sy_graph g{const_cast<Graph*>(&ci.graph)};
    sy_kernel_create_info info{};
    info.struct_size = sizeof(info);
    info.graph = &g;
    info.node = static_cast<sy_node_id>(&ci.node - ci.graph.nodes.data());
    info.opset = ci.opset;
    info.device = d->device;
    info.device_index = host_ && host_->device && d->device == SY_DEVICE_CUDA ? host_->device->index() : 0;
    invoke([&] { return d_->create(lib_->info().plugin_data, &info, &state_); }, "create");
  }
  ~PluginKernel() override {
    call_plugin_noexcept(lib_->name(), host_, [&] { d_->destroy(state_); });
  }
  void compute(KernelContext& ctx) override {
    sy_kernel_context c{&ctx};
    invoke([&] { return d_->compute(state_, &c); }, "compute");
  }

 private:
  template <typename F>
  void invoke(F&& f, const char* stage) {
    call_plugin(lib_->name(), host_, what_ + " " + stage, std::forward<F>(f));
  }

  std::shared_ptr<PluginLibrary> lib_;
  const sy_kernel_desc* d_;
  const HostContext* host_;
  std::string what_;
  void* state_ = nullptr;
};

template <typename Desc>
ComponentEntry entry_for(ComponentKind kind, const Desc* d, const std::shared_ptr<PluginLibrary>& lib) {
  ComponentEntry e;
  e.kind = kind;
  e.name = d->name;
  e.version = d->version;
  e.description = d->description ? d->description : "";
  e.provider = lib->name();
  e.library = lib;
  e.desc = d;
  e.options = read_option_schema(d->options, d->num_options, "plugin '" + lib->name() + "': " +
                                                                 component_kind_name(kind) + " '" + d->name + "'");
  return e;
}

}  // namespace

const PluginLibrary& PluginHost::load(const std::string& path, const std::optional<std::string>& sha256) {
  std::shared_ptr<PluginLibrary> lib = PluginLibrary::load(path, sha256);
  for (const auto& other : libraries_)
    SY_CHECK(other->name() != lib->name(), "plugin " << path << ": a plugin named '" << lib->name()
                                                     << "' is already loaded from " << other->path());
  const sy_plugin_info& info = lib->info();
  // Build every entry first, then register: a bad descriptor leaves nothing behind.
  std::vector<ComponentEntry> entries;
  for (int32_t i = 0; i < info.num_passes; ++i) entries.push_back(entry_for(ComponentKind::Pass, info.passes[i], lib));
  for (int32_t i = 0; i < info.num_schedulers; ++i) entries.push_back(entry_for(ComponentKind::Scheduler, info.schedulers[i], lib));
  for (int32_t i = 0; i < info.num_caches; ++i) entries.push_back(entry_for(ComponentKind::Cache, info.caches[i], lib));
  for (int32_t i = 0; i < info.num_drafters; ++i) entries.push_back(entry_for(ComponentKind::Drafter, info.drafters[i], lib));
  for (int32_t i = 0; i < lib->num_logits_processors(); ++i)
    entries.push_back(entry_for(ComponentKind::LogitsProcessor, info.logits_processors[i], lib));
  try {
    for (auto& e : entries) components_.add(std::move(e));
  } catch (...) {
    components_.remove_provider(lib->name());
    throw;
  }
  const HostContext* host = host_;
  for (int32_t i = 0; i < info.num_kernels; ++i) {
    const sy_kernel_desc* d = info.kernels[i];
    KernelDef def;
    def.domain = d->domain;
    def.op_type = d->op_type;
    def.device = d->device == SY_DEVICE_CUDA ? Device::CUDA : Device::CPU;
    for (int32_t t = 0; t < d->num_dtypes; ++t) def.dtypes.push_back(static_cast<DType>(d->dtypes[t]));
    def.type_input = d->type_input;
    def.priority = d->priority;
    def.provider = lib->name();
    if (SY_HAS_FIELD(d, sy_kernel_desc, capabilities)) def.capabilities = d->capabilities;
    def.create = [lib, d, host](const KernelCreateInfo& ci) -> std::unique_ptr<Kernel> {
      return std::make_unique<PluginKernel>(lib, d, ci, host);
    };
    kernels_.add(std::move(def));
  }
  libraries_.push_back(lib);
  return *lib;
}

void PluginHost::unload(const std::string& plugin_name) {
  kernels_.remove_provider(plugin_name);
  components_.remove_provider(plugin_name);
  std::erase_if(libraries_, [&](const auto& l) { return l->name() == plugin_name; });
}

void PluginHost::unload_all() {
  while (!libraries_.empty()) unload(libraries_.back()->name());
}

}  // namespace sy
