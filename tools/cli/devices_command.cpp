// `switchyard devices`: what the engine can run on here. With --bandwidth,
// the measured device copy bandwidth (the MBU denominator on a GPU).
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli_support.h"
#include "commands.h"
#include "device/device_registry.h"
#ifdef SWITCHYARD_HAS_CUDA
#include "device/cuda/cuda_backend.h"
#endif

namespace sy::cli {

int cmd_devices(const std::vector<std::string>& args) {
  bool bandwidth = false, json = false;
  po::options_description d("switchyard devices");
  d.add_options()("help,h", "show this help")("bandwidth", po::bool_switch(&bandwidth),
                                               "measure each device's copy bandwidth (GB/s)")("json", po::bool_switch(&json),
                                                                                              "print JSON");
  if (parse(args, d, "usage: switchyard devices [--bandwidth] [--json]").help) return 0;
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
    if (bandwidth) j["copy_bandwidth_gbs"] = cuda.measure_copy_bandwidth_gbs();
#endif
    list.push_back(j);
  }
  out["devices"] = list;
  if (json) {
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("cpu        available\n");
  if (probe.count == 0) std::printf("cuda       none: %s\n", probe.why_none.c_str());
  for (const auto& j : list) {
    std::printf("%-10s %s", j["device"].get<std::string>().c_str(), j["description"].get<std::string>().c_str());
    if (j.contains("copy_bandwidth_gbs")) std::printf(", copy bandwidth %.0f GB/s", j["copy_bandwidth_gbs"].get<double>());
    std::printf("\n");
  }
  return 0;
}

}  // namespace sy::cli
