#!/usr/bin/env bash
# Installs what building and testing Switchyard needs: Debian packages for the
# build, and the Python packages the tests use as independent references
# (ONNX Runtime, onnx, numpy, jsonschema, gguf to write GGUF variants). With --tests also xgrammar (for the
# structured-output plugin; scripts/install-xgrammar.sh). Safe to run again.
set -euo pipefail
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
PKGS="cmake ninja-build g++ python3 python3-pip libonnx-dev libprotobuf-dev protobuf-compiler \
  libboost-dev libboost-program-options-dev libboost-filesystem-dev libgtest-dev libbenchmark-dev nlohmann-json3-dev \
  libyaml-cpp-dev libopenblas-dev libssl-dev libcpp-httplib-dev libpcre2-dev libutf8proc-dev pkg-config curl"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi
if [ "${1:-}" = "--tests" ]; then
  python3 -c "import onnx, onnxruntime, onnx_ir, numpy, gguf" 2>/dev/null ||
    python3 -m pip install -q --disable-pip-version-check onnx onnxruntime onnx_ir numpy gguf
  python3 -c "import openai, pytest, jsonschema" 2>/dev/null ||
    python3 -m pip install -q --disable-pip-version-check openai pytest jsonschema
  # References for tokenizer.json (the Hugging Face tokenizers library) and
  # chat templates (jinja2, what transformers renders them with).
  python3 -c "import tokenizers, jinja2" 2>/dev/null ||
    python3 -m pip install -q --disable-pip-version-check tokenizers jinja2
  # An eval harness as users run it against the server (lm-eval's
  # local-completions; the api extra leaves out torch).
  python3 -c "import lm_eval, requests" 2>/dev/null ||
    python3 -m pip install -q --disable-pip-version-check "lm-eval[api]==0.4.13" requests
  # The Python package (pip install .: nanobind, scikit-build-core) and its
  # Ray Serve deployment.
  python3 -c "import nanobind, scikit_build_core, ray.serve, fastapi" 2>/dev/null ||
    python3 -m pip install -q --disable-pip-version-check nanobind scikit-build-core "ray[serve]>=2.49,<3"
  # The fuzzers (scripts/fuzz.sh) build with clang's libFuzzer.
  for p in clang-14 libclang-rt-14-dev; do
    dpkg -s "$p" >/dev/null 2>&1 || { $SUDO apt-get update -qq; DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $p >/dev/null; }
  done
  # Structured output's grammar engine (built once per machine, /opt/xgrammar).
  "$(dirname "$0")/install-xgrammar.sh"
  # Headless Chromium renders the benchmark report in a test.
  command -v chromium >/dev/null || { $SUDO apt-get update -qq; DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null; }
fi
