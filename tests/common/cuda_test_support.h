// GPU tests skip, visibly, where there is no CUDA device: ctest reports them
// as "Skipped" (SKIP_REGULAR_EXPRESSION in tests/CMakeLists.txt), never as
// passed.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>

#include "device/device_registry.h"

// SWITCHYARD_REQUIRE_GPU=1 (scripts/gpu-check.sh) turns the skip into a failure.
#define SY_REQUIRE_CUDA()                                                                  \
  do {                                                                                     \
    ::sy::DeviceProbe sy_probe_ = ::sy::probe_cuda();                                      \
    if (sy_probe_.count == 0) {                                                            \
      const char* sy_req_ = std::getenv("SWITCHYARD_REQUIRE_GPU");                         \
      if (sy_req_ && *sy_req_ == '1') FAIL() << "no CUDA device: " << sy_probe_.why_none;  \
      GTEST_SKIP() << "skipped: no CUDA device (" << sy_probe_.why_none << ")";           \
    }                                                                                      \
  } while (0)
