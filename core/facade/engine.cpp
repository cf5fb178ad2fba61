#include "facade/engine.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <filesystem>
#include <fstream>
#include <map>

#include "device/device_registry.h"
#include "base/dtype.h"
#include "engine/session.h"
#include "plugin_host/components.h"
#include "facade/kv_memory.h"
#include "graph/gguf_model.h"
#include "graph/onnx_export.h"
#include "text/gguf_vocab.h"
#include "switchyard/plugin.h"
#ifdef SWITCHYARD_HAS_CUDA
#include "device/cuda/cuda_backend.h"
#endif

namespace sy {

namespace {

// The manifest profile with the options' overrides on top.
EngineConfig resolve(const EngineOptions& o) {
  EngineConfig cfg;
  if (!o.manifest.empty()) cfg = Manifest::load(o.manifest).resolve(o.profile);
  else SY_CHECK(o.profile.empty(), "profile '" << o.profile << "' given without a manifest to find it in");
  if (!o.model.empty()) cfg.model = o.model;
  if (!o.tokenizer.empty()) cfg.tokenizer = o.tokenizer;
  if (!o.chat_template.empty()) cfg.chat_template = o.chat_template;
  if (!o.tool_parser.empty()) cfg.tool_parser = o.tool_parser;
  SY_CHECK(!cfg.model.empty(), "no model: give one (--model) or a manifest with 'model:'");
  if (o.threads > 0) cfg.threads = o.threads;
  if (!o.device.empty()) {
    check_device_spec(o.device);
    cfg.device = o.device;
  }
  if (o.max_context > 0) cfg.max_context = o.max_context;
  if (o.gguf_dequantize) cfg.gguf_dequantize = true;
  for (const std::string& name : o.without_passes) {
    auto& passes = cfg.passes;
    const size_t before = passes.size();
    passes.erase(std::remove_if(passes.begin(), passes.end(), [&](const ComponentSelection& s) { return s.name == name; }), passes.end());
    SY_CHECK(passes.size() < before, "profile '" << o.profile << "' has no '" << name << "' pass to leave out");
  }
  if (o.graph_only) {
    cfg.scheduler.reset();
    cfg.drafter.reset();
  }
  return cfg;
}

nlohmann::json component_json(const std::optional<SelectedComponent>& c) {
  return c ? nlohmann::json{{"name", c->entry->name}, {"provider", c->entry->provider}, {"options", c->options.str()}} : nlohmann::json();
}

nlohmann::json plugin_json(const PluginLibrary& lib) {
  nlohmann::json pj{{"name", lib.name()},
                    {"version", lib.version()},
                    {"abi", std::to_string(lib.abi_major()) + "." + std::to_string(lib.abi_minor())},
                    {"path", lib.path()},
                    {"sha256", lib.sha256()}};
  const sy_plugin_info& info = lib.info();
  for (int32_t i = 0; i < info.num_passes; ++i) pj["passes"].push_back({{"name", info.passes[i]->name}, {"version", info.passes[i]->version}});
  for (int32_t i = 0; i < info.num_kernels; ++i) {
    const sy_kernel_desc* k = info.kernels[i];
    pj["kernels"].push_back({{"name", k->name},
                             {"version", k->version},
                             {"op", std::string(k->domain).empty() ? std::string(k->op_type) : std::string(k->domain) + "::" + k->op_type},
                             {"device", k->device == SY_DEVICE_CUDA ? "cuda" : "cpu"},
                             {"priority", k->priority}});
  }
  for (int32_t i = 0; i < info.num_schedulers; ++i)
    pj["schedulers"].push_back({{"name", info.schedulers[i]->name}, {"version", info.schedulers[i]->version}});
  for (int32_t i = 0; i < info.num_caches; ++i) pj["caches"].push_back({{"name", info.caches[i]->name}, {"version", info.caches[i]->version}});
  for (int32_t i = 0; i < info.num_drafters; ++i)
    pj["drafters"].push_back({{"name", info.drafters[i]->name}, {"version", info.drafters[i]->version}});
  return pj;
}

}  // namespace

void check_device_spec(const std::string& spec) { parse_device_spec(spec); }

struct Engine::Impl {
  std::unique_ptr<Session> session;
  std::once_flag embedding_once;
  EmbeddingConvention embedding;
  StepEngine& step_engine(const char* what) const {
    StepEngine* se = session->step_engine();
    SY_CHECK(se, what << " runs on the step engine; select a cache manager ('cache:') and the attention-fusion pass in the profile");
    return *se;
  }
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

std::unique_ptr<Engine> Engine::open(const EngineOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->session = Session::create(resolve(options));
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

const std::string& Engine::model_path() const { return impl_->session->config().model; }
const std::string& Engine::manifest_path() const { return impl_->session->config().manifest_path; }
const std::string& Engine::profile() const { return impl_->session->config().profile; }
const std::string& Engine::tokenizer_path() const { return impl_->session->config().tokenizer; }
const std::string& Engine::fallback_reason() const { return impl_->session->fallback_reason(); }
int64_t Engine::vocab_size() const { return impl_->session->model().vocab_size(); }
int64_t Engine::max_context() const { return impl_->session->model().max_context(); }
const ModelFolder& Engine::folder() const { return impl_->session->folder(); }
SamplingDefaults Engine::recommended_sampling() const { return folder().sampling_defaults(); }

std::vector<GenerationResult> Engine::generate(const std::vector<GenerationRequest>& requests, const TokenCallback& on_token) {
  return impl_->session->generate(requests, on_token);
}

std::vector<float> Engine::last_logits(const std::vector<int>& prompt) { return impl_->session->last_logits(prompt); }

std::vector<float> Engine::prompt_logits(const std::vector<int>& prompt) {
  Tensor t = impl_->step_engine("prompt_logits").prompt_logits(prompt);
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

std::vector<TokenLogprobs> Engine::prompt_logprobs(const std::vector<int>& prompt, int top) {
  SY_CHECK(top >= 0 && top <= 20, "prompt logprobs: top must be in [0, 20], got " << top);
  if (prompt.size() < 2) return {};
  const std::vector<float> logits = prompt_logits(prompt);
  const int64_t vocab = static_cast<int64_t>(logits.size() / prompt.size());
  std::vector<TokenLogprobs> out;
  out.reserve(prompt.size() - 1);
  for (size_t i = 1; i < prompt.size(); ++i) {
    SY_CHECK(prompt[i] >= 0 && prompt[i] < vocab, "prompt logprobs: token " << prompt[i] << " is outside the vocabulary of " << vocab);
    out.push_back(token_logprobs(logits.data() + static_cast<int64_t>(i - 1) * vocab, static_cast<int>(vocab), prompt[i], top));
  }
  return out;
}

const EmbeddingConvention& Engine::embedding_convention() const {
  std::call_once(impl_->embedding_once, [&] { impl_->embedding = folder().embedding_convention(); });
  return impl_->embedding;
}

std::vector<float> Engine::embedding(const std::vector<int>& prompt) {
  const EmbeddingConvention& c = embedding_convention();
  const Tensor h = impl_->step_engine("embeddings").prompt_hidden_states(prompt);
  const int64_t T = h.dim(0), H = h.dim(1);
  const float* rows = h.data<float>();
  std::vector<double> sum(static_cast<size_t>(H), 0.0);
  const int64_t first = c.pooling == Pooling::Last ? T - 1 : 0, last = c.pooling == Pooling::Cls ? 1 : T;
  for (int64_t t = first; t < last; ++t)
    for (int64_t j = 0; j < H; ++j) sum[static_cast<size_t>(j)] += rows[t * H + j];
  const double count = static_cast<double>(last - first);
  double norm = 0.0;
  for (double& v : sum) {
    v /= count;
    norm += v * v;
  }
  norm = std::sqrt(norm);
  // A zero vector stays zero (no division by zero).
  const double scale = c.normalize && norm > 0.0 ? 1.0 / norm : 1.0;
  std::vector<float> out(static_cast<size_t>(H));
  for (size_t j = 0; j < out.size(); ++j) out[j] = static_cast<float>(sum[j] * scale);
  return out;
}

std::vector<float> Engine::hidden_states(const std::vector<int>& prompt, int64_t* dim) {
  const Tensor h = impl_->step_engine("hidden states").prompt_hidden_states(prompt);
  *dim = h.dim(1);
  return std::vector<float>(h.data<float>(), h.data<float>() + h.numel());
}

std::vector<float> Engine::project_hidden(const float* rows, int64_t n, int64_t dim, int64_t* vocab) {
  SY_CHECK(n > 0 && dim > 0, "LM head: " << n << " rows of " << dim << " values: both must be positive");
  const Tensor in = Tensor::from<float>(Shape{n, dim}, std::span<const float>(rows, static_cast<size_t>(n * dim)));
  const Tensor logits = impl_->session->lm_head().project(in);
  *vocab = logits.dim(1);
  return std::vector<float>(logits.data<float>(), logits.data<float>() + logits.numel());
}

bool Engine::has_step_engine() const { return impl_->session->step_engine() != nullptr; }

std::future<GenerationResult> Engine::submit(const GenerationRequest& request, std::function<void(const GenerationResult&)> on_finish) {
  StepEngine::Callbacks cb;
  if (on_finish) cb.on_finish = [f = std::move(on_finish)](uint64_t, const GenerationResult& r) { f(r); };
  std::future<GenerationResult> result;
  impl_->step_engine("submit").submit(request, std::move(cb), &result);
  return result;
}

uint64_t Engine::submit(const GenerationRequest& request, RequestCallbacks callbacks) {
  return impl_->step_engine("submit").submit(request, std::move(callbacks));
}

void Engine::cancel(uint64_t id) { impl_->step_engine("cancel").cancel(id); }

ConstraintMetrics Engine::constraint_metrics() const {
  const TokenMasker* masker = impl_->session->token_masker();
  return masker ? masker->metrics() : ConstraintMetrics{};
}

int32_t Engine::kv_block_size() const { return impl_->step_engine("the KV cache").kv_block_size(); }

void Engine::enable_kv_events(size_t capacity) {
  StepEngine& se = impl_->step_engine("KV-cache events");
  SY_CHECK_KIND(se.cache().has_events(), ErrorKind::Unsupported,
                "the cache manager (" << se.cache().label() << ") reports no KV-cache events (the prefix-caching cache does)");
  se.kv_events().enable(capacity);
}

std::vector<KvEvent> Engine::poll_kv_events(size_t max) { return impl_->step_engine("KV-cache events").kv_events().poll(max); }
int32_t Engine::kv_events_device() const { return impl_->step_engine("KV-cache events").kv_events().device(); }
std::string Engine::export_kv(const std::vector<int32_t>& ids) { return impl_->step_engine("KV export").export_kv(ids); }
int32_t Engine::import_kv(const std::string& data) { return impl_->step_engine("KV import").import_kv(data); }

StepEngineMetrics Engine::metrics() const {
  const StepEngine* se = impl_->session->step_engine();
  return se ? se->metrics() : StepEngineMetrics{};
}

EngineFootprint Engine::footprint() const {
  Session& s = *impl_->session;
  EngineFootprint f;
  f.threads = s.threads().size();
  f.weight_bytes = s.report().weight_bytes;
  f.kv_bytes_per_token =
      static_cast<int64_t>(s.model().num_layers()) * s.model().kv_heads() * (s.model().head_dim() + s.model().value_dim()) * static_cast<int64_t>(sizeof(float));
  if (PluginCacheManager* cm = s.cache_manager()) {
    // As the cache stores it (float16 halves it, int8 / fp8 rows carry a scale).
    f.kv_bytes_per_token = 0;
    for (int32_t l = 0; l < s.model().num_layers(); ++l) {
      const auto [k, v] = cm->storage(l);
      for (const sy_tensor& t : {k, v}) f.kv_bytes_per_token += t.dims[1] * t.dims[3] * static_cast<int64_t>(dtype_size(static_cast<DType>(t.dtype)));
    }
  }
  return f;
}

OnnxExportSummary Engine::export_onnx(const std::string& path) const {
  ExportSummary s = export_onnx_file(impl_->session->model().graph(), path);
  return OnnxExportSummary{s.nodes, s.initializers, s.initializer_bytes, s.external_data};
}

nlohmann::json Engine::describe() const {
  Session& session = *impl_->session;
  const Graph& g = session.model().graph();
  const PreparedGraphReport& rep = session.report();
  auto value = [&](ValueId id, const std::string& name) {
    const Value& v = g.values[static_cast<size_t>(id)];
    return nlohmann::json{{"name", name}, {"dtype", dtype_name(v.dtype)}, {"shape", v.shape_str()}};
  };
  nlohmann::json j;
  j["model"] = session.config().model;
  if (!session.config().manifest_path.empty()) {
    j["manifest"] = session.config().manifest_path;
    j["profile"] = session.config().profile;
  }
  for (ValueId id : g.inputs) j["inputs"].push_back(value(id, g.values[static_cast<size_t>(id)].name));
  for (const auto& o : g.outputs) j["outputs"].push_back(value(o.value, o.name));
  j["opsets"] = g.opsets;
  if (rep.gguf)
    j["gguf"] = {{"architecture", rep.gguf->architecture},
                 {"stored_types", rep.gguf->stored_types},
                 {"kept_quantized", rep.gguf->kept_quantized},
                 {"dequantized", rep.gguf->dequantized},
                 {"note", rep.gguf->kept_quantized > 0 ? "block-quantized matrices run as MatMulNBits on their own codes and scales; float "
                                                         "types and the embedding table are float32"
                                                       : "every weight dequantized to float32"}};
  j["parameters"] = rep.parameters;
  j["parameter_bytes"] = rep.parameter_bytes;
  j["weight_bytes"] = rep.weight_bytes;
  j["nodes_imported"] = rep.imported_nodes;
  j["nodes_planned"] = g.live_node_count();
  j["plugins"] = nlohmann::json::array();
  for (const auto& lib : session.plugins().libraries()) j["plugins"].push_back(plugin_json(*lib));
  j["passes"] = nlohmann::json::array();
  for (const auto& sp : session.passes())
    j["passes"].push_back({{"name", sp.entry->name}, {"provider", sp.entry->provider}, {"options", sp.options.str()}});
  j["scheduler"] = component_json(session.scheduler());
  j["cache"] = component_json(session.cache());
  j["drafter"] = component_json(session.drafter());
  j["logits_processor"] = component_json(session.logits_processor());
  j["step_engine"] = session.step_engine() != nullptr;
  if (!session.fallback_reason().empty()) j["fallback"] = session.fallback_reason();
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& [stage, counts] : rep.op_counts_after) stages.push_back({{"stage", stage}, {"op_counts", counts}});
  j["op_counts"] = stages;
  std::map<std::string, int> providers;
  for (const auto& pl : session.model().executor().placements())
    ++providers[pl.provider + " " + pl.op + (pl.device == Device::CPU ? "" : std::string(" @") + device_name(pl.device))];
  j["kernels_used"] = providers;
  if (DeviceBackend* dev = session.device())
    j["device"] = {{"description", dev->description()},
                   {"copies_per_forward", session.model().executor().transfer_plan().copies_per_run()}};
  // What attention fusion made of each layer, and what proved it.
  j["attention"] = nlohmann::json::array();
  for (const Node& n : g.nodes) {
    if (n.dead || n.domain != SY_OP_DOMAIN || n.op_type != SY_OP_PAGED_ATTENTION) continue;
    j["attention"].push_back({{"layer", n.attr_int("layer", -1)},
                              {"scale", n.attr_float("scale", 0.f)},
                              {"softcap", n.attr_float("softcap", 0.f)},
                              {"window", n.attr_int("window", 0)},
                              {"kv_heads", n.attr_int("kv_heads", 0)},
                              {"head_dim", n.attr_int("head_dim", 0)},
                              {"value_head_dim", n.attr_int("value_head_dim", n.attr_int("head_dim", 0))},
                              // > 0: latent attention (the cache holds the latent and the rotary key)
                              {"latent_dim", n.attr_int("latent_dim", 0)},
                              {"layout", n.attr_int("latent_dim", 0) > 0   ? "latent"
                                         : n.attr_int("num_heads", 0) > 0 ? "token-major"
                                                                          : "heads-major"},
                              {"rotary", n.inputs.size() > 3 && n.inputs[3] != kNoValue
                                             ? (n.attr_int("rotary_interleaved", 0) ? "interleaved" : "halves")
                                             : "none"},
                              {"sinks", n.inputs.size() > 5 && n.inputs[5] != kNoValue}});
  }
  std::sort(j["attention"].begin(), j["attention"].end(), [](const auto& a, const auto& b) { return a["layer"] < b["layer"]; });
  j["probes"] = nlohmann::json::array();
  for (const ProbeReport& pr : rep.probes)
    j["probes"].push_back({{"pass", pr.pass},
                           {"cases", pr.cases},
                           {"regions", pr.regions},
                           {"max_deviation", pr.max_deviation},
                           // null: not needed, the logits were within the strict tolerance
                           {"logit_sensitivity", pr.logit_sensitivity < 0 ? nlohmann::json() : nlohmann::json(pr.logit_sensitivity)},
                           {"ms", pr.ms},
                           {"skipped", pr.skipped}});
  return j;
}

nlohmann::json Engine::kv_memory(int64_t sequence_tokens, int64_t memory_bytes) const {
  SY_CHECK(sequence_tokens > 0 && memory_bytes > 0, "kv_memory: the sequence length and the memory must be positive");
  return kv_memory_report(*impl_->session, sequence_tokens, memory_bytes);
}

nlohmann::json probe_devices(bool measure_copy_bandwidth) {
  nlohmann::json out;
  out["cpu"] = "available";
#ifdef SWITCHYARD_HAS_CUDA
  out["cuda_build"] = true;
#else
  out["cuda_build"] = false;
#endif
  DeviceProbe probe = probe_cuda();
  out["cuda_devices"] = probe.count;
  if (probe.count == 0) out["cuda_unavailable"] = probe.why_none;
  nlohmann::json list = nlohmann::json::array();
  for (int i = 0; i < probe.count; ++i) {
    auto dev = open_device(DeviceSpec{Device::CUDA, i, false});
    nlohmann::json j{{"device", "cuda:" + std::to_string(i)}, {"description", dev->description()}};
#ifdef SWITCHYARD_HAS_CUDA
    auto& cuda = static_cast<CudaBackend&>(*dev);
    j["peak_bandwidth_gbs"] = cuda.theoretical_bandwidth_gbs();
    if (measure_copy_bandwidth) j["copy_bandwidth_gbs"] = cuda.measure_copy_bandwidth_gbs();
#else
    (void)measure_copy_bandwidth;
#endif
    list.push_back(j);
  }
  out["devices"] = list;
  return out;
}

nlohmann::json convert_gguf(const std::string& gguf_path, const std::string& out_dir, bool dequantize) {
  namespace fs = std::filesystem;
  SY_CHECK(is_gguf_file(gguf_path), gguf_path << ": not a GGUF file");
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  SY_CHECK(fs::is_directory(out_dir), out_dir << ": cannot create the folder" << (ec ? ": " + ec.message() : ""));
  const fs::path dir(out_dir);
  GgufModelOptions options;
  options.dequantize = dequantize;
  const GgufModelSummary s = write_gguf_as_onnx(gguf_path, (dir / "model.onnx").string(), options);
  const GgufTokenizerConfig& t = gguf_tokenizer_for(gguf_path);
  auto write = [&](const char* name, const nlohmann::ordered_json& j) {
    std::ofstream out(dir / name);
    out << j.dump(2) << "\n";
    SY_CHECK(out.good(), (dir / name).string() << ": writing failed");
  };
  nlohmann::ordered_json config = s.config;
  nlohmann::ordered_json gen;
  if (t.bos_id) config["bos_token_id"] = gen["bos_token_id"] = *t.bos_id;
  std::vector<int> eos = ModelFolder::open(gguf_path).eos_ids();
  config["eos_token_id"] = eos.size() == 1 ? nlohmann::ordered_json(eos[0]) : nlohmann::ordered_json(eos);
  gen["eos_token_id"] = config["eos_token_id"];
  write("config.json", config);
  write("generation_config.json", gen);
  write("tokenizer.json", t.tokenizer_json);
  write("tokenizer_config.json", t.tokenizer_config());
  nlohmann::json out{{"architecture", s.architecture}, {"stored_types", s.stored_types}, {"kept_quantized", s.kept_quantized},
                     {"dequantized", s.dequantized}};
  for (const char* f : {"model.onnx", "model.onnx.data", "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"})
    out["files"].push_back((dir / f).string());
  return out;
}

}  // namespace sy
