#!/usr/bin/env bash
# Build llama.cpp's ggml-rpc-server from the sources that the installed llama-cpp-python vendors,
# so that its RPC protocol is the one specdec's llama.cpp speaks. Prints the binary's path.
#
#   benchmarks/build_rpc_server.sh                 # -> ~/.cache/specdec/rpc-server/0.3.36/ggml-rpc-server
#   CMAKE_ARGS="-DGGML_CUDA=on" bash build_rpc_server.sh 0.3.36   # on the machine with the GPU
#
# VERSION (the first argument) defaults to the installed llama-cpp-python's; `specdec doctor`
# names it on the machine that runs specdec. The machine with the GPU needs only python3, pip,
# cmake and a compiler (and its GPU toolkit), not llama-cpp-python.
# It downloads the llama-cpp-python sdist of that version from the package index (pip
# download), configures its vendor/llama.cpp with GGML_RPC on and builds only ggml-rpc-server
# (about 5 minutes on 2 cores; CMAKE_ARGS as for pip). A binary already built is reused.
set -euo pipefail
version="${1:-$(python3 -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))')}"
cache="${SPECDEC_CACHE:-$HOME/.cache/specdec}/rpc-server/$version"
binary="$cache/ggml-rpc-server"
if [ -x "$binary" ]; then echo "$binary"; exit 0; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download --quiet --no-deps --no-binary llama-cpp-python --dest "$work" "llama-cpp-python==$version" >&2
tar -xzf "$work"/llama_cpp_python-*.tar.gz -C "$work"
src=$(echo "$work"/llama_cpp_python-*/vendor/llama.cpp)
# shellcheck disable=SC2086  # CMAKE_ARGS is a list of flags, as pip takes it
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DGGML_RPC=ON -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    ${CMAKE_ARGS:-} > "$work/configure.log" 2>&1 || { tail -20 "$work/configure.log" >&2; exit 1; }
cmake --build "$work/build" --target ggml-rpc-server -j "$(nproc)" > "$work/build.log" 2>&1 || { tail -20 "$work/build.log" >&2; exit 1; }
mkdir -p "$cache"
cp "$work"/build/bin/ggml-rpc-server "$binary.tmp"
mv "$binary.tmp" "$binary"
echo "$binary"
