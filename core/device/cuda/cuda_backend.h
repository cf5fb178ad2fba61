// The CUDA device: cudaMalloc'd memory behind the caching allocator, one
// non-blocking stream per device that every kernel, copy and cuBLAS call of
// the session is ordered on, and the cuBLAS handle bound to that stream.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "device/device_backend.h"

namespace sy {

class CudaBackend : public DeviceBackend {
 public:
  explicit CudaBackend(int index);
  ~CudaBackend() override;

  std::string description() const override { return description_; }
  void* stream() override { return stream_; }
  void synchronize() override;
  cudaStream_t cuda_stream() const { return stream_; }
  cublasHandle_t cublas() const { return cublas_; }
  int compute_capability() const { return cc_major_ * 10 + cc_minor_; }
  // Peak memory bandwidth from the device's attributes (GB/s), for reports.
  double theoretical_bandwidth_gbs() const { return bandwidth_gbs_; }
  // Measured device-to-device copy bandwidth (bytes read + written per
  // second, GB/s), best of `reps`: the denominator of MBU on this device.
  double measure_copy_bandwidth_gbs(size_t bytes = size_t{1} << 30, int reps = 10);

 protected:
  void copy_to_device(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override;

 private:
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  std::string description_;
  int cc_major_ = 0, cc_minor_ = 0;
  double bandwidth_gbs_ = 0;
};

// The backend of a CUDA kernel's context (throws if it is not a CUDA one).
CudaBackend& cuda_backend_of(DeviceBackend* backend);

}  // namespace sy
