#!/usr/bin/env bash
# What CI runs (.ci/run), warnings as errors throughout:
#   1. the whole test suite built with AddressSanitizer + UBSan (LeakSanitizer on);
#   2. the threaded parts built with ThreadSanitizer (scripts/tsan.sh);
#   3. every fuzzer for a bounded time (scripts/fuzz.sh, FUZZ_SECONDS each).
# Stage 1 builds every target, CUDA ones and benchmarks included (GPU tests
# report Skipped without a GPU); stages 2 and 3 test CPU-side code only and
# build without CUDA.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --tests
BUILD=${BUILD_DIR:-build-ci}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSWITCHYARD_SANITIZE=ON -DSWITCHYARD_WERROR=ON -DSWITCHYARD_BUILD_BENCHMARKS=ON \
  -DPython3_EXECUTABLE="$(command -v python3)"
cmake --build "$BUILD" -j2
(cd "$BUILD" && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --output-on-failure -j2)
scripts/tsan.sh
scripts/fuzz.sh "${FUZZ_SECONDS:-30}"
