// GPU tests skip, visibly, where there is no CUDA device: ctest reports them
// as "Skipped" (SKIP_REGULAR_EXPRESSION in tests/CMakeLists.txt), never as
// passed.
#pragma once
#include <gtest/gtest.h>

#include "device/device_registry.h"

#define SY_REQUIRE_CUDA()                                                                  \
  do {                                                                                     \
    ::sy::DeviceProbe sy_probe_ = ::sy::probe_cuda();                                      \
    if (sy_probe_.count == 0) GTEST_SKIP() << "skipped: no CUDA device (" << sy_probe_.why_none << ")"; \
  } while (0)
