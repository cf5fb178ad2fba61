#!/usr/bin/env bash
# The GPU check of the CUDA backend, in two halves: the GPU machines lent to
# this project have the CUDA toolkit but not this project's Debian libraries,
# and cannot fetch any.
#
#   scripts/gpu-check.sh bundle   here: builds the GPU targets (Release, CUDA
#       archs 80;90) and packs them with the libraries they need (not CUDA's:
#       the GPU machine has its own) and the shared models into .gpu-bundle/
#       (git-ignored, < 64 MiB, carried to the GPU machine).
#   scripts/gpu-check.sh run      on the GPU machine (device tool: carry
#       .gpu-bundle): every GPU test, required to run (a skip is a failure),
#       the device list with measured copy bandwidth, and decode/prefill
#       tokens/s with MBU on synth 1.1B (fp32->bf16, int8, int4) and 8B
#       (bf16); results in $OUT/gpu-check.json. Sized for < 8 minutes on an
#       H200; the 8B part is skipped if less than 4 minutes remain.
set -euo pipefail
cd "$(dirname "$0")/.."
BUNDLE=.gpu-bundle
SHARED=${SWITCHYARD_SHARED_DIR:-../shared}

bundle() {
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DSWITCHYARD_CUDA=ON -DSWITCHYARD_SHARED_DIR="$(realpath "$SHARED")" >/dev/null
  cmake --build build-gpu -j"${JOBS:-2}" --target switchyard test_gpu bench_device \
    switchyard_attention switchyard_cache switchyard_quantize switchyard_fused switchyard_moe
  rm -rf "$BUNDLE"
  mkdir -p "$BUNDLE"/{bin,lib,shared/models} "$BUNDLE"/plugins/{attention,cache,quantize,fused,moe}
  cp build-gpu/switchyard build-gpu/tests/test_gpu build-gpu/benchmarks/bench_device "$BUNDLE/bin/"
  for p in attention cache quantize fused moe; do cp "build-gpu/plugins/$p/libswitchyard_$p.so" "$BUNDLE/plugins/$p/"; done
  strip "$BUNDLE"/bin/* "$BUNDLE"/plugins/*/*.so
  # The libraries they link that a stock CUDA image lacks; CUDA's own and the
  # C/C++ runtimes come from the GPU machine.
  ldd "$BUNDLE"/bin/* "$BUNDLE"/plugins/*/*.so | awk '/=> \//{print $3}' | sort -u |
    grep -Ev '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libgcc_s|libstdc\+\+|libcuda|libcudart|libcublas|libcublasLt)\.so' |
    while read -r lib; do cp -L "$lib" "$BUNDLE/lib/"; done
  # OpenBLAS alone is 35 MiB: the libraries travel compressed.
  tar -C "$BUNDLE" -cJf "$BUNDLE/lib.tar.xz" lib && rm -rf "$BUNDLE/lib"
  for f in stories260K.onnx stories260K.ref.json tok512.bin llama_mha_tiny_random.onnx llama_mha_tiny_random.ref.json \
           llama_mqa_tiny_random.onnx llama_mqa_tiny_random.ref.json; do
    cp "$SHARED/models/$f" "$BUNDLE/shared/models/"
  done
  du -sh "$BUNDLE"
  local kib; kib=$(du -sk "$BUNDLE" | cut -f1)
  if [ "$kib" -gt $((62 * 1024)) ]; then echo "gpu-check: the bundle is over 62 MiB; the device tool carries 64 MiB" >&2; exit 1; fi
}

run() {
  local start=$SECONDS out=${OUT:-gpu-check-out}
  mkdir -p "$out"
  [ -d "$BUNDLE" ] || { echo "gpu-check: no $BUNDLE here (run 'scripts/gpu-check.sh bundle' first and carry it)" >&2; exit 1; }
  rm -rf /tmp/sy-gpu-lib && mkdir -p /tmp/sy-gpu-lib && tar -C /tmp/sy-gpu-lib -xJf "$BUNDLE/lib.tar.xz"
  local cublas_dir
  cublas_dir=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null || true)
  export LD_LIBRARY_PATH="/tmp/sy-gpu-lib/lib:/usr/local/cuda/lib64:${cublas_dir}:${LD_LIBRARY_PATH:-}"
  export SWITCHYARD_SHARED_DIR="$PWD/$BUNDLE/shared" SWITCHYARD_SOURCE_DIR="$PWD" SWITCHYARD_PLUGIN_DIR="$PWD/$BUNDLE/plugins"
  export SWITCHYARD_REQUIRE_GPU=1
  # The example manifests name the models as ../shared beside the repository.
  [ -e ../shared ] || ln -s "$PWD/$BUNDLE/shared" ../shared
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt" || true
  "$BUNDLE/bin/switchyard" devices --bandwidth --json | tee "$out/devices.json"
  set +e
  "$BUNDLE/bin/test_gpu" --gtest_output="json:$out/gpu-tests.json" 2>&1 | tee "$out/gpu-tests.log"
  local tests_rc=${PIPESTATUS[0]}
  set -e
  local bench_rc=0
  # bench PRESET SCHEMES DECODE: a synth model on the GPU, deleted afterwards.
  bench() {
    local m=/tmp/synth-$1.onnx
    if ! "$BUNDLE/bin/switchyard" synth --preset "$1" --out "$m" >/dev/null ||
       ! "$BUNDLE/bin/bench_device" --model "$m" --device cuda --schemes "$2" --decode "$3" --prefill 512 --threads 8 \
           --out "$out/bench-$1.json" > "$out/bench-$1.txt" 2>&1; then
      bench_rc=1
    fi
    cat "$out/bench-$1.txt" || true
    rm -f "$m" "$m.data"
  }
  bench tinyllama-1.1b fp32,int8,int4 64
  if [ "$bench_rc" -eq 0 ] && [ $((SECONDS - start)) -lt 240 ]; then
    bench llama3-8b fp32 32
  else
    echo "gpu-check: skipping the 8B benchmark (1.1B failed, or $((SECONDS - start)) s already spent)" | tee "$out/bench-llama3-8b.txt"
  fi
  python3 - "$out" "$tests_rc" "$((SECONDS - start))" <<'PY'
import json, os, re, sys
out, rc, secs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def load(name):
    p = os.path.join(out, name)
    return json.load(open(p)) if os.path.exists(p) else None
tests = load("gpu-tests.json") or {}
cases = [c for s in tests.get("testsuites", []) for c in s.get("testsuite", [])]
log = open(os.path.join(out, "gpu-tests.log")).read()
result = {
    "seconds": secs,
    "devices": load("devices.json"),
    "tests": {"total": len(cases), "failed": sum(1 for c in cases if c.get("failures")),
              "skipped": sum(1 for c in cases if c.get("result") == "SKIPPED"), "exit_code": rc},
    "logit_diffs": re.findall(r"\[ (\S+) \] (.*max \|gpu - cpu\| = \S+.*)", log),
    "bench_1_1b": load("bench-tinyllama-1.1b.json"),
    "bench_8b": load("bench-llama3-8b.json"),
}
json.dump(result, open(os.path.join(out, "gpu-check.json"), "w"), indent=2)
print(json.dumps(result["tests"]), "->", os.path.join(out, "gpu-check.json"))
PY
  [ "$tests_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ]
}

case "${1:-}" in
  bundle) bundle ;;
  run) run ;;
  *) echo "usage: scripts/gpu-check.sh bundle | run" >&2; exit 2 ;;
esac
