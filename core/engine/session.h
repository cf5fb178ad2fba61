// Everything one engine configuration needs, built from an EngineConfig (a
// manifest profile): the thread pool, the registries with built-ins and the
// plugins' components, the passes in order, the planned model, and the
// selected scheduler / cache manager / drafter instances.
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/decoder_model.h"
#include "engine/generator.h"
#include "engine/lm_head.h"
#include "engine/step_engine.h"
#include "manifest/manifest.h"
#include "plugin_host/plugin_host.h"

namespace sy {

struct SelectedComponent {
  const ComponentEntry* entry;
  OptionValues options;
};

class Session {
 public:
  // Throws naming the manifest line for unknown components, bad options,
  // unknown kernel providers; plugin and model errors name their files.
  // With config.unfused_fallback, a configuration that cannot take the
  // model is replaced by the graph as exported (see fallback_reason).
  static std::unique_ptr<Session> create(const EngineConfig& config);
  ~Session();

  // Runs requests in the mode the configuration selects: the step engine
  // when a cache manager is selected (with fused attention), else the
  // baseline padded batch.
  std::vector<GenerationResult> generate(const std::vector<GenerationRequest>& requests, const TokenCallback& on_token = {});
  std::vector<float> last_logits(const std::vector<int>& prompt);
  StepEngine* step_engine() { return step_engine_.get(); }

  DecoderModel& model() { return *model_; }
  // The model argument with its tokenizer, chat template, eos ids and
  // defaults (the manifest's 'tokenizer:' and 'chat_template:' on top).
  const ModelFolder& folder() const { return *folder_; }
  ThreadPool& threads() { return *threads_; }
  // The accelerator the model runs on; null on the CPU.
  DeviceBackend* device() const { return device_.get(); }
  const KernelRegistry& kernels() const { return kernels_; }
  const ComponentRegistry& components() const { return components_; }
  const PluginHost& plugins() const { return *plugins_; }
  const EngineConfig& config() const { return config_; }
  const PreparedGraphReport& report() const { return report_; }
  // Why the configuration's passes or cache manager were dropped for the
  // graph as exported ("" when they were not).
  const std::string& fallback_reason() const { return fallback_reason_; }
  // The step engine's KV-cache manager (null in baseline mode).
  PluginCacheManager* cache_manager() const { return cache_manager_.get(); }
  const std::vector<SelectedComponent>& passes() const { return passes_; }
  const std::optional<SelectedComponent>& scheduler() const { return scheduler_; }
  const std::optional<SelectedComponent>& cache() const { return cache_; }
  const std::optional<SelectedComponent>& drafter() const { return drafter_; }
  const std::optional<SelectedComponent>& logits_processor() const { return logits_processor_; }
  // Structured output's processor (null without 'logits_processor:').
  TokenMasker* token_masker() const { return token_masker_.get(); }
  // The model's LM head split off (engine/lm_head.h), made on first use;
  // throws naming why when the head cannot be split off.
  LmHead& lm_head();

 private:
  Session() = default;
  static std::unique_ptr<Session> create_exactly(const EngineConfig& config);
  // The stages of create, in order.
  void load_plugins();
  void select_components();
  void open_device();
  void prepare_model();
  void create_cache_manager();
  void create_step_engine();
  void attach_drafter();
  void create_baseline();
  void attach_logits_processor();

  // Declaration order is destruction order reversed: the model (holding
  // plugin kernel instances) goes first, the libraries after it.
  EngineConfig config_;
  std::string fallback_reason_;
  std::unique_ptr<ThreadPool> threads_;
  std::shared_ptr<DeviceBackend> device_;
  std::unique_ptr<HostContext> host_;  // what plugin calls run with: threads_ and device_
  KernelRegistry kernels_;
  ComponentRegistry components_;
  std::unique_ptr<PluginHost> plugins_;
  std::vector<SelectedComponent> passes_;
  std::optional<SelectedComponent> scheduler_, cache_, drafter_, logits_processor_;
  PreparedGraphReport report_;
  std::optional<ModelFolder> folder_;
  std::unique_ptr<DecoderModel> model_;
  std::once_flag lm_head_once_;
  std::unique_ptr<LmHead> lm_head_;  // before the drafter, which may score with it
  std::unique_ptr<PluginCacheManager> cache_manager_;
  std::unique_ptr<PluginScheduler> scheduler_instance_;
  std::unique_ptr<Drafter> drafter_instance_;
  std::unique_ptr<TokenMasker> token_masker_;
  std::unique_ptr<StepEngine> step_engine_;
  std::unique_ptr<BaselineGenerator> baseline_;
};

}  // namespace sy
