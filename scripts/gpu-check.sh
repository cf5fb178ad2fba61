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
#       (bf16); results in $OUT/gpu-check.json. Each GPU test runs in its
#       own process under a deadline (GPU_TEST_DEADLINE, 90 s); a hang's
#       stacks go to $OUT/hangs.txt. Sized for < 8 minutes on an H200; the
#       8B part is skipped if less than 4 minutes remain.
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
  # Not stripped: a hang's stacks (run: hangs.txt) need the function names.
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
  local kib tree; kib=$(du -sk "$BUNDLE" | cut -f1)
  if [ "$kib" -gt $((62 * 1024)) ]; then echo "gpu-check: the bundle is over 62 MiB; the device tool carries 64 MiB" >&2; exit 1; fi
  # The device tool carries the tracked files too, 64 MiB in all: the real
  # exports under tests/models/real (which test_gpu does not read) must be
  # moved out of the checkout (and ignored) for the call when both exceed it.
  tree=$(git ls-files -z | du -ck --files0-from=- 2>/dev/null | tail -1 | cut -f1)
  if [ $((kib + tree)) -gt $((63 * 1024)) ]; then
    echo "gpu-check: bundle ${kib} KiB + tracked files ${tree} KiB exceed what the device tool carries;" \
         "move tests/models/real aside (and exclude it) for the call" >&2
  fi
}

# One GPU test in its own process, killed after GPU_TEST_DEADLINE seconds;
# a hung one first has every thread's stack written to hangs.txt (cuda-gdb,
# else gdb), so one hang costs a deadline, not the lease.
run_test() {
  local name=$1 json=$2 log=$3 deadline=${GPU_TEST_DEADLINE:-90} waited=0 pid rc
  "$BUNDLE/bin/test_gpu" --gtest_filter="$name" --gtest_output="json:$json" >>"$log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$waited" -ge "$deadline" ]; then
      echo "gpu-check: $name still running after ${deadline} s: stacks to hangs.txt, then killed" | tee -a "$log"
      { echo "== $name"; local dbg; dbg=$(command -v cuda-gdb || command -v gdb || true)
        [ -n "$dbg" ] && timeout 60 "$dbg" -p "$pid" -batch -ex "thread apply all bt" 2>&1 || echo "(no debugger)"; } >>"$out/hangs.txt"
      kill -9 "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
      return 1
    fi
    sleep 1
    waited=$((waited + 1))
  done
  wait "$pid"
  rc=$?
  return $rc
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
  local tests_rc=0 i=0 suite="" line
  : >"$out/gpu-tests.log"
  rm -rf /tmp/sy-gpu-tests && mkdir -p /tmp/sy-gpu-tests  # per-test JSON (few files come back from $OUT)
  while IFS= read -r line; do
    case "$line" in
      -*) i=$((i + 1)); run_test "$suite${line#-}" "/tmp/sy-gpu-tests/t$i.json" "$out/gpu-tests.log" || tests_rc=1 ;;
      *) suite=$line ;;
    esac
  done < <("$BUNDLE/bin/test_gpu" --gtest_list_tests | sed -E 's/ *#.*//; s/^ +/-/')
  cat "$out/gpu-tests.log"
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
cases = []
tdir = "/tmp/sy-gpu-tests"
for name in sorted(os.listdir(tdir)) if os.path.isdir(tdir) else []:
    t = json.load(open(os.path.join(tdir, name)))
    cases += [c for s in t.get("testsuites", []) for c in s.get("testsuite", [])]
log = open(os.path.join(out, "gpu-tests.log")).read()
result = {
    "seconds": secs,
    "devices": load("devices.json"),
    "tests": {"total": len(cases), "failed": sum(1 for c in cases if c.get("failures")),
              "hung": open(os.path.join(out, "hangs.txt")).read().count("== ") if os.path.exists(os.path.join(out, "hangs.txt")) else 0,
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
