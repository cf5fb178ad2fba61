#include "cli_support.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

namespace sy::cli {

namespace fs = std::filesystem;

Parsed parse(const std::vector<std::string>& args, const po::options_description& desc, const char* usage) {
  Parsed p;
  po::store(po::command_line_parser(args).options(desc).run(), p.vm);
  if (p.vm.count("help")) {
    std::cout << usage << "\n" << desc;
    p.help = true;
    return p;
  }
  po::notify(p.vm);
  return p;
}

std::vector<int> parse_ids(const std::string& s) {
  std::vector<int> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    long v = 0;
    try {
      v = std::stol(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    SY_CHECK(used > 0 && item.find_first_not_of(" \t", used) == std::string::npos && v >= 0 && v <= INT32_MAX,
             "--prompt-ids: '" << item << "' is not a token id");
    ids.push_back(static_cast<int>(v));
  }
  SY_CHECK(!ids.empty(), "the prompt is empty (--prompt-ids has no ids)");
  return ids;
}

void EngineFlags::add(po::options_description& d) {
  d.add_options()("model,m", po::value(&model), "ONNX decoder model (overrides the manifest's)")(
      "manifest", po::value(&manifest), "YAML manifest: model, plugins, passes, components, profiles")(
      "profile", po::value(&profile), "profile of the manifest to use")(
      "threads", po::value(&threads)->default_value(0), "compute threads (0: the manifest's, else one per core)")(
      "device", po::value(&device), "cpu, cuda, cuda:N or auto (overrides the manifest's 'device:')")(
      "max-context", po::value(&max_context)->default_value(0),
      "context limit in tokens (0: the manifest's, the model's metadata, else 4096)")(
      "dequantize", po::bool_switch(&dequantize),
      "a GGUF model's weights all as float32, as transformers loads them (default: Q8_0/Q4_0/Q4_1 stay quantized)");
}

std::string default_manifest() {
  if (const char* e = std::getenv("SWITCHYARD_DEFAULT_MANIFEST")) return e;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  // Beside the binary in the build tree, or in the install prefix's share/.
  for (const fs::path& p : {exe.parent_path() / "share/switchyard/default.yaml", exe.parent_path() / "../share/switchyard/default.yaml"})
    if (fs::exists(p)) return p.lexically_normal().string();
  return {};
}

EngineOptions EngineFlags::options() const {
  EngineOptions o;
  // Without --manifest the default manifest applies: its top level runs the
  // graph as exported with the plugins real models need, and its profiles
  // (--profile paged, prefix) the step engine.
  o.manifest = manifest.empty() ? default_manifest() : manifest;
  SY_CHECK(!o.manifest.empty() || profile.empty(), "--profile needs --manifest (no default manifest was found beside the binary)");
  SY_CHECK(!o.manifest.empty() || !model.empty(), "no model: give --model or a --manifest with 'model:'");
  if (!device.empty()) check_device_spec(device);  // a bad --device is named before anything loads
  o.profile = profile;
  o.model = model;
  o.device = device;
  o.threads = threads;
  o.max_context = max_context;
  o.gguf_dequantize = dequantize;
  return o;
}

std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  SY_CHECK(f, path << ": cannot read the file");
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

}  // namespace sy::cli
