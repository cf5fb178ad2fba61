#!/usr/bin/env bash
# Builds xgrammar (Apache-2.0, the grammar engine vLLM, SGLang and TensorRT-LLM
# use) from its PyPI source package and installs its static C++ library and
# headers under a prefix CMake finds (default /opt/xgrammar). Debian has no
# package and the PyPI wheel carries no headers; the source package builds
# offline with CMake. Once per machine: an existing install of the pinned
# version is kept.
#   scripts/install-xgrammar.sh [PREFIX]
set -euo pipefail
VERSION=0.2.9
SHA256=87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90
PREFIX=${1:-${XGRAMMAR_PREFIX:-/opt/xgrammar}}
STAMP="$PREFIX/share/switchyard-xgrammar-version"
if [ "$(cat "$STAMP" 2>/dev/null)" = "$VERSION" ]; then
  echo "xgrammar $VERSION already installed in $PREFIX"
  exit 0
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# The simple index names the file and its hash; the hash is checked against the pin.
INDEX=${PIP_INDEX_URL:-https://pypi.org/simple}
URL=$(curl -sSfL "$INDEX/xgrammar/" | grep -o "href=\"[^\"]*xgrammar-$VERSION.tar.gz[^\"]*\"" | head -1 | sed 's/^href="//; s/"$//; s/#.*//')
[ -n "$URL" ] || { echo "install-xgrammar: xgrammar-$VERSION.tar.gz not found in $INDEX" >&2; exit 1; }
case "$URL" in http*) ;; *) URL="$INDEX/xgrammar/$URL" ;; esac
curl -sSfL -o "$WORK/src.tar.gz" "$URL"
echo "$SHA256  $WORK/src.tar.gz" | sha256sum -c --quiet
tar xzf "$WORK/src.tar.gz" -C "$WORK"
# The source package's cmake/config.cmake turns the Python bindings on; a
# config.cmake in the build folder is read instead of it.
mkdir -p "$WORK/build"
printf 'set(XGRAMMAR_BUILD_PYTHON_BINDINGS OFF)\nset(XGRAMMAR_BUILD_CXX_TESTS OFF)\n' > "$WORK/build/config.cmake"
# -O2 without link-time optimization (its default is -O3 -flto): a third of
# the build time on two cores. The matcher's mask fill is what runs per token.
cmake -S "$WORK/xgrammar-$VERSION" -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS="-fno-lto" -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" \
  -DCMAKE_INSTALL_PREFIX="$PREFIX" > /dev/null
cmake --build "$WORK/build" -j"${JOBS:-2}"
SUDO=""
[ -w "$(dirname "$PREFIX")" ] || SUDO="sudo"
$SUDO cmake --install "$WORK/build" > /dev/null
$SUDO mkdir -p "$PREFIX/share"
echo "$VERSION" | $SUDO tee "$STAMP" > /dev/null
echo "xgrammar $VERSION installed in $PREFIX"
