#include "device/cuda/cuda_backend.h"

#include <iomanip>
#include <sstream>

#include "device/cuda/cuda_check.h"
#include "device/device_registry.h"

namespace sy {
namespace {

class CudaMemory : public MemoryResource {
 public:
  explicit CudaMemory(int index) : index_(index) {}
  void* allocate(size_t bytes) override {
    if (cudaSetDevice(index_) != cudaSuccess) return nullptr;
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
      (void)cudaGetLastError();  // clear the sticky-free error so the retry after emptying the cache can succeed
      return nullptr;
    }
    return p;
  }
  void deallocate(void* ptr, size_t) override {
    (void)cudaSetDevice(index_);
    (void)cudaFree(ptr);
  }
  std::string name() const override { return "cuda:" + std::to_string(index_); }

 private:
  int index_;
};

}  // namespace

CudaBackend::CudaBackend(int index) : DeviceBackend(Device::CUDA, index, std::make_unique<CudaMemory>(index)) {
  SY_CUDA_CHECK(cudaSetDevice(index));
  cudaDeviceProp prop{};
  SY_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  cc_major_ = prop.major;
  cc_minor_ = prop.minor;
  SY_CHECK(cc_major_ >= 8, "cuda:" << index << " (" << prop.name << ") has compute capability " << cc_major_ << "."
                                   << cc_minor_ << "; this build needs 8.0 or newer (bf16 tensor cores)");
  int mem_clock_khz = 0, bus_bits = 0;
  (void)cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, index);
  (void)cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, index);
  bandwidth_gbs_ = 2.0 * mem_clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;
  SY_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  SY_CUBLAS_CHECK(cublasCreate(&cublas_));
  SY_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
  std::ostringstream os;
  os << "cuda:" << index << " " << prop.name << " (sm_" << cc_major_ << cc_minor_ << ", " << std::fixed
     << std::setprecision(1) << static_cast<double>(prop.totalGlobalMem) / (1ull << 30) << " GiB)";
  description_ = os.str();
}

CudaBackend::~CudaBackend() {
  (void)cudaSetDevice(index());
  if (stream_) (void)cudaStreamSynchronize(stream_);
  allocator().empty_cache();
  if (cublas_) (void)cublasDestroy(cublas_);
  if (stream_) (void)cudaStreamDestroy(stream_);
}

void CudaBackend::synchronize() { SY_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

void CudaBackend::copy_to_device(void* dst, const void* src, size_t bytes) {
  // From pageable memory the call returns once the source is staged, so the
  // host buffer may be reused right away.
  SY_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
}

void CudaBackend::copy_to_host(void* dst, const void* src, size_t bytes) {
  SY_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  SY_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

double CudaBackend::measure_copy_bandwidth_gbs(size_t bytes, int reps) {
  Tensor a = allocate(DType::U8, Shape{static_cast<int64_t>(bytes)});
  Tensor b = allocate(DType::U8, Shape{static_cast<int64_t>(bytes)});
  SY_CUDA_CHECK(cudaMemsetAsync(a.raw(), 1, bytes, stream_));
  cudaEvent_t start, stop;
  SY_CUDA_CHECK(cudaEventCreate(&start));
  SY_CUDA_CHECK(cudaEventCreate(&stop));
  float best_ms = 0;
  for (int i = 0; i <= reps; ++i) {  // the first is a warm-up
    SY_CUDA_CHECK(cudaEventRecord(start, stream_));
    SY_CUDA_CHECK(cudaMemcpyAsync(b.raw(), a.raw(), bytes, cudaMemcpyDeviceToDevice, stream_));
    SY_CUDA_CHECK(cudaEventRecord(stop, stream_));
    SY_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    SY_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (i > 0 && (best_ms == 0 || ms < best_ms)) best_ms = ms;
  }
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(stop);
  return 2.0 * static_cast<double>(bytes) / (best_ms * 1e-3) / 1e9;
}

CudaBackend& cuda_backend_of(DeviceBackend* backend) {
  auto* b = dynamic_cast<CudaBackend*>(backend);
  SY_CHECK(b, "a CUDA kernel was given no CUDA device");
  return *b;
}

DeviceProvider cuda_device_provider() {
  DeviceProvider p;
  p.probe = [] {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return DeviceProbe{0, std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e)};
    }
    if (n == 0) return DeviceProbe{0, "the CUDA driver reports no devices"};
    return DeviceProbe{n, ""};
  };
  p.open = [](int index) -> std::shared_ptr<DeviceBackend> { return std::make_shared<CudaBackend>(index); };
  return p;
}

}  // namespace sy
