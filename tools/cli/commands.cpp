#include "commands.h"

#include "cli_support.h"

#include <algorithm>
#include <boost/program_options.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/generator.h"
#include "engine/session.h"
#include "synth/synth_model.h"
#include "bench/report.h"
#include "http_bench.h"
#include <fstream>
#include "graph/onnx_import.h"
#include "tokenizer/tokenizer.h"
#include "chat/chat_template.h"
#include "engine/model_io.h"
#include "switchyard/plugin.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace sy::cli {

int cmd_generate(const std::vector<std::string>& args) {
  EngineFlags mf;
  std::string tokenizer_path, prompt_ids, system_prompt, chat_template_file;
  bool chat = false;
  std::vector<std::string> prompts;
  GenerationRequest req;
  bool json = false, ignore_eos = false;
  po::options_description d("generate options");
  d.add_options()("help,h", "show this help");
  mf.add(d);
  d.add_options()("tokenizer,t", po::value(&tokenizer_path), "llama2.c tokenizer (default: beside the model)")(
      "prompt,p", po::value(&prompts)->composing(), "prompt text (repeat for a batch)")(
      "prompt-ids", po::value(&prompt_ids), "prompt as comma-separated token ids")(
      "max-tokens,n", po::value(&req.max_tokens)->default_value(256), "tokens to generate at most")(
      "temperature", po::value(&req.sampling.temperature)->default_value(0.f), "0: greedy")(
      "top-k", po::value(&req.sampling.top_k)->default_value(0), "0: off")(
      "top-p", po::value(&req.sampling.top_p)->default_value(1.f), "1: off")(
      "seed", po::value(&req.sampling.seed)->default_value(0), "random seed for sampling")(
      "ignore-eos", po::bool_switch(&ignore_eos), "keep generating past the end-of-sequence token")(
      "chat", po::bool_switch(&chat), "send the prompt as a user message through the model's chat template")(
      "system", po::value(&system_prompt), "with --chat: a system message first")(
      "chat-template", po::value(&chat_template_file), "with --chat: this template (.jinja or .json) instead of the model folder's")(
      "min-p", po::value(&req.sampling.min_p)->default_value(0.f), "0: off")(
      "presence-penalty", po::value(&req.sampling.presence_penalty)->default_value(0.f), "OpenAI's, [-2, 2]")(
      "frequency-penalty", po::value(&req.sampling.frequency_penalty)->default_value(0.f), "OpenAI's, [-2, 2]")(
      "repetition-penalty", po::value(&req.sampling.repetition_penalty)->default_value(1.f), "Hugging Face's; 1: off")(
      "json", po::bool_switch(&json), "print one JSON object per prompt");
  auto p = parse(args, d,
                 "usage: switchyard generate (--model M | --manifest F [--profile P]) [--tokenizer T] "
                 "(--prompt TEXT | --prompt-ids 1,2,3) [options]");
  if (p.help) return 0;
  SY_CHECK(prompts.empty() || prompt_ids.empty(), "give --prompt or --prompt-ids, not both");
  SY_CHECK(!chat || !prompts.empty(), "--chat needs --prompt (the user message)");
  SY_CHECK(chat || (system_prompt.empty() && chat_template_file.empty()), "--system and --chat-template go with --chat");
  req.stop_at_eos = !ignore_eos;

  EngineConfig cfg = mf.config();
  auto session = Session::create(cfg);
  // Options left at their defaults take the model's recommended sampling.
  if (const SamplingDefaults rec = model_sampling_defaults(cfg.model); !rec.empty()) {
    auto unset = [&](const char* opt) { return p.vm.count(opt) == 0 || p.vm[opt].defaulted(); };
    if (rec.temperature && unset("temperature")) req.sampling.temperature = *rec.temperature;
    if (rec.top_p && unset("top-p")) req.sampling.top_p = *rec.top_p;
    if (rec.top_k && unset("top-k")) req.sampling.top_k = *rec.top_k;
    if (rec.min_p && unset("min-p")) req.sampling.min_p = *rec.min_p;
    if (rec.repetition_penalty && unset("repetition-penalty")) req.sampling.repetition_penalty = *rec.repetition_penalty;
    if (!json) std::fprintf(stderr, "[sampling defaults from %s]\n", rec.source.c_str());
  }
  std::unique_ptr<Tokenizer> tok;
  // Text needs a tokenizer; with --prompt-ids and none beside the model the
  // ids are printed instead.
  if (prompt_ids.empty() || !tokenizer_path.empty() || !cfg.tokenizer.empty()) {
    tok = load_tokenizer(find_tokenizer(cfg.model, tokenizer_path.empty() ? cfg.tokenizer : tokenizer_path));
  } else if (const std::string beside = find_tokenizer_beside(cfg.model); !beside.empty()) {
    tok = load_tokenizer(beside);
  }
  auto ids_text = [](const std::vector<int>& ids) {
    std::string out;
    for (int t : ids) {
      if (!out.empty()) out += ' ';
      out += std::to_string(t);
    }
    return out;
  };
  std::vector<GenerationRequest> batch;
  if (!prompt_ids.empty()) {
    batch.push_back(req);
    batch.back().prompt = parse_ids(prompt_ids);
  } else if (prompts.empty()) {
    batch.push_back(req);
    batch.back().prompt = tok->encode("", true);  // no prompt: from BOS alone, like run.c
    SY_CHECK(!batch.back().prompt.empty(), "give --prompt: this tokenizer adds no BOS to start from");
  } else {
    std::optional<ChatTemplate> chat_template;
    if (chat) {
      const std::string tok_path = find_tokenizer(cfg.model, tokenizer_path.empty() ? cfg.tokenizer : tokenizer_path);
      chat_template = !chat_template_file.empty() ? ChatTemplate::from_file(chat_template_file) : ChatTemplate::from_model_dir(tok_path);
      if (!chat_template) chat_template = ChatTemplate::from_model_dir(cfg.model);
      SY_CHECK(chat_template, "--chat: the model folder has no chat template (tokenizer_config.json chat_template or chat_template.jinja); "
                              "give --chat-template FILE");
    }
    for (const auto& text : prompts) {
      SY_CHECK(!text.empty(), "the prompt is empty");
      batch.push_back(req);
      if (chat_template) {
        ChatRequest cr;
        if (!system_prompt.empty()) cr.messages.push_back({{"role", "system"}, {"content", system_prompt}});
        cr.messages.push_back({{"role", "user"}, {"content", text}});
        batch.back().prompt = tok->encode(chat_template->apply(cr), false);  // the template writes BOS itself
      } else {
        batch.back().prompt = tok->encode(text, true);
      }
    }
  }
  // A single prompt in text mode streams its tokens as they come.
  bool stream = !json && batch.size() == 1 && tok;
  std::unique_ptr<StreamDecoder> streamer;
  if (stream) {
    std::cout << tok->decode(batch[0].prompt, true) << std::flush;
    streamer = std::make_unique<StreamDecoder>(*tok, batch[0].prompt, true);
  }
  auto results = session->generate(batch, [&](size_t, int t) {
    if (streamer) std::cout << streamer->push(t) << std::flush;
  });
  if (streamer) std::cout << streamer->flush();
  if (StepEngine* se = session->step_engine(); se && !json) {
    const auto& m = se->metrics();
    std::fprintf(stderr, "[step engine: %lld steps, KV blocks peak %d of %d, prefix cache hit rate %.3f (%lld of %lld prompt tokens), %lld preemptions]\n",
                 static_cast<long long>(m.steps), m.peak_used_blocks, m.total_blocks, m.prefix_hit_rate(),
                 static_cast<long long>(m.cached_tokens), static_cast<long long>(m.prompt_tokens), static_cast<long long>(m.preemptions));
    if (m.spec_drafts > 0 || m.spec_declined > 0)
      std::fprintf(stderr,
                   "[speculative: %lld drafts, %lld tokens proposed, %lld accepted, acceptance rate %.3f, mean accepted length %.2f, "
                   "declined %lld]\n",
                   static_cast<long long>(m.spec_drafts), static_cast<long long>(m.spec_draft_tokens),
                   static_cast<long long>(m.spec_accepted_tokens), m.spec_acceptance_rate(), m.spec_mean_accepted_length(),
                   static_cast<long long>(m.spec_declined));
  }
  for (size_t r = 0; r < batch.size(); ++r) {
    const auto& res = results[r];
    double e2e_s = res.e2e_ms / 1000.0;
    double tps = e2e_s > 0 ? static_cast<double>(res.tokens.size()) / e2e_s : 0.0;
    if (json) {
      nlohmann::json j;
      j["prompt_ids"] = batch[r].prompt;
      j["ids"] = res.tokens;
      j["text"] = tok ? decode_continuation(*tok, batch[r].prompt, res.tokens) : "";
      j["finish_reason"] = finish_reason_name(res.finish_reason);
      j["cached_tokens"] = res.cached_tokens;
      j["metrics"] = {{"ttft_ms", res.ttft_ms}, {"tpot_ms", res.tpot_ms()}, {"tokens_per_s", tps}};
      std::cout << j.dump() << "\n";
    } else {
      if (!tok) {
        std::cout << ids_text(batch[r].prompt) << " | " << ids_text(res.tokens) << "\n";
      } else if (!stream) {
        std::cout << tok->decode(batch[r].prompt, true) << decode_continuation(*tok, batch[r].prompt, res.tokens) << "\n";
      } else {
        std::cout << "\n";
      }
      std::fprintf(stderr, "[%zu tokens, finish: %s, ttft %.2f ms, tpot %.3f ms, %.0f tokens/s]\n", res.tokens.size(),
                   finish_reason_name(res.finish_reason), res.ttft_ms, res.tpot_ms(), tps);
    }
  }
  return 0;
}

int cmd_logits(const std::vector<std::string>& args) {
  EngineFlags mf;
  std::string prompt_ids;
  bool json = false;
  po::options_description d("logits options");
  d.add_options()("help,h", "show this help");
  mf.add(d);
  d.add_options()("prompt-ids", po::value(&prompt_ids)->required(), "prompt as comma-separated token ids")(
      "json", po::bool_switch(&json), "print {\"last_logits\": [...]}");
  auto p = parse(args, d, "usage: switchyard logits (--model M | --manifest F [--profile P]) --prompt-ids 1,2,3 [--json]");
  if (p.help) return 0;
  auto session = Session::create(mf.config());
  std::vector<float> logits = session->last_logits(parse_ids(prompt_ids));
  if (json) {
    std::cout << nlohmann::json{{"last_logits", logits}}.dump() << "\n";
  } else {
    for (size_t i = 0; i < logits.size(); ++i) std::printf("%zu\t%.7g\n", i, static_cast<double>(logits[i]));
  }
  return 0;
}

int cmd_inspect(const std::vector<std::string>& args) {
  EngineFlags mf;
  bool json = false;
  po::options_description d("inspect options");
  d.add_options()("help,h", "show this help");
  mf.add(d);
  d.add_options()("json", po::bool_switch(&json), "print JSON");
  auto p = parse(args, d, "usage: switchyard inspect (--model M | --manifest F [--profile P]) [--json]");
  if (p.help) return 0;
  auto session = Session::create(mf.config());
  const Graph& g = session->model().graph();
  const PreparedGraphReport& rep = session->report();
  auto describe = [&](ValueId id, const std::string& name) {
    const Value& v = g.values[static_cast<size_t>(id)];
    return nlohmann::json{{"name", name}, {"dtype", dtype_name(v.dtype)}, {"shape", v.shape_str()}};
  };
  nlohmann::json j;
  j["model"] = session->config().model;
  if (!session->config().manifest_path.empty()) {
    j["manifest"] = session->config().manifest_path;
    j["profile"] = session->config().profile;
  }
  for (ValueId id : g.inputs) j["inputs"].push_back(describe(id, g.values[static_cast<size_t>(id)].name));
  for (const auto& o : g.outputs) j["outputs"].push_back(describe(o.value, o.name));
  j["opsets"] = g.opsets;
  j["parameters"] = rep.parameters;
  j["parameter_bytes"] = rep.parameter_bytes;
  j["nodes_imported"] = rep.imported_nodes;
  j["nodes_planned"] = g.live_node_count();
  j["plugins"] = nlohmann::json::array();
  for (const auto& lib : session->plugins().libraries()) {
    nlohmann::json pj{{"name", lib->name()}, {"version", lib->version()}, {"abi", std::to_string(lib->abi_major()) + "." + std::to_string(lib->abi_minor())},
                      {"path", lib->path()}, {"sha256", lib->sha256()}};
    const sy_plugin_info& info = lib->info();
    for (int32_t i = 0; i < info.num_passes; ++i) pj["passes"].push_back({{"name", info.passes[i]->name}, {"version", info.passes[i]->version}});
    for (int32_t i = 0; i < info.num_kernels; ++i) {
      const sy_kernel_desc* k = info.kernels[i];
      pj["kernels"].push_back({{"name", k->name}, {"version", k->version},
                               {"op", std::string(k->domain).empty() ? std::string(k->op_type) : std::string(k->domain) + "::" + k->op_type},
                               {"device", k->device == SY_DEVICE_CUDA ? "cuda" : "cpu"}, {"priority", k->priority}});
    }
    for (int32_t i = 0; i < info.num_schedulers; ++i) pj["schedulers"].push_back({{"name", info.schedulers[i]->name}, {"version", info.schedulers[i]->version}});
    for (int32_t i = 0; i < info.num_caches; ++i) pj["caches"].push_back({{"name", info.caches[i]->name}, {"version", info.caches[i]->version}});
    for (int32_t i = 0; i < info.num_drafters; ++i) pj["drafters"].push_back({{"name", info.drafters[i]->name}, {"version", info.drafters[i]->version}});
    j["plugins"].push_back(pj);
  }
  for (const auto& sp : session->passes())
    j["passes"].push_back({{"name", sp.entry->name}, {"provider", sp.entry->provider}, {"options", sp.options.str()}});
  auto component = [&](const char* key, const std::optional<SelectedComponent>& c) {
    j[key] = c ? nlohmann::json{{"name", c->entry->name}, {"provider", c->entry->provider}, {"options", c->options.str()}} : nlohmann::json();
  };
  component("scheduler", session->scheduler());
  component("cache", session->cache());
  component("drafter", session->drafter());
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& [stage, counts] : rep.op_counts_after) stages.push_back({{"stage", stage}, {"op_counts", counts}});
  j["op_counts"] = stages;
  std::map<std::string, int> providers;
  for (const auto& pl : session->model().executor().placements())
    ++providers[pl.provider + " " + pl.op + (pl.device == Device::CPU ? "" : std::string(" @") + device_name(pl.device))];
  if (DeviceBackend* dev = session->device())
    std::printf("device     %s; %d copies between host and device per forward pass\n", dev->description().c_str(),
                session->model().executor().transfer_plan().copies_per_run());
  j["kernels_used"] = providers;
  // What attention fusion made of each layer, and what proved it.
  j["attention"] = nlohmann::json::array();
  for (const Node& n : g.nodes) {
    if (n.dead || n.domain != SY_OP_DOMAIN || n.op_type != SY_OP_PAGED_ATTENTION) continue;
    nlohmann::json a{{"layer", n.attr_int("layer", -1)},       {"scale", n.attr_float("scale", 0.f)},
                     {"softcap", n.attr_float("softcap", 0.f)}, {"window", n.attr_int("window", 0)},
                     {"kv_heads", n.attr_int("kv_heads", 0)},   {"head_dim", n.attr_int("head_dim", 0)},
                     {"layout", n.attr_int("num_heads", 0) > 0 ? "token-major" : "heads-major"},
                     {"rotary", n.inputs.size() > 3 ? (n.attr_int("rotary_interleaved", 0) ? "interleaved" : "halves") : "none"}};
    j["attention"].push_back(a);
  }
  std::sort(j["attention"].begin(), j["attention"].end(), [](const auto& a, const auto& b) { return a["layer"] < b["layer"]; });
  j["probes"] = nlohmann::json::array();
  for (const ProbeReport& pr : rep.probes)
    j["probes"].push_back({{"pass", pr.pass}, {"cases", pr.cases}, {"regions", pr.regions}, {"max_deviation", pr.max_deviation},
                           {"logit_sensitivity", pr.logit_sensitivity}, {"ms", pr.ms}, {"skipped", pr.skipped}});
  if (json) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::printf("model       %s\n", session->config().model.c_str());
  if (j.contains("manifest"))
    std::printf("manifest    %s (profile: %s)\n", session->config().manifest_path.c_str(),
                session->config().profile.empty() ? "(top level)" : session->config().profile.c_str());
  std::printf("parameters  %lld (%lld bytes)\n", static_cast<long long>(rep.parameters), static_cast<long long>(rep.parameter_bytes));
  std::printf("opsets     ");
  for (const auto& [dom, v] : g.opsets) std::printf(" %s=%lld", dom.empty() ? "ai.onnx" : dom.c_str(), static_cast<long long>(v));
  std::printf("\ninputs:\n");
  for (const auto& in : j["inputs"])
    std::printf("  %-28s %-8s %s\n", in["name"].get<std::string>().c_str(), in["dtype"].get<std::string>().c_str(), in["shape"].get<std::string>().c_str());
  std::printf("outputs:\n");
  for (const auto& out : j["outputs"])
    std::printf("  %-28s %-8s %s\n", out["name"].get<std::string>().c_str(), out["dtype"].get<std::string>().c_str(), out["shape"].get<std::string>().c_str());
  std::printf("plugins:%s\n", j["plugins"].empty() ? " none" : "");
  for (const auto& pj : j["plugins"]) {
    std::printf("  %s %s (ABI %s) %s\n    sha256 %s\n", pj["name"].get<std::string>().c_str(), pj["version"].get<std::string>().c_str(),
                pj["abi"].get<std::string>().c_str(), pj["path"].get<std::string>().c_str(), pj["sha256"].get<std::string>().c_str());
    for (const char* kind : {"passes", "schedulers", "caches", "drafters"})
      if (pj.contains(kind))
        for (const auto& c : pj[kind]) std::printf("    %-10s %s %s\n", kind, c["name"].get<std::string>().c_str(), c["version"].get<std::string>().c_str());
    if (pj.contains("kernels"))
      for (const auto& k : pj["kernels"])
        std::printf("    %-10s %s %s: %s on %s, priority %d\n", "kernel", k["name"].get<std::string>().c_str(), k["version"].get<std::string>().c_str(),
                    k["op"].get<std::string>().c_str(), k["device"].get<std::string>().c_str(), k["priority"].get<int>());
  }
  std::printf("passes:%s\n", session->passes().empty() ? " none (built-in simplification only)" : "");
  for (const auto& sp : session->passes())
    std::printf("  %s (%s)%s%s\n", sp.entry->name.c_str(), sp.entry->provider.c_str(), sp.options.all().empty() ? "" : " ", sp.options.str().c_str());
  const bool stepped = session->step_engine() != nullptr;
  const std::map<std::string, std::string> defaults = {
      {"scheduler", stepped ? "built-in FCFS with chunked prefill (step engine)" : "static batch (baseline mode)"},
      {"cache", "none (baseline mode: past/present KV tensors of the graph)"},
      {"drafter", "none"}};
  for (const char* key : {"scheduler", "cache", "drafter"})
    std::printf("%-10s %s\n", key, j[key].is_null() ? defaults.at(key).c_str()
                                                       : (j[key]["name"].get<std::string>() + " (" + j[key]["provider"].get<std::string>() + ")").c_str());
  std::printf("nodes: %zu imported, %zu planned\n", rep.imported_nodes, g.live_node_count());
  std::set<std::string> ops;
  for (const auto& [stage, counts] : rep.op_counts_after)
    for (const auto& [op, n] : counts) ops.insert(op);
  std::printf("  %-24s", "op");
  for (const auto& [stage, counts] : rep.op_counts_after) std::printf(" %12.12s", stage.c_str());
  std::printf("\n");
  for (const auto& op : ops) {
    std::printf("  %-24s", op.c_str());
    for (const auto& [stage, counts] : rep.op_counts_after) std::printf(" %12d", counts.count(op) ? counts.at(op) : 0);
    std::printf("\n");
  }
  std::printf("kernels used (provider op: nodes):\n");
  for (const auto& [k, n] : providers) std::printf("  %-40s %d\n", k.c_str(), n);
  if (!j["attention"].empty()) {
    std::printf("fused attention (PagedAttention per layer):\n");
    std::printf("  %5s %10s %8s %7s %9s %9s %12s %12s\n", "layer", "scale", "softcap", "window", "kv_heads", "head_dim", "layout", "rotary");
    for (const auto& a : j["attention"])
      std::printf("  %5lld %10.6g %8.4g %7lld %9lld %9lld %12s %12s\n", static_cast<long long>(a["layer"].get<int64_t>()),
                  a["scale"].get<double>(), a["softcap"].get<double>(), static_cast<long long>(a["window"].get<int64_t>()),
                  static_cast<long long>(a["kv_heads"].get<int64_t>()), static_cast<long long>(a["head_dim"].get<int64_t>()),
                  a["layout"].get<std::string>().c_str(), a["rotary"].get<std::string>().c_str());
  }
  for (const auto& pr : j["probes"]) {
    if (!pr["skipped"].get<std::string>().empty())
      std::printf("equivalence probe of '%s': skipped (%s)\n", pr["pass"].get<std::string>().c_str(), pr["skipped"].get<std::string>().c_str());
    else
      std::printf("equivalence probe of '%s': %d cases, %d regions, max deviation %.3g (logit sensitivity %.3g), %.1f ms\n",
                  pr["pass"].get<std::string>().c_str(), pr["cases"].get<int>(), pr["regions"].get<int>(), pr["max_deviation"].get<double>(),
                  pr["logit_sensitivity"].get<double>(), pr["ms"].get<double>());
  }
  return 0;
}

namespace {

// Generator flags shared by bench and ab (a --workload file overrides them).
struct WorkloadFlags {
  std::string path, input_len = "32:256", output_len = "16:128";
  WorkloadSpec spec;
  void add(po::options_description& d) {
    d.add_options()("workload,w", po::value(&path), "workload spec (.yaml) or trace (.jsonl)")(
        "requests", po::value(&spec.requests)->default_value(32), "generated: number of requests")(
        "arrival", po::value(&spec.arrival)->default_value("poisson"), "generated: poisson or burst")(
        "rate", po::value(&spec.rate)->default_value(10), "generated: requests per second (poisson)")(
        "input-len", po::value(&input_len)->default_value("32:256"), "generated: prompt tokens MIN:MAX")(
        "output-len", po::value(&output_len)->default_value("16:128"), "generated: output tokens MIN:MAX")(
        "shared-prefix", po::value(&spec.shared_prefix)->default_value(0), "generated: shared fraction of each prompt")(
        "seed", po::value(&spec.seed)->default_value(1), "generated: seed")(
        "slo-ttft-ms", po::value(&spec.slo.ttft_ms)->default_value(0), "goodput SLO on TTFT (0: none)")(
        "slo-tpot-ms", po::value(&spec.slo.tpot_ms)->default_value(0), "goodput SLO on TPOT (0: none)")(
        "max-concurrency", po::value(&max_concurrency)->default_value(-1),
        "at most N requests in flight (a closed loop; 1: batch-1 latency); overrides the workload's max_concurrency");
  }
  int max_concurrency = -1;
  static void range(const std::string& s, int& lo, int& hi, const char* flag) {
    size_t c = s.find(':');
    try {
      lo = std::stoi(s.substr(0, c));
      hi = c == std::string::npos ? lo : std::stoi(s.substr(c + 1));
    } catch (const std::exception&) {
      SY_THROW(flag << ": expected MIN:MAX or N, got '" << s << "'");
    }
  }
  Workload load(int vocab) {
    Workload w;
    if (!path.empty()) {
      w = load_workload(path, vocab);
    } else {
      range(input_len, spec.input_min, spec.input_max, "--input-len");
      range(output_len, spec.output_min, spec.output_max, "--output-len");
      w = generate_workload(spec, vocab);
      w.name = "generated";
    }
    SY_CHECK(max_concurrency >= -1, "--max-concurrency must be >= 0, got " << max_concurrency);
    if (max_concurrency >= 0) w.max_concurrency = max_concurrency;
    return w;
  }
};

void write_json(const std::string& path, const nlohmann::json& j) {
  std::ofstream out(path);
  SY_CHECK(out, path << ": cannot write");
  out << j.dump(2) << "\n";
}

// Failed requests are part of the results, and a run where any failed says
// so on stderr with the first error (a plugin's failure names the plugin)
// and exits 4: a benchmark of failing requests is not a measurement.
int report_failures(const BenchResult& r, const std::string& name) {
  if (r.failed == 0) return 0;
  auto first = std::find_if(r.results.begin(), r.results.end(), [](const GenerationResult& g) { return !g.error.empty(); });
  std::cerr << name << ": " << r.failed << " of " << r.results.size() << " requests failed"
            << (first == r.results.end() ? std::string() : "; the first error: " + first->error) << "\n";
  return 4;
}

}  // namespace

int cmd_bench(const std::vector<std::string>& args) {
  EngineFlags mf;
  WorkloadFlags wf;
  std::string out = "bench.json", html;
  bool quiet = false;
  po::options_description d("bench options");
  d.add_options()("help,h", "show this help");
  mf.add(d);
  wf.add(d);
  std::string url, api_key, served_model = "stories260K";
  int vocab = 512;
  d.add_options()("out", po::value(&out)->default_value("bench.json"), "JSON results")("html", po::value(&html), "also write an HTML report")(
      "quiet", po::bool_switch(&quiet), "no progress bar")("url", po::value(&url), "drive a running server instead (http://host:port)")(
      "api-key", po::value(&api_key), "with --url: the server's key")("served-model", po::value(&served_model)->default_value("stories260K"),
                                                                       "with --url: the model id")(
      "vocab", po::value(&vocab)->default_value(512), "with --url: token ids are drawn below this");
  auto p = parse(args, d,
                 "usage: switchyard bench (--manifest M [--profile P] | --model M | --url http://host:port) "
                 "[--workload W | generator options]");
  if (p.help) return 0;
  BenchResult r;
  Workload w;
  std::string name;
  if (!url.empty()) {
    // A running server: the same workload through concurrent streaming clients.
    w = wf.load(vocab);
    name = url;
    r = run_workload_http(url, api_key, served_model, w, !quiet);
  } else {
    auto session = Session::create(mf.config());
    w = wf.load(static_cast<int>(session->model().vocab_size()));
    name = mf.profile.empty() ? "default" : mf.profile;
    r = run_workload(*session, w, name, !quiet);
  }
  std::vector<BenchResult> rs{r};
  std::cout << "workload " << w.name << ": " << w.requests.size() << " requests\n" << results_table(rs, w.slo);
  auto j = results_json(rs, w.slo);
  j["workload"] = w.name;
  j["max_concurrency"] = w.max_concurrency;
  write_json(out, j);
  if (!html.empty()) write_html_report(html, "switchyard bench: " + name, rs, w.slo, "workload: " + w.name);
  std::cout << "wrote " << out << (html.empty() ? "" : " and " + html) << "\n";
  return report_failures(r, name);
}

int cmd_ab(const std::vector<std::string>& args) {
  EngineFlags mf;
  WorkloadFlags wf;
  std::string profiles, out = "ab.json", html = "ab-report.html";
  bool quiet = false;
  po::options_description d("ab options");
  d.add_options()("help,h", "show this help");
  mf.add(d);
  wf.add(d);
  d.add_options()("profiles", po::value(&profiles)->required(), "A,B: two profiles of the manifest")(
      "out", po::value(&out)->default_value("ab.json"), "JSON results")("html", po::value(&html)->default_value("ab-report.html"),
                                                                         "HTML report with plots")(
      "quiet", po::bool_switch(&quiet), "no progress bar");
  auto p = parse(args, d, "usage: switchyard ab --manifest M --profiles A,B (--workload W | generator options)");
  if (p.help) return 0;
  SY_CHECK(!mf.manifest.empty(), "ab needs --manifest");
  size_t comma = profiles.find(',');
  SY_CHECK(comma != std::string::npos && comma > 0 && comma + 1 < profiles.size(), "--profiles: expected A,B, got '" << profiles << "'");
  std::vector<std::string> names = {profiles.substr(0, comma), profiles.substr(comma + 1)};
  std::vector<BenchResult> rs;
  Workload w;
  for (size_t i = 0; i < 2; ++i) {
    EngineFlags f = mf;
    f.profile = names[i];
    auto session = Session::create(f.config());  // one at a time: the other's memory is freed
    if (i == 0) w = wf.load(static_cast<int>(session->model().vocab_size()));
    rs.push_back(run_workload(*session, w, names[i], !quiet));
  }
  // Greedy requests must produce the same tokens under both profiles.
  size_t greedy = 0, differ = 0;
  for (size_t i = 0; i < w.requests.size(); ++i) {
    if (w.requests[i].request.sampling.temperature > 0) continue;
    ++greedy;
    differ += rs[0].results[i].tokens != rs[1].results[i].tokens;
  }
  std::ostringstream notes;
  notes << "manifest " << mf.manifest << ", workload " << w.name << " (" << w.requests.size() << " requests"
        << (w.max_concurrency > 0 ? ", at most " + std::to_string(w.max_concurrency) + " in flight" : std::string()) << ")\n"
        << "A = " << names[0] << ", B = " << names[1] << "\n"
        << "greedy outputs agree: " << (differ == 0 ? "yes" : "NO") << " (" << greedy - differ << " of " << greedy << " requests identical)";
  std::cout << notes.str() << "\n" << results_table(rs, w.slo);
  auto j = results_json(rs, w.slo);
  j["workload"] = w.name;
  j["max_concurrency"] = w.max_concurrency;
  j["outputs_agree"] = differ == 0;
  j["greedy_requests"] = greedy;
  j["greedy_requests_differing"] = differ;
  write_json(out, j);
  write_html_report(html, "switchyard ab: " + names[0] + " vs " + names[1], rs, w.slo, notes.str());
  std::cout << "wrote " << out << " and " << html << "\n";
  const int failed = std::max(report_failures(rs[0], names[0]), report_failures(rs[1], names[1]));
  if (failed) return failed;
  return differ == 0 ? 0 : 3;
}

int cmd_synth(const std::vector<std::string>& args) {
  std::string preset, out;
  uint64_t seed = 1;
  po::options_description d("synth options");
  d.add_options()("help,h", "show this help")("preset", po::value(&preset)->required(), "model shape (see below)")(
      "out,o", po::value(&out)->required(), "output .onnx path (large models also write <out>.data)")(
      "seed", po::value(&seed)->default_value(1), "weight seed")(
      "layers", po::value<int64_t>(), "keep only the first N layers (same seed: a truncated copy, e.g. a draft model)");
  std::ostringstream usage;
  usage << "usage: switchyard synth --preset NAME --out model.onnx [--seed S]\npresets:\n";
  for (const auto& p : synth_presets())
    usage << "  " << p.name << ": dim " << p.dim << ", " << p.layers << " layers, " << p.heads << " heads (" << p.kv_heads
          << " kv), ffn " << p.hidden << ", vocab " << p.vocab << ", " << synth_parameter_count(p) / 1000000 << "M parameters\n";
  auto parsed = parse(args, d, usage.str().c_str());
  if (parsed.help) return 0;
  SynthConfig c = synth_preset(preset);
  if (parsed.vm.count("layers")) {
    int64_t n = parsed.vm["layers"].as<int64_t>();
    SY_CHECK(n >= 1 && n <= c.layers, "--layers must be in [1, " << c.layers << "]");
    c.layers = n;
    c.name += "-" + std::to_string(n) + "layers";
  }
  write_synth_model(c, out, seed);
  std::printf("wrote %s: %s, %lld parameters\n", out.c_str(), c.name.c_str(), static_cast<long long>(synth_parameter_count(c)));
  return 0;
}

}  // namespace sy::cli
