// Error checks for CUDA runtime and cuBLAS calls: a failure becomes an
// sy::Error naming the call and the library's own message.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "base/error.h"

#define SY_CUDA_CHECK(expr)                                                                    \
  do {                                                                                         \
    cudaError_t sy_cuda_err_ = (expr);                                                         \
    if (sy_cuda_err_ != cudaSuccess)                                                           \
      SY_THROW(#expr << " failed: " << cudaGetErrorName(sy_cuda_err_) << ": " << cudaGetErrorString(sy_cuda_err_)); \
  } while (0)

#define SY_CUBLAS_CHECK(expr)                                                                   \
  do {                                                                                          \
    cublasStatus_t sy_blas_err_ = (expr);                                                       \
    if (sy_blas_err_ != CUBLAS_STATUS_SUCCESS)                                                  \
      SY_THROW(#expr << " failed: " << cublasGetStatusName(sy_blas_err_) << ": " << cublasGetStatusString(sy_blas_err_)); \
  } while (0)
