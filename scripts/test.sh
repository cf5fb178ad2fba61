#!/usr/bin/env bash
# Builds Switchyard with AddressSanitizer + UBSan and warnings as errors, and
# runs the whole test suite. This is what CI runs (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --tests
BUILD=${BUILD_DIR:-build-ci}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSWITCHYARD_SANITIZE=ON -DSWITCHYARD_WERROR=ON -DSWITCHYARD_BUILD_BENCHMARKS=OFF \
  -DPython3_EXECUTABLE="$(command -v python3)"
cmake --build "$BUILD" -j2
cd "$BUILD"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --output-on-failure -j2
