// switchyard synth: writes a Llama-shaped ONNX decoder of a preset size with
// seeded weights (benchmarks; a truncated copy makes a draft model).
#include <boost/program_options.hpp>
#include <cstdio>
#include <sstream>

#include "cli_support.h"
#include "commands.h"
#include "synth/synth_model.h"

namespace po = boost::program_options;

namespace sy::cli {

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
          << " kv), ffn " << p.hidden << ", vocab " << p.vocab
          << (p.experts ? ", experts " + std::to_string(p.experts) + " (top " + std::to_string(p.experts_per_token) + ")" : std::string())
          << ", " << synth_parameter_count(p) / 1000000 << "M parameters"
          << (p.experts ? " (" + std::to_string(synth_active_parameter_count(p) / 1000000) + "M active)" : std::string()) << "\n";
  auto parsed = parse(args, d, usage.str().c_str());
  if (parsed.help) return 0;
  SynthConfig c = synth_preset(preset);
  if (parsed.vm.count("layers")) {
    int64_t n = parsed.vm["layers"].as<int64_t>();
    SY_CHECK(n >= 1 && n <= c.layers, "--layers must be in [1, " << c.layers << "]");
    c.layers = n;
    c.name.append("-").append(std::to_string(n)).append("layers");
  }
  write_synth_model(c, out, seed);
  std::printf("wrote %s: %s, %lld parameters\n", out.c_str(), c.name.c_str(), static_cast<long long>(synth_parameter_count(c)));
  return 0;
}

}  // namespace sy::cli
