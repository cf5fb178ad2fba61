#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) and runs each one.
#   scripts/fuzz.sh [SECONDS_EACH]          CI: a bounded run (default 30 s each)
#   scripts/fuzz.sh --runs N                until N executions each (acceptance: 1000000)
# The corpus grows in build-fuzz/corpus/<target> (seeded from tests/fuzz/corpus,
# never written back). Any crash, leak or sanitizer report fails the script and
# leaves the crashing input in build-fuzz/artifacts/.
set -euo pipefail
cd "$(dirname "$0")/.."
LIMIT=(-max_total_time="${1:-30}")
if [[ "${1:-}" == "--runs" ]]; then LIMIT=(-runs="$2"); fi
BUILD=build-fuzz
CXX=${FUZZ_CXX:-clang++-14}
CC=${FUZZ_CC:-clang-14}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_CXX_COMPILER="$CXX" -DCMAKE_C_COMPILER="$CC" \
  -DSWITCHYARD_FUZZ=ON -DSWITCHYARD_BUILD_TESTS=OFF -DSWITCHYARD_BUILD_BENCHMARKS=OFF -DSWITCHYARD_WERROR=ON \
  -DSWITCHYARD_CUDA=OFF > /dev/null
cmake --build "$BUILD" -j"${JOBS:-2}" --target fuzz_onnx_import fuzz_manifest fuzz_tokenizer fuzz_request fuzz_hf_tokenizer fuzz_chat_template fuzz_gguf
mkdir -p "$BUILD/artifacts"
declare -A CORPUS=([fuzz_onnx_import]=onnx [fuzz_manifest]=manifest [fuzz_tokenizer]=tokenizer [fuzz_request]=request
                  [fuzz_hf_tokenizer]=hf_tokenizer [fuzz_chat_template]=chat_template [fuzz_gguf]=gguf)
declare -A EXTRA=([fuzz_manifest]="-dict=tests/fuzz/manifest.dict" [fuzz_request]="-dict=tests/fuzz/request.dict"
                  [fuzz_onnx_import]="-max_len=65536" [fuzz_tokenizer]="-max_len=4096" [fuzz_hf_tokenizer]="-max_len=8192"
                  [fuzz_chat_template]="-max_len=8192 -dict=tests/fuzz/jinja.dict" [fuzz_gguf]="-max_len=65536")
TARGETS=${FUZZ_TARGETS:-fuzz_onnx_import fuzz_manifest fuzz_tokenizer fuzz_request fuzz_hf_tokenizer fuzz_chat_template fuzz_gguf}
# One fuzzer per core at a time: each gets its full time, the stage half the wall time.
run_one() {
  local t=$1 work="$BUILD/corpus/$1"
  mkdir -p "$work"
  # ASAN: leaks fail the run; UBSan: any report is fatal.
  if ! ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
      "$BUILD/tests/fuzz/$t" "$work" "tests/fuzz/corpus/${CORPUS[$t]}" ${EXTRA[$t]} "${LIMIT[@]}" -rss_limit_mb=2048 \
      -malloc_limit_mb=1024 -timeout=10 -artifact_prefix="$BUILD/artifacts/$t-" -print_final_stats=1 > "$BUILD/$t.log" 2>&1; then
    echo "FAIL $t (see $BUILD/$t.log and $BUILD/artifacts/)" > "$BUILD/$t.status"
    return
  fi
  echo ok > "$BUILD/$t.status"
}
for t in $TARGETS; do
  rm -f "$BUILD/$t.status"
  run_one "$t" &
  while [ "$(jobs -rp | wc -l)" -ge "${JOBS:-2}" ]; do wait -n || true; done
done
wait
status=0
for t in $TARGETS; do
  if [ "$(cat "$BUILD/$t.status" 2>/dev/null)" != ok ]; then
    cat "$BUILD/$t.status" 2>/dev/null || echo "FAIL $t (no status)"
    tail -n 40 "$BUILD/$t.log"
    status=1
  fi
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$BUILD/$t.log" | grep -o '[0-9]*$' || echo '?')
  corpus=$(ls "$BUILD/corpus/$t" | wc -l)
  echo "$t: $runs executions, corpus $corpus files"
done
exit $status
