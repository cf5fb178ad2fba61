// Weight-only quantization end to end: one model (a `switchyard synth` one,
// e.g. 110M and 1.1B) run at fp32, int8 and int4 through the quantize
// plugin, batch 1, on the paged step engine with 2 threads, in the default
// manifest's exact mode (pointwise fusions, then paged attention). Per scheme:
// decode tokens/s, prefill tokens/s, the weight bytes one decode step reads,
// and the effective bandwidth against this machine's measured memory-read
// bandwidth (MBU). Prints a table, writes JSON (--out). Speed-ups are ratios
// within one run.
//   bench_quant --model /tmp/synth-110m.onnx [--schemes fp32,int8,int4] [--decode 32] [--prefill 128]
//               [--depth N]             (decode after an N-token prompt, the long-context case; default 8)
//               [--no-fuse-pointwise]   (leave RMSNorm, SiLU*up and rotary as the export's nodes)
//               [--no-fuse-experts]     (leave a mixture of experts' gathered expert matmuls as exported:
//                                        fp32, whatever the scheme)
//               [--quantize-option KEY=VALUE]...   (more options of the quantize pass, e.g. fuse_siblings=false)
//               [--kv-dtype float32|float16|bfloat16|int8|fp8] [--block-size N]   (the paged cache's storage;
//                                        default float32 and 16: long-context decode reads the cache, not the weights)
//               [--batch N]             (N sequences at once, each a --depth-token prompt then --decode tokens:
//                                        the generation phase's tokens/s, as llama-batched-bench's S_TG; default 1)
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "engine_configs.h"
#include "bench/bench_runner.h"

namespace {

struct Figures {
  double decode_tps = 0, prefill_tps = 0;
  int64_t weight_bytes = 0;
};

Figures run(const sy::EngineConfig& cfg, int decode, int prefill, int depth, int batch) {
  auto session = sy::Session::create(cfg);
  Figures f;
  f.weight_bytes = sy::bench::weight_bytes_per_token(session->model().executor());
  sy::bench::Batch1 m =
      batch > 1 ? sy::bench::measure_batched(*session, batch, depth, decode) : sy::bench::measure_batch1(*session, decode, prefill, depth);
  f.decode_tps = m.decode_tps;
  f.prefill_tps = m.prefill_tps;
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, out = "bench-quant.json", schemes_arg = "fp32,int8,int4";
  std::string kv_dtype = "float32", block_size = "16";
  int decode = 32, prefill = 128, threads = 2, depth = 8, batch = 1;
  bool fuse_pointwise = true, fuse_experts = true;
  std::vector<std::pair<std::string, std::string>> quantize_options;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--no-fuse-pointwise")) fuse_pointwise = false;
    if (!std::strcmp(argv[i], "--no-fuse-experts")) fuse_experts = false;
    if (i + 1 >= argc) break;
    if (!std::strcmp(argv[i], "--model")) model = argv[++i];
    else if (!std::strcmp(argv[i], "--out")) out = argv[++i];
    else if (!std::strcmp(argv[i], "--schemes")) schemes_arg = argv[++i];
    else if (!std::strcmp(argv[i], "--decode")) decode = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--prefill")) prefill = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--depth")) depth = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--kv-dtype")) kv_dtype = argv[++i];
    else if (!std::strcmp(argv[i], "--block-size")) block_size = argv[++i];
    else if (!std::strcmp(argv[i], "--batch")) batch = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--quantize-option")) {
      std::string kv = argv[++i];
      const size_t eq = kv.find('=');
      if (eq == std::string::npos) {
        std::fprintf(stderr, "bench_quant: --quantize-option takes KEY=VALUE, got '%s'\n", kv.c_str());
        return 2;
      }
      quantize_options.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
    }
  }
  if (model.empty()) {
    std::fprintf(stderr, "usage: bench_quant --model M.onnx [--schemes fp32,int8,int4] [--decode N] [--prefill N] [--out F]\n");
    return 2;
  }
  std::vector<std::string> schemes;
  std::stringstream ss(schemes_arg);
  for (std::string s; std::getline(ss, s, ',');) schemes.push_back(s);

  std::printf("%s, batch %d, %d threads, KV %s in blocks of %s, decode after %d tokens; MBU (weights only, batch 1) against the "
              "memory-read bandwidth measured just before each scheme's run\n",
              model.c_str(), batch, threads, kv_dtype.c_str(), block_size.c_str(), depth);
  std::printf("%-8s %12s %10s %10s %12s %10s %9s %8s %10s\n", "scheme", "weights MB", "decode t/s", "x fp32", "prefill t/s", "eff. GB/s",
              "read GB/s", "MBU", "ms/token");
  nlohmann::json rows = nlohmann::json::array();
  double fp32_decode = 0;
  for (const auto& scheme : schemes) {
    // Long contexts (--depth): room in the context and the KV budget for them.
    auto cfg = sy::bench::mode_config(model, "paged", {{"block_size", block_size}, {"dtype", kv_dtype}, {"budget_mb", depth > 2048 ? "4096" : "1024"}}, {}, threads);
    cfg.max_context = std::max<int64_t>(cfg.max_context, depth + decode + 16);
    if (batch > 1) cfg.max_seqs = std::max(cfg.max_seqs, batch);
    cfg.plugins.push_back(sy::PluginSpec{SY_QUANTIZE_PLUGIN, std::nullopt, "bench"});
    if (scheme != "fp32") {
      sy::ComponentSelection q{"quantize", {}, "bench"};
      q.options["scheme"] = sy::RawOption{scheme, "bench"};
      for (const auto& [k, v] : quantize_options) q.options[k] = sy::RawOption{v, "bench: --quantize-option"};
      cfg.passes.insert(cfg.passes.begin(), q);
    }
    if (fuse_pointwise) {
      // Exact, so its place among the passes does not matter; first, as in
      // the example manifests.
      cfg.plugins.push_back(sy::PluginSpec{SY_FUSED_PLUGIN, std::nullopt, "bench"});
      cfg.passes.insert(cfg.passes.begin(), sy::ComponentSelection{"fuse-pointwise", {}, "bench"});
    }
    // A mixture of experts' gathered expert matmuls as one grouped op
    // (plugins/moe), before quantize so the experts are quantized too, and first, so the
    // other passes' probes run the grouped op, not the gathered copies; a
    // no-op on dense models.
    if (fuse_experts) {
      cfg.plugins.push_back(sy::PluginSpec{SY_MOE_PLUGIN, std::nullopt, "bench"});
      cfg.passes.insert(cfg.passes.begin(), sy::ComponentSelection{"fuse-experts", {}, "bench"});
    }
    // This machine's available bandwidth drifts with its neighbours: measure
    // it next to the run it qualifies.
    const double bw = sy::measure_read_bandwidth_gbs(threads);
    Figures f;
    try {
      f = run(cfg, decode, prefill, depth, batch);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_quant: scheme %s: %s\n", scheme.c_str(), e.what());
      return 1;
    }
    if (scheme == "fp32") fp32_decode = f.decode_tps;
    // A step of the batch reads the weights once for all its sequences.
    const double gbs = static_cast<double>(f.weight_bytes) * f.decode_tps / batch / 1e9;
    std::printf("%-8s %12.1f %10.1f %10s %12.1f %10.1f %9.1f %7.0f%% %10.2f\n", scheme.c_str(), f.weight_bytes / 1e6, f.decode_tps,
                fp32_decode > 0 ? (std::to_string(f.decode_tps / fp32_decode).substr(0, 4) + "x").c_str() : "-", f.prefill_tps, gbs, bw,
                100 * gbs / bw, 1000.0 / f.decode_tps);
    rows.push_back({{"scheme", scheme}, {"weight_bytes_per_token", f.weight_bytes}, {"decode_tokens_per_s", f.decode_tps},
                    {"decode_speedup_vs_fp32", fp32_decode > 0 ? f.decode_tps / fp32_decode : 0}, {"prefill_tokens_per_s", f.prefill_tps},
                    {"effective_gbs", gbs}, {"read_bandwidth_gbs", bw}, {"mbu", gbs / bw}});
  }
  std::ofstream(out) << nlohmann::json{{"model", model}, {"threads", threads}, {"batch", batch}, {"fuse_pointwise", fuse_pointwise},
                                     {"kv_dtype", kv_dtype}, {"block_size", std::stoi(block_size)}, {"depth", depth}, {"rows", rows}}.dump(2)
                     << "\n";
  return 0;
}
