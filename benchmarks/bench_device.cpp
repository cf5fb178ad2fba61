// The engine on a device: one model (a `switchyard synth` one: 1.1B, 8B)
// at batch 1 on the paged step engine with the fused-ops and attention
// plugins, per weight scheme (bf16 cuBLAS for fp32 weights, int8/int4 through
// the quantize plugin). Per scheme: decode tokens/s, prefill tokens/s, the
// weight bytes one decode step streams as stored on the device, and MBU
// against the device's measured copy bandwidth (the host's read bandwidth on
// the CPU). Prints a table, writes JSON (--out).
//   bench_device --model /tmp/synth-1.1b.onnx --device cuda [--schemes fp32,int8,int4] [--decode 64] [--prefill 512]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "bench/bench_runner.h"
#include "device/device_registry.h"
#include "engine_configs.h"
#ifdef SWITCHYARD_HAS_CUDA
#include "device/cuda/cuda_backend.h"
#endif

namespace {

// The plugins of this build, or of a bundle ($SWITCHYARD_PLUGIN_DIR/<name>/lib<target>.so).
std::string plugin(const char* built, const char* name) {
  const char* dir = std::getenv("SWITCHYARD_PLUGIN_DIR");
  if (!dir) return built;
  return std::string(dir) + "/" + name + "/libswitchyard_" + name + ".so";
}

struct Figures {
  double decode_tps = 0, prefill_tps = 0, load_s = 0;
  int64_t weight_bytes = 0;
  int device_nodes = 0, nodes = 0, copies = 0;
};

Figures run(const sy::EngineConfig& cfg, int decode, int prefill) {
  Figures f;
  auto t0 = std::chrono::steady_clock::now();
  auto session = sy::Session::create(cfg);
  f.load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const sy::Executor& ex = session->model().executor();
  f.weight_bytes = sy::bench::weight_bytes_per_token(ex);
  for (const auto& p : ex.placements()) f.device_nodes += p.device != sy::Device::CPU;
  f.nodes = static_cast<int>(ex.placements().size());
  f.copies = ex.transfer_plan().copies_per_run();
  sy::bench::Batch1 m = sy::bench::measure_batch1(*session, decode, prefill);
  f.decode_tps = m.decode_tps;
  f.prefill_tps = m.prefill_tps;
  return f;
}

double bandwidth_gbs(const std::string& device, int threads) {
#ifdef SWITCHYARD_HAS_CUDA
  if (device != "cpu") {
    auto dev = sy::open_device(sy::resolve_device(sy::parse_device_spec(device), sy::probe_cuda()));
    return static_cast<sy::CudaBackend&>(*dev).measure_copy_bandwidth_gbs();
  }
#endif
  (void)device;
  return sy::measure_read_bandwidth_gbs(threads);
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, out = "bench-device.json", schemes_arg = "fp32,int8,int4", device = "cuda";
  int decode = 64, prefill = 512, threads = 4;
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], "--model")) model = argv[++i];
    else if (!std::strcmp(argv[i], "--out")) out = argv[++i];
    else if (!std::strcmp(argv[i], "--device")) device = argv[++i];
    else if (!std::strcmp(argv[i], "--schemes")) schemes_arg = argv[++i];
    else if (!std::strcmp(argv[i], "--decode")) decode = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--prefill")) prefill = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[++i]);
  }
  if (model.empty()) {
    std::fprintf(stderr, "usage: bench_device --model M.onnx [--device cuda|cpu] [--schemes fp32,int8,int4] [--decode N] [--prefill N] [--out F]\n");
    return 2;
  }
  try {
    std::vector<std::string> schemes;
    std::stringstream ss(schemes_arg);
    for (std::string s; std::getline(ss, s, ',');) schemes.push_back(s);
    const double bw = bandwidth_gbs(device, threads);
    std::printf("%s on %s, batch 1; MBU against a measured bandwidth of %.0f GB/s\n", model.c_str(), device.c_str(), bw);
    std::printf("%-6s %8s %11s %12s %12s %9s %6s %8s %8s\n", "scheme", "load s", "weights MB", "decode t/s", "prefill t/s", "eff GB/s",
                "MBU", "on dev", "copies");
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& scheme : schemes) {
      auto cfg = sy::bench::mode_config(model, "paged", {{"block_size", "16"}}, {}, threads);
      cfg.device = device;
      cfg.plugins = {sy::PluginSpec{plugin(SY_ATTENTION_PLUGIN, "attention"), std::nullopt, "bench"},
                     sy::PluginSpec{plugin(SY_CACHE_PLUGIN, "cache"), std::nullopt, "bench"},
                     sy::PluginSpec{plugin(SY_QUANTIZE_PLUGIN, "quantize"), std::nullopt, "bench"},
                     sy::PluginSpec{plugin(SY_FUSED_PLUGIN, "fused"), std::nullopt, "bench"}};
      cfg.passes.insert(cfg.passes.begin(), sy::ComponentSelection{"fuse-pointwise", {}, "bench"});
      if (scheme != "fp32") {
        sy::ComponentSelection q{"quantize", {}, "bench"};
        q.options["scheme"] = sy::RawOption{scheme, "bench"};
        cfg.passes.insert(cfg.passes.begin(), q);
      }
      Figures f = run(cfg, decode, prefill);
      const double gbs = static_cast<double>(f.weight_bytes) * f.decode_tps / 1e9;
      std::printf("%-6s %8.1f %11.1f %12.1f %12.1f %9.1f %5.0f%% %4d/%-4d %6d\n", scheme.c_str(), f.load_s, f.weight_bytes / 1e6,
                  f.decode_tps, f.prefill_tps, gbs, 100 * gbs / bw, f.device_nodes, f.nodes, f.copies);
      rows.push_back({{"scheme", scheme}, {"load_s", f.load_s}, {"weight_bytes_per_token", f.weight_bytes},
                      {"decode_tokens_per_s", f.decode_tps}, {"prefill_tokens_per_s", f.prefill_tps}, {"effective_gbs", gbs},
                      {"mbu", gbs / bw}, {"device_nodes", f.device_nodes}, {"nodes", f.nodes}, {"copies_per_step", f.copies}});
    }
    std::ofstream(out) << nlohmann::json{{"model", model}, {"device", device}, {"bandwidth_gbs", bw}, {"batch", 1},
                                         {"decode_tokens", decode}, {"prefill_tokens", prefill}, {"rows", rows}}
                              .dump(2)
                       << "\n";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_device: %s\n", e.what());
    return 1;
  }
  return 0;
}
