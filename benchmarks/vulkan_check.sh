#!/usr/bin/env bash
# Produces docs/benchmarks.md, "The GPU machine": the Vulkan/lavapipe paragraph (the gpu tests passing on lavapipe).
# The GPU path on this machine: llama.cpp's Vulkan backend on Mesa's lavapipe (a Vulkan driver
# that runs on the CPU), as llama.cpp's own CI runs it.
#
#   bash benchmarks/vulkan_check.sh                 # build (once per machine), then the gpu tests
#   bash benchmarks/vulkan_check.sh --build-only    # only the build
#   bash benchmarks/vulkan_check.sh --out DIR       # where the report goes (default /tmp/vulkan-check)
#
# 1. Debian's mesa-vulkan-drivers, libvulkan-dev, glslc and spirv-headers (installed with apt-get when missing,
#    as root).
# 2. llama-cpp-python, the version installed here, built from its source distribution with
#    -DGGML_VULKAN=on into a virtual environment of its own that sees this machine's other
#    packages (specdec itself, numpy, the test extra): $SPECDEC_VULKAN_ENV, default
#    ~/.cache/specdec/vulkan-VERSION. It is kept: a second run on the same machine reuses it.
#    The build log is OUT/build.log.
# 3. The tests marked `gpu` (tests/gpu), in that environment, with every layer of both models
#    on the Vulkan device: doctor, greedy identity (the built-in pair, SmolLM2 -> Gemma across
#    vocabularies, and against this machine's CPU-only build), audit at T = 0.8, partial offload,
#    and numpy imported before specdec_cli. Each test writes what it saw to OUT/*.json.
#    llama.cpp passes over CPU-type Vulkan devices unless they are named, so this sets
#    GGML_VK_VISIBLE_DEVICES=0 (lavapipe) unless it is set already.
#
# Exit code: pytest's (0: every gpu test passed), 2 for a failed build or bad usage.
# Left out: CUDA (gpu_check.sh, on a lent device) and timing: lavapipe's speed says nothing
# about a real GPU's.
set -euo pipefail
cd "$(dirname "$0")/.."

build_only=0
out=${OUT:-/tmp/vulkan-check}
while [ $# -gt 0 ]; do
  case "$1" in
    --build-only) build_only=1 ;;
    --out) out=$2; shift ;;
    *) echo "usage: vulkan_check.sh [--build-only] [--out DIR]" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$out"
out=$(cd "$out" && pwd)

missing=()
for pkg in mesa-vulkan-drivers libvulkan-dev glslc spirv-headers; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "[vulkan_check] missing Debian packages: ${missing[*]} (apt-get install them as root)" >&2
    exit 2
  fi
  echo "[vulkan_check] installing ${missing[*]} ..." >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

VERSION=$(python3 -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))')
ENV=${SPECDEC_VULKAN_ENV:-${XDG_CACHE_HOME:-$HOME/.cache}/specdec/vulkan-$VERSION}
HEADERS=$ENV.headers  # newer Vulkan headers, when the system's are too old (kept beside the environment)

# llama.cpp's Vulkan backend uses VK_EXT_layer_settings, which Debian 12's headers (1.3.239) lack:
# then the headers alone come from Debian 13's libvulkan-dev, unpacked beside the environment,
# never installed (the loader and driver stay the system's; apt's own sources are not touched).
vulkan_include=
if ! grep -q VK_EXT_layer_settings /usr/include/vulkan/vulkan_core.h 2>/dev/null; then
  if [ ! -f "$HEADERS/usr/include/vulkan/vulkan.hpp" ]; then
    echo "[vulkan_check] the system's Vulkan headers lack VK_EXT_layer_settings: unpacking Debian 13's libvulkan-dev into $HEADERS ..." >&2
    apt_tmp=$(mktemp -d)
    mkdir -p "$apt_tmp/parts" "$apt_tmp/lists/partial" "$apt_tmp/cache/archives/partial"
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" >"$apt_tmp/sources.list"
    apt_opts=(-o "Dir::Etc::SourceList=$apt_tmp/sources.list" -o "Dir::Etc::SourceParts=$apt_tmp/parts" -o "Dir::State::Lists=$apt_tmp/lists"
              -o "Dir::Cache=$apt_tmp/cache" -o APT::Sandbox::User=root)
    apt-get "${apt_opts[@]}" update -qq
    (cd "$apt_tmp" && apt-get "${apt_opts[@]}" download -qq libvulkan-dev)
    rm -rf "$HEADERS"
    mkdir -p "$HEADERS"  # its parent too: a fresh machine has no ~/.cache/specdec yet
    dpkg-deb -x "$apt_tmp"/libvulkan-dev_*.deb "$HEADERS"
    rm -rf "$apt_tmp"
  fi
  vulkan_include="-DVulkan_INCLUDE_DIR=$HEADERS/usr/include"
fi
PY=$ENV/bin/python
export GGML_VK_VISIBLE_DEVICES=${GGML_VK_VISIBLE_DEVICES-0}
has_vulkan='import sys, specdec_cli.llama.platform as b; sys.exit(0 if b.gpu_offload_supported() and any(d.name.startswith("Vulkan") for d in b.devices()) else 1)'

if [ -x "$PY" ] && "$PY" -c "$has_vulkan" 2>/dev/null; then
  echo "[vulkan_check] llama-cpp-python $VERSION with Vulkan already in $ENV; no build" >&2
else
  echo "[vulkan_check] building llama-cpp-python $VERSION with -DGGML_VULKAN=on into $ENV ($(nproc) jobs; the log: $out/build.log) ..." >&2
  start=$(date +%s)
  rm -rf "$ENV"
  python3 -m venv --system-site-packages "$ENV"
  # --ignore-installed: the CPU build outside satisfies pip otherwise; --no-cache-dir: its wheel
  # cache would hand back that build (pip keys wheels by version, not by CMAKE_ARGS).
  if ! CMAKE_ARGS="-DGGML_VULKAN=on $vulkan_include -DLLAVA_BUILD=off -DLLAMA_BUILD_TESTS=off -DLLAMA_BUILD_EXAMPLES=off -DLLAMA_BUILD_TOOLS=off" \
       CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
       "$PY" -m pip install -v --no-deps --ignore-installed --no-cache-dir --no-binary llama-cpp-python "llama-cpp-python==$VERSION" >"$out/build.log" 2>&1; then
    tail -40 "$out/build.log" >&2
    echo "[vulkan_check] build failed; the whole log is in $out/build.log" >&2
    rm -rf "$ENV"
    exit 2
  fi
  echo "[vulkan_check] built in $(( $(date +%s) - start )) s" >&2
  if ! "$PY" -c "$has_vulkan"; then
    echo "[vulkan_check] the build has no usable Vulkan backend (see $out/build.log)" >&2
    exit 2
  fi
fi
[ "$build_only" = 1 ] && exit 0

"$PY" -c 'import specdec_cli.llama.platform as b; print(b.system_info()); print(*b.devices(), sep="\n")' >"$out/system_info.txt" 2>&1 || true
# Mesa 22.3.6's lavapipe (Debian 12) segfaults in its queue thread running one of llama.cpp's
# fused shaders: with the built-in target, the first batch of 4 tokens after batches of 1, 2 and 3
# (docs/benchmarks.md, "The GPU machine"). llama.cpp's unfused path runs; it computes the same
# operations, one shader each. Only on lavapipe, and only unless the variable is set already.
if "$PY" -c 'import sys, specdec_cli.llama.platform as b; sys.exit(0 if any("llvmpipe" in d.description for d in b.devices()) else 1)'; then
  export GGML_VK_DISABLE_FUSION=${GGML_VK_DISABLE_FUSION-1}
  echo "[vulkan_check] lavapipe: GGML_VK_DISABLE_FUSION=$GGML_VK_DISABLE_FUSION" >&2
fi
# The CPU-only reference: this machine's own llama-cpp-python, outside the environment.
export SPECDEC_CPU_PYTHON=${SPECDEC_CPU_PYTHON:-$(command -v python3)}
export SPECDEC_GPU_REPORT=$out
status=0
"$PY" -m pytest -q -rA -m gpu tests/gpu -p no:cacheprovider 2>&1 | tee "$out/pytest.txt" || status=$?
exit $status
