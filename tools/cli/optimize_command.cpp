// switchyard optimize: run a profile's passes once and write the rewritten
// graph (quantized weights, fused attention) as ONNX, so a deployment loads
// it without re-running them. The graph is written as the engine runs it: in
// a step-engine profile that includes the logits-selection input
// (`logits_indices`), which a reload recognises and keeps.
#include <cstdio>

#include "cli_support.h"
#include "commands.h"

namespace sy::cli {

int cmd_optimize(const std::vector<std::string>& args) {
  EngineFlags mf;
  std::string out;
  po::options_description d("optimize options");
  d.add_options()("help,h", "show this help");
  mf.add(d);
  d.add_options()("out,o", po::value(&out)->required(), "where to write the optimized ONNX model");
  auto p = parse(args, d, "usage: switchyard optimize --manifest F [--profile P] --out model.opt.onnx");
  if (p.help) return 0;
  EngineOptions options = mf.options();
  options.graph_only = true;
  auto engine = Engine::open(options);
  SY_CHECK(!engine->describe()["passes"].empty(), "the profile selects no passes: nothing to optimize");
  const OnnxExportSummary s = engine->export_onnx(out);
  std::printf("wrote %s: %zu nodes, %zu initializers, %.1f MB of weights%s\n", out.c_str(), s.nodes, s.initializers,
              static_cast<double>(s.initializer_bytes) / 1e6, s.external_data ? (" in " + out + ".data").c_str() : "");
  std::printf("load it with the same plugins and no passes (their kernels run the rewritten nodes)\n");
  return 0;
}

}  // namespace sy::cli
