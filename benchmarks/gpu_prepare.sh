#!/usr/bin/env bash
# Produces what gpu_check.sh needs, for docs/benchmarks.md's "The GPU machine".
# Prepare, here (PyPI reachable), everything benchmarks/gpu_check.sh needs on a CUDA machine
# that has no network, into .gpu/ (ignored by git; carry it with the device tool: carry .gpu):
#
#   .gpu/llama_cpp_python-VERSION-trimmed.tar.gz   llama-cpp-python's source distribution, the
#                                                  same version as installed here, without the
#                                                  parts a CUDA library build never reads
#                                                  (vocab test models, docs, web UI, media), so
#                                                  that it fits under the 64 MiB the tool carries
#   .gpu/wheels/*.whl                              Python packages missing there (gguf, diskcache,
#                                                  and pydantic with its needs for gpu_batch.py),
#                                                  for Python 3.12
#
#   bash benchmarks/gpu_prepare.sh          # then: du -sh .gpu   (must stay well under 64 MiB)
#
# Left out: the build itself and the measurement (gpu_check.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=.gpu
VERSION=${LLAMA_CPP_VERSION:-$(python3 -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))')}
GGUF_VERSION=${GGUF_VERSION:-$(python3 -c 'import importlib.metadata as m; print(m.version("gguf"))')}
DISKCACHE_VERSION=${DISKCACHE_VERSION:-5.6.3}
# Parts of the source distribution that a CUDA build of the shared libraries never reads.
# LLAVA_BUILD, tests, tools and examples are off in gpu_check.sh's build.
TRIM=(
  vendor/llama.cpp/models vendor/llama.cpp/docs vendor/llama.cpp/media vendor/llama.cpp/benches
  vendor/llama.cpp/tests vendor/llama.cpp/examples vendor/llama.cpp/tools/ui vendor/llama.cpp/tools/server
  vendor/llama.cpp/gguf-py vendor/llama.cpp/conversion docs examples tests docker .git vendor/llama.cpp/.git
)

# What serve/types.py and its imports need that the CUDA image lacks (gpu_batch.py), at this machine's versions.
served() {
  python3 -c 'import importlib.metadata as m
for n in ("pydantic", "pydantic-core", "annotated-types", "typing-inspection", "typing-extensions"): print(f"{n}=={m.version(n)}")'
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$DEST/wheels"
python3 -m pip download -q --no-deps --no-binary llama-cpp-python -d "$work" "llama-cpp-python==$VERSION"
tar -xzf "$work"/llama_cpp_python-"$VERSION".tar.gz -C "$work"
src="$work/llama_cpp_python-$VERSION"
for path in "${TRIM[@]}"; do rm -rf "${src:?}/$path"; done
find "$src" \( -name "*.gguf" -o -name ".git" \) -prune -exec rm -rf {} +
tar -czf "$DEST/llama_cpp_python-$VERSION-trimmed.tar.gz.partial" -C "$work" "llama_cpp_python-$VERSION"
mv "$DEST/llama_cpp_python-$VERSION-trimmed.tar.gz.partial" "$DEST/llama_cpp_python-$VERSION-trimmed.tar.gz"

python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$DEST/wheels" "gguf==$GGUF_VERSION" "diskcache==$DISKCACHE_VERSION" $(served)
du -sh "$DEST"/* "$DEST"
