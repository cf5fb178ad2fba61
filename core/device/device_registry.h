// Which device a session runs on, and the one backend object per device per
// process (like ggml-backend's registry): the manifest's `device:` is parsed
// here, resolved against what the machine has, and opened once. The CUDA
// provider is the real one in a CUDA build and "none" otherwise; tests swap
// in a fake provider to exercise the host code without a GPU.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "device/device_backend.h"

namespace sy {

struct DeviceSpec {
  Device kind = Device::CPU;
  int index = 0;
  bool automatic = false;  // "auto": CUDA when present, else CPU
  std::string str() const;
};

// "cpu", "cuda", "cuda:N" or "auto"; throws naming the text otherwise.
DeviceSpec parse_device_spec(const std::string& text);

struct DeviceProbe {
  int count = 0;
  std::string why_none;  // why count is 0 (no driver, no device, built without CUDA)
};

// The concrete device for a spec given what the probe found. "auto" falls back
// to the CPU; an explicit CUDA request that cannot be met is an error that
// says why (no device, index out of range).
DeviceSpec resolve_device(const DeviceSpec& spec, const DeviceProbe& cuda);

struct DeviceProvider {
  std::function<DeviceProbe()> probe;
  std::function<std::shared_ptr<DeviceBackend>(int index)> open;
};

// Replaces the CUDA provider (tests); returns the previous one. Backends
// already opened stay open until close_devices().
DeviceProvider set_cuda_provider(DeviceProvider provider);
DeviceProbe probe_cuda();

// Null for the CPU. The same backend for the same device every time. Plugins
// reach a session's backend through the HostContext of each call, never
// through process-global state.
std::shared_ptr<DeviceBackend> open_device(const DeviceSpec& resolved);
void close_devices();

}  // namespace sy
