#!/usr/bin/env bash
# Fetches real chat templates of the tool-calling families (Qwen, Hermes,
# Llama 3.x, Mistral, DeepSeek, Granite, Command-R, gpt-oss, ...) for the
# tool-call and template tests: llama.cpp keeps the templates of the models
# it supports, as published on the Hugging Face Hub, in models/templates/,
# and PyPI's llama-cpp-python source package carries that folder. The
# package is kept in a cache (SWITCHYARD_CACHE, default ~/.cache/switchyard)
# and only the templates are unpacked. Prints the templates' folder.
set -euo pipefail
VERSION=0.3.36
CACHE="${SWITCHYARD_CACHE:-$HOME/.cache/switchyard}/chat-templates"
OUT="$CACHE/templates-$VERSION"
if [ ! -s "$OUT/Qwen-Qwen2.5-7B-Instruct.jinja" ]; then
  mkdir -p "$CACHE/sdist"
  ls "$CACHE"/sdist/llama_cpp_python-$VERSION.tar.gz >/dev/null 2>&1 ||
    python3 -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$CACHE/sdist" >&2
  python3 - "$CACHE/sdist/llama_cpp_python-$VERSION.tar.gz" "$OUT" <<'PY'
import os, shutil, sys, tarfile
sdist, out = sys.argv[1], sys.argv[2]
tmp = out + ".part"
shutil.rmtree(tmp, ignore_errors=True)
os.makedirs(tmp)
with tarfile.open(sdist) as t:
    for m in t.getmembers():
        if "/models/templates/" in m.name and m.name.endswith(".jinja") and m.isfile():
            with t.extractfile(m) as src, open(os.path.join(tmp, os.path.basename(m.name)), "wb") as dst:
                shutil.copyfileobj(src, dst)
shutil.rmtree(out, ignore_errors=True)
os.rename(tmp, out)
PY
fi
echo "$OUT"
