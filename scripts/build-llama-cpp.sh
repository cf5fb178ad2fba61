#!/usr/bin/env bash
# Builds llama.cpp's llama-bench, llama-batched-bench, llama-quantize,
# llama-tokenize and llama-perplexity for the peer benchmarks (benchmarks/peer/peer_bench.py,
# benchmarks/gguf) and the GGUF references (tests/generators), from the llama.cpp sources PyPI's
# llama-cpp-python source package carries, natively for this CPU (as its
# users build it). Prints the folder holding the two programs.
#   scripts/build-llama-cpp.sh [build-dir]     (default /tmp/llama-build)
set -euo pipefail
BUILD="${1:-/tmp/llama-build}"
SRC="$BUILD-src"
TARGETS="llama-bench llama-batched-bench llama-quantize llama-tokenize llama-perplexity"
missing=0
for t in $TARGETS; do [ -x "$BUILD/bin/$t" ] || missing=1; done
if [ "$missing" = 1 ]; then
  mkdir -p "$SRC"
  if [ ! -d "$SRC/llama.cpp" ]; then
    pip download --no-deps --no-binary :all: llama-cpp-python -d "$SRC" >&2
    tar xzf "$SRC"/llama_cpp_python-*.tar.gz -C "$SRC"
    mv "$SRC"/llama_cpp_python-*/vendor/llama.cpp "$SRC/llama.cpp"
  fi
  # On a CPU with AMX, GCC 12's native build of ggml's AMX kernels faults
  # (it drops the stores to the tile configuration on the stack, and the
  # first tile load is an illegal instruction): build those with clang.
  COMPILERS=""
  if grep -qw amx_int8 /proc/cpuinfo && command -v clang++-14 >/dev/null; then
    COMPILERS="-DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14"
  fi
  # shellcheck disable=SC2086
  cmake -S "$SRC/llama.cpp" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF $COMPILERS \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF >&2
  cmake --build "$BUILD" -j"${JOBS:-2}" --target $TARGETS >&2
fi
echo "$BUILD/bin"
