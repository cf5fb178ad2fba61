// switchyard inspect: what the engine made of a model and a manifest
// (inputs, outputs, plugins, passes, op counts per stage, kernels, fused
// attention, equivalence probes), from the facade's description.
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>

#include "cli_support.h"
#include "commands.h"

namespace sy::cli {

namespace {
std::string str(const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : std::string(); }
}  // namespace

int cmd_inspect(const std::vector<std::string>& args) {
  EngineFlags mf;
  bool json = false;
  po::options_description d("inspect options");
  d.add_options()("help,h", "show this help");
  mf.add(d);
  int64_t kv_tokens = 4096, kv_memory_mb = 1024;
  d.add_options()("json", po::bool_switch(&json), "print JSON");
  d.add_options()("kv-tokens", po::value(&kv_tokens)->default_value(4096), "sequence length of the KV memory report");
  d.add_options()("kv-memory-mb", po::value(&kv_memory_mb)->default_value(1024), "KV memory the report counts sequences in (MiB)");
  auto p = parse(args, d, "usage: switchyard inspect (--model M | --manifest F [--profile P]) [--json]");
  if (p.help) return 0;
  if (kv_tokens <= 0 || kv_memory_mb <= 0) throw std::invalid_argument("--kv-tokens and --kv-memory-mb must be positive");
  const auto engine = Engine::open(mf.options());
  nlohmann::json j = engine->describe();
  j["kv_memory"] = engine->kv_memory(kv_tokens, kv_memory_mb * 1024 * 1024);
  if (json) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::printf("model       %s\n", str(j["model"]).c_str());
  if (j.contains("manifest"))
    std::printf("manifest    %s (profile: %s)\n", str(j["manifest"]).c_str(),
                str(j["profile"]).empty() ? "(top level)" : str(j["profile"]).c_str());
  if (j.contains("device"))
    std::printf("device     %s; %d copies between host and device per forward pass\n", str(j["device"]["description"]).c_str(),
                j["device"]["copies_per_forward"].get<int>());
  std::printf("parameters  %lld (%lld bytes)\n", j["parameters"].get<long long>(), j["parameter_bytes"].get<long long>());
  std::printf("opsets     ");
  for (const auto& [dom, v] : j["opsets"].items()) std::printf(" %s=%lld", dom.empty() ? "ai.onnx" : dom.c_str(), v.get<long long>());
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
  std::printf("passes:%s\n", j["passes"].empty() ? " none (built-in simplification only)" : "");
  for (const auto& sp : j["passes"]) {
    const std::string options = str(sp["options"]);
    std::printf("  %s (%s)%s%s\n", str(sp["name"]).c_str(), str(sp["provider"]).c_str(), options.empty() ? "" : " ", options.c_str());
  }
  const bool stepped = j["step_engine"].get<bool>();
  if (j.contains("fallback")) std::printf("fallback   %s; running the graph as exported\n", str(j["fallback"]).c_str());
  const std::map<std::string, std::string> defaults = {
      {"scheduler", stepped ? "built-in FCFS with chunked prefill (step engine)" : "static batch (baseline mode)"},
      {"cache", "none (baseline mode: past/present KV tensors of the graph)"},
      {"drafter", "none"},
      {"logits_processor", "none (structured output refused)"}};
  for (const char* key : {"scheduler", "cache", "drafter", "logits_processor"})
    std::printf("%-10s %s\n", key, j[key].is_null() ? defaults.at(key).c_str()
                                                       : (j[key]["name"].get<std::string>() + " (" + j[key]["provider"].get<std::string>() + ")").c_str());
  std::printf("nodes: %zu imported, %zu planned\n", j["nodes_imported"].get<size_t>(), j["nodes_planned"].get<size_t>());
  std::set<std::string> ops;
  for (const auto& stage : j["op_counts"])
    for (const auto& [op, n] : stage["op_counts"].items()) ops.insert(op);
  std::printf("  %-24s", "op");
  for (const auto& stage : j["op_counts"]) std::printf(" %12.12s", str(stage["stage"]).c_str());
  std::printf("\n");
  for (const auto& op : ops) {
    std::printf("  %-24s", op.c_str());
    for (const auto& stage : j["op_counts"]) std::printf(" %12d", stage["op_counts"].value(op, 0));
    std::printf("\n");
  }
  std::printf("kernels used (provider op: nodes):\n");
  for (const auto& [k, n] : j["kernels_used"].items()) std::printf("  %-40s %d\n", k.c_str(), n.get<int>());
  if (!j["attention"].empty()) {
    std::printf("fused attention (PagedAttention per layer):\n");
    std::printf("  %5s %10s %8s %7s %9s %9s %12s %12s %6s\n", "layer", "scale", "softcap", "window", "kv_heads", "head_dim", "layout", "rotary",
                "sinks");
    for (const auto& a : j["attention"]) {
      // Keys and values of different sizes (latent attention: latent + rotary key) show both.
      const long long kd = a["head_dim"].get<long long>(), vd = a.value("value_head_dim", kd);
      const std::string dims = vd == kd ? std::to_string(kd) : std::to_string(kd) + "+" + std::to_string(vd);
      std::printf("  %5lld %10.6g %8.4g %7lld %9lld %9s %12s %12s %6s\n", static_cast<long long>(a["layer"].get<int64_t>()),
                  a["scale"].get<double>(), a["softcap"].get<double>(), static_cast<long long>(a["window"].get<int64_t>()),
                  static_cast<long long>(a["kv_heads"].get<int64_t>()), dims.c_str(), a["layout"].get<std::string>().c_str(),
                  a["rotary"].get<std::string>().c_str(), a["sinks"].get<bool>() ? "yes" : "no");
    }
  }
  const auto& kv = j["kv_memory"];
  std::printf("KV cache memory (%lld layers, %lld KV heads, keys %lld and values %lld per head):\n  seed formula: %s\n",
              kv["layers"].get<long long>(), kv["kv_heads"].get<long long>(), kv["key_size"].get<long long>(), kv["value_size"].get<long long>(),
              str(kv["seed_formula"]).c_str());
  std::printf("  %-58s %12s %16s %12s  %s\n", "strategy", "bytes/token", "bytes/sequence", "sequences", "status");
  for (const auto& r : kv["strategies"])
    std::printf("  %-58s %12lld %16lld %12lld  %s\n", str(r["strategy"]).c_str(), r["bytes_per_token"].get<long long>(),
                r["bytes_per_sequence"].get<long long>(), r["sequences"].get<long long>(), str(r["status"]).c_str());
  std::printf("  (sequences of %lld tokens in %lld MiB)\n", kv["sequence_tokens"].get<long long>(), static_cast<long long>(kv_memory_mb));
  if (kv.contains("in_use"))
    std::printf("  in use: %lld blocks of %lld tokens, %lld bytes a token, %lld bytes reserved\n", kv["in_use"]["blocks"].get<long long>(),
                kv["in_use"]["block_tokens"].get<long long>(), kv["in_use"]["bytes_per_token"].get<long long>(),
                kv["in_use"]["reserved_bytes"].get<long long>());
  for (const auto& pr : j["probes"]) {
    if (!pr["skipped"].get<std::string>().empty())
      std::printf("equivalence probe of '%s': skipped (%s)\n", pr["pass"].get<std::string>().c_str(), pr["skipped"].get<std::string>().c_str());
    else {
      char bound[64] = "within the strict tolerance";
      if (!pr["logit_sensitivity"].is_null()) std::snprintf(bound, sizeof bound, "logit sensitivity %.3g", pr["logit_sensitivity"].get<double>());
      std::printf("equivalence probe of '%s': %d cases, %d regions, max deviation %.3g (%s), %.1f ms\n", pr["pass"].get<std::string>().c_str(),
                  pr["cases"].get<int>(), pr["regions"].get<int>(), pr["max_deviation"].get<double>(), bound, pr["ms"].get<double>());
    }
  }
  return 0;
}

}  // namespace sy::cli
