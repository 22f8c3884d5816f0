#!/usr/bin/env bash
# Produces docs/benchmarks.md, "The GPU machine" (the CUDA build and the check).
# The GPU check, ready to run on a CUDA machine with no network.
#
# Here first (PyPI reachable):   bash benchmarks/gpu_prepare.sh        # fills .gpu/ (ignored by git)
# There (the device tool, carry [".gpu"]; 0.5B/7B-like random pair, every layer on the GPU):
#   bash benchmarks/gpu_check.sh                      # build (skipped if already built), then measure
#   bash benchmarks/gpu_check.sh --build-only         # only the CUDA build, e.g. as a first call
#   bash benchmarks/gpu_check.sh --sampling           # then issue 10's checks too (below)
#   bash benchmarks/gpu_check.sh --batch              # then the batched check (gpu_batch.py)
#   bash benchmarks/gpu_check.sh --repack             # load with repacking on (--no-repack: off;
#                                                     # default: specdec's, off where llama.cpp reports AMX)
# Here, the CPU-only path (no build, the installed llama_cpp, a tiny pair; what the test runs):
#   bash benchmarks/gpu_check.sh --cpu-only --out /tmp/cpu-check
#
# The build: llama-cpp-python from its trimmed source distribution in .gpu/, with
# -DGGML_CUDA=on for the local GPU only (CMAKE_CUDA_ARCHITECTURES=native; set CUDA_ARCH=90
# to name Hopper instead), into $SITE (default /tmp/site) with the carried wheels (gguf,
# diskcache); everything else it needs (numpy, typer, rich, jinja2, scikit-build-core,
# cmake, ninja) is in the machine's image. The build log goes to OUT/build.log.
# The measurement: benchmarks/gpu_check.py, which writes OUT/gpu_check.json and
# OUT/summary.txt (OUT: --out, else $OUT as the device tool sets it, else /tmp/gpu-check).
# --sampling adds issue 10's device checks after it, each into its own file in OUT (a failure
# there is reported, not fatal): benchmarks/backend_sampling.py on the random target
# (backend_sampling.txt: the chain against numpy, and backend sampling on the GPU context) and
# benchmarks/overhead.py's Python-time table on this machine's CPU, and there its simulated GPU
# with spin waits at 151,936 tokens (overhead.txt). --batch adds, before those, benchmarks/gpu_batch.py:
# the server's worker with 8 slots on the same pair, identity in a batch and throughput per
# client count (gpu_batch.txt; a failure there is reported, not fatal).
# Exit code: 0 when every speculative output equalled target-only output, 1 otherwise,
# 2 for a failed build or bad usage.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=gpu
build_only=0
sampling=0
batch=0
repack=
out=${OUT:-/tmp/gpu-check}
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu-only) mode=cpu ;;
    --build-only) build_only=1 ;;
    --sampling) sampling=1 ;;
    --batch) batch=1 ;;
    --repack|--no-repack) repack=$1 ;;
    --out) out=$2; shift ;;
    *) echo "usage: gpu_check.sh [--cpu-only] [--build-only] [--sampling] [--batch] [--repack|--no-repack] [--out DIR]" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$out"

if [ "$mode" = gpu ]; then
  SITE=${SITE:-/tmp/site}
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
  has_gpu='import sys, llama_cpp; sys.exit(0 if llama_cpp.llama_supports_gpu_offload() else 1)'
  if python3 -c "$has_gpu" 2>/dev/null; then
    echo "[gpu_check] llama_cpp with a GPU backend already in $SITE; no build" >&2
  else
    sdist=$(ls .gpu/llama_cpp_python-*-trimmed.tar.gz 2>/dev/null | head -1 || true)
    if [ -z "$sdist" ]; then
      echo "[gpu_check] no .gpu/llama_cpp_python-*-trimmed.tar.gz: run benchmarks/gpu_prepare.sh here and carry .gpu" >&2
      exit 2
    fi
    echo "[gpu_check] building $sdist with CUDA for arch ${CUDA_ARCH:-native} ($(nproc) jobs) ..." >&2
    start=$(date +%s)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .gpu/wheels/*.whl
    if ! CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCH:-native} -DGGML_NATIVE=on -DLLAVA_BUILD=off -DGGML_CUDA_NCCL=off" \
         CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
         python3 -m pip install -v --no-index --no-deps --no-build-isolation --no-cache-dir --target "$SITE" "$sdist" >"$out/build.log" 2>&1; then
      tail -40 "$out/build.log" >&2
      echo "[gpu_check] build failed; the whole log is in $out/build.log" >&2
      exit 2
    fi
    echo "[gpu_check] built in $(( $(date +%s) - start )) s" >&2
    python3 -c "$has_gpu" || { echo "[gpu_check] the build has no GPU backend (see $out/build.log)" >&2; exit 2; }
  fi
  shape=gpu
else
  shape=tiny
fi

[ "$build_only" = 1 ] && exit 0
status=0
PYTHONUNBUFFERED=1 python3 benchmarks/gpu_check.py --shape "$shape" --out "$out" ${MODELS:+--models "$MODELS"} $repack || status=$?
if [ "$batch" = 1 ]; then
  echo "[gpu_check] the batched check (gpu_batch.py) ..." >&2
  PYTHONUNBUFFERED=1 python3 benchmarks/gpu_batch.py --shape "$shape" --out "$out" ${MODELS:+--models "$MODELS"} >"$out/gpu_batch.log" 2>&1 \
    || echo "[gpu_check] gpu_batch.py failed or an answer parted; its output: $out/gpu_batch.log" >&2
fi
if [ "$sampling" = 1 ] && [ -f "$out/gpu_check.json" ]; then
  # On the GPU machine also the simulated GPU (spin waits) at 151,936, to compare its CPU with this one.
  if [ "$mode" = gpu ]; then vocab="151936 262144"; small="--wait spin --gpu-vocab 151936"; else vocab=49152; small="--wait --tokens 40 --repeats 1"; fi
  target=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["files"]["target"])' "$out/gpu_check.json")
  echo "[gpu_check] backend sampling on $target ..." >&2
  python3 benchmarks/backend_sampling.py --vocab $vocab --reps 10 --model "$target" $repack >"$out/backend_sampling.txt" 2>&1 \
    || echo "[gpu_check] backend_sampling.py failed; its output: $out/backend_sampling.txt" >&2
  echo "[gpu_check] the engine's Python time per round (overhead.py) ..." >&2
  python3 benchmarks/overhead.py --vocab $vocab --before '' $small >"$out/overhead.txt" 2>&1 \
    || echo "[gpu_check] overhead.py failed; its output: $out/overhead.txt" >&2
fi
exit $status
