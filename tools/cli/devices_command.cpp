// `switchyard devices`: what the engine can run on here. With --bandwidth,
// the measured device copy bandwidth (the MBU denominator on a GPU).
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli_support.h"
#include "commands.h"

namespace sy::cli {

int cmd_devices(const std::vector<std::string>& args) {
  bool bandwidth = false, json = false;
  po::options_description d("switchyard devices");
  d.add_options()("help,h", "show this help")("bandwidth", po::bool_switch(&bandwidth),
                                               "measure each device's copy bandwidth (GB/s)")("json", po::bool_switch(&json),
                                                                                              "print JSON");
  if (parse(args, d, "usage: switchyard devices [--bandwidth] [--json]").help) return 0;
  const nlohmann::json out = probe_devices(bandwidth);
  const nlohmann::json& list = out["devices"];
  if (json) {
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("cpu        available\n");
  if (out.contains("cuda_unavailable")) std::printf("cuda       none: %s\n", out["cuda_unavailable"].get<std::string>().c_str());
  for (const auto& j : list) {
    std::printf("%-10s %s", j["device"].get<std::string>().c_str(), j["description"].get<std::string>().c_str());
    if (j.contains("copy_bandwidth_gbs")) std::printf(", copy bandwidth %.0f GB/s", j["copy_bandwidth_gbs"].get<double>());
    std::printf("\n");
  }
  return 0;
}

}  // namespace sy::cli
