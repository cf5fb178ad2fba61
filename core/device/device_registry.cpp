#include "device/device_registry.h"

#include <map>
#include <mutex>

#include "base/error.h"

namespace sy {

#ifdef SWITCHYARD_HAS_CUDA
DeviceProvider cuda_device_provider();  // device/cuda/cuda_backend.cpp
#endif

namespace {

DeviceProvider builtin_cuda_provider() {
#ifdef SWITCHYARD_HAS_CUDA
  return cuda_device_provider();
#else
  DeviceProvider p;
  p.probe = [] {
    return DeviceProbe{0, "this build has no CUDA support (the CUDA toolkit was not found, or SWITCHYARD_CUDA=OFF)"};
  };
  p.open = [](int) -> std::shared_ptr<DeviceBackend> { SY_THROW("this build has no CUDA support"); };
  return p;
#endif
}

struct Registry {
  std::mutex mu;
  DeviceProvider cuda = builtin_cuda_provider();
  std::map<int, std::shared_ptr<DeviceBackend>> open_cuda;
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

std::string DeviceSpec::str() const {
  if (automatic) return "auto";
  if (kind == Device::CPU) return "cpu";
  return "cuda:" + std::to_string(index);
}

DeviceSpec parse_device_spec(const std::string& text) {
  DeviceSpec s;
  if (text == "cpu") return s;
  if (text == "auto") {
    s.automatic = true;
    return s;
  }
  if (text == "cuda") {
    s.kind = Device::CUDA;
    return s;
  }
  if (text.rfind("cuda:", 0) == 0 && text.size() > 5 && text.size() <= 8 &&
      text.find_first_not_of("0123456789", 5) == std::string::npos) {
    s.kind = Device::CUDA;
    s.index = std::stoi(text.substr(5));
    return s;
  }
  SY_THROW("device '" << text << "' is not one of: cpu, cuda, cuda:N, auto");
}

DeviceSpec resolve_device(const DeviceSpec& spec, const DeviceProbe& cuda) {
  if (spec.automatic) {
    DeviceSpec r;
    if (cuda.count > 0) r.kind = Device::CUDA;
    return r;
  }
  if (spec.kind == Device::CPU) return spec;
  SY_CHECK(cuda.count > 0, "device '" << spec.str() << "' requested, but there is no CUDA device: " << cuda.why_none);
  SY_CHECK(spec.index < cuda.count, "device '" << spec.str() << "' requested, but this machine has " << cuda.count
                                               << " CUDA device(s) (cuda:0.." << "cuda:" << cuda.count - 1 << ")");
  return spec;
}

DeviceProvider set_cuda_provider(DeviceProvider provider) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  DeviceProvider old = std::move(r.cuda);
  r.cuda = provider.probe ? std::move(provider) : builtin_cuda_provider();
  return old;
}

DeviceProbe probe_cuda() {
  Registry& r = registry();
  std::function<DeviceProbe()> probe;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    probe = r.cuda.probe;
  }
  return probe();
}

std::shared_ptr<DeviceBackend> open_device(const DeviceSpec& resolved) {
  SY_CHECK(!resolved.automatic, "open_device: resolve '" << resolved.str() << "' first");
  if (resolved.kind == Device::CPU) return nullptr;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.open_cuda.find(resolved.index);
  if (it == r.open_cuda.end()) {
    std::shared_ptr<DeviceBackend> b = r.cuda.open(resolved.index);
    SY_CHECK(b, "device '" << resolved.str() << "' could not be opened");
    it = r.open_cuda.emplace(resolved.index, std::move(b)).first;
  }
  return it->second;
}

void close_devices() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.open_cuda.clear();
}

}  // namespace sy
