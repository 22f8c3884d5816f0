"""Synthetic pairs (issue 13): the GGUF files benchmarks/synthetic_gguf.py writes, and what they measure.

Without llama.cpp: the structure of random and deepened files (block count, tensors, the
eps scaling, the weights' spread), atomic writes, and Theorem 3.8's best k per alpha.
With llama.cpp (`model`): a deepened target with eps = 0 gives the base model's logits (bit
for bit for one token, to float rounding for a batch) and exactly its greedy text (the
built-in target at N = 2), eps > 0 does change them (so the extra blocks are computed), a random pair loads as a compatible pair,
and the GPU check's CPU-only path runs end to end.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sg = importlib.import_module("synthetic_gguf")
policy_replay = importlib.import_module("policy_replay")

TINY = sg.SHAPES["tiny-target"]


def tensors(path: Path) -> dict[str, "gguf.ReaderTensor"]:
    return {t.name: t for t in gguf.GGUFReader(path).tensors}


@pytest.fixture(scope="module")
def tiny_f32(tmp_path_factory) -> Path:
    """A tiny random llama model at F32: the base that deepening tests copy."""
    return sg.write_random(tmp_path_factory.mktemp("synth") / "tiny-f32.gguf", dataclasses.replace(TINY, quant="f32"), seed=3)


# -- files, no llama.cpp -------------------------------------------------------------------


def test_random_model_has_the_shape_asked_for(tmp_path):
    path = sg.write_random(tmp_path / "r.gguf", TINY, seed=1)
    reader = gguf.GGUFReader(path)
    assert reader.fields["llama.block_count"].contents() == TINY.layers
    assert reader.fields["llama.attention.head_count_kv"].contents() == TINY.kv_heads
    assert len(reader.fields["tokenizer.ggml.tokens"].contents()) == TINY.vocab
    by_name = tensors(path)
    assert len(by_name) == 2 + 9 * TINY.layers  # embedding, output norm, 9 per block; output tied
    k = by_name["blk.0.attn_k.weight"]
    assert k.tensor_type == gguf.GGMLQuantizationType.Q8_0
    assert [int(d) for d in k.shape] == [TINY.hidden, TINY.kv_heads * TINY.head_dim]  # GGUF order: ne0 first
    assert [p.name for p in tmp_path.iterdir()] == ["r.gguf"]  # no temporary file left behind


def test_same_seed_same_file_other_seed_other_weights(tmp_path):
    a = sg.write_random(tmp_path / "a.gguf", TINY, seed=1)
    b = sg.write_random(tmp_path / "b.gguf", TINY, seed=1)
    c = sg.write_random(tmp_path / "c.gguf", TINY, seed=2)
    assert a.read_bytes() == b.read_bytes()
    assert np.asarray(tensors(a)["blk.0.ffn_up.weight"].data).tobytes() != np.asarray(tensors(c)["blk.0.ffn_up.weight"].data).tobytes()


@pytest.mark.parametrize("quant", ["q4_0", "q8_0", "f16"])
def test_random_weights_have_the_intended_spread(quant):
    # 256 x 4096 = 1M weights: the sample sd is within 1% of the population's with
    # overwhelming probability (its relative error is about 1 / sqrt(2 n) = 0.07%), and the
    # seed is fixed; the 5% tolerance covers the block formats' f16 scale rounding.
    rng = np.random.default_rng(0)
    raw = sg.random_matrix(rng, 256, 4096, quant, std=0.02)
    weights = gguf.quants.dequantize(raw, sg.QUANTS[quant]) if quant != "f16" else raw.astype(np.float32)
    assert weights.shape == (256, 4096)
    assert abs(weights.std() / 0.02 - 1) < 0.05


def test_minimal_tokenizer_is_unique_and_sized():
    fields = {f.key: f.value for f in sg.minimal_tokenizer(5000)}
    tokens = fields["tokenizer.ggml.tokens"]
    assert len(tokens) == len(set(tokens)) == 5000
    assert tokens[3 + 0x41] == "<0x41>" and fields["tokenizer.ggml.token_type"][3 + 0x41] == int(gguf.TokenType.BYTE)
    with pytest.raises(ValueError):
        sg.minimal_tokenizer(100)


def test_deepened_file_appends_scaled_copies(tiny_f32, tmp_path):
    eps = 0.25
    deep = sg.write_deepened(tiny_f32, tmp_path / "deep.gguf", extra=6, eps=eps)
    assert gguf.GGUFReader(deep).fields["llama.block_count"].contents() == TINY.layers + 6
    base, out = tensors(tiny_f32), tensors(deep)
    for name, t in base.items():  # the base model is copied unchanged
        assert np.array_equal(np.asarray(out[name].data), np.asarray(t.data)), name
    for j in range(6):  # extra block 4 + j copies block j mod 4
        src, dst = f"blk.{j % TINY.layers}.", f"blk.{TINY.layers + j}."
        for suffix in ("attn_q.weight", "ffn_up.weight", "attn_norm.weight"):
            assert np.array_equal(np.asarray(out[dst + suffix].data), np.asarray(base[src + suffix].data))
        for suffix in ("attn_output.weight", "ffn_down.weight"):
            assert np.allclose(np.asarray(out[dst + suffix].data), eps * np.asarray(base[src + suffix].data))


def test_deepening_eps_zero_writes_zero_residual_projections(tiny_f32, tmp_path):
    deep = sg.write_deepened(tiny_f32, tmp_path / "deep0.gguf", extra=1, eps=0.0)
    out = tensors(deep)
    last = f"blk.{TINY.layers}."
    assert not np.any(np.asarray(out[last + "attn_output.weight"].data))
    assert not np.any(np.asarray(out[last + "ffn_down.weight"].data))
    assert np.any(np.asarray(out[last + "ffn_gate.weight"].data))  # the rest is still real work


def test_deepening_refuses_quantized_models(tmp_path):
    q = sg.write_random(tmp_path / "q.gguf", TINY, seed=1)
    with pytest.raises(ValueError, match="F32"):
        sg.write_deepened(q, tmp_path / "deep.gguf", extra=1)
    assert not (tmp_path / "deep.gguf").exists()


def test_best_k_per_alpha_follows_theorem_3_8():
    from synthetic_pair import predictions

    from specdec_cli.tuning.cost_curve import CostCurve

    # Draft 2 ms, T(n) = 20 + 0.5 n ms: at alpha = 0.8, k = 5 gives E = 3.69 tokens per
    # 5 x 2 + 23 = 33 ms against 20.5 ms per token target-only: 2.29x, the best k.
    cost = CostCurve(draft_step=0.002, target_batch=tuple(0.020 + 0.0005 * n for n in range(1, 17)))
    (row,) = predictions(cost, [0.8])
    assert row["best_k"] == 5
    assert row["predicted_speedup"] == pytest.approx(2.292, abs=1e-3)
    low, high = predictions(cost, [0.3, 0.95])
    assert low["best_k"] < 5 < high["best_k"]


# -- with llama.cpp --------------------------------------------------------------------------


def last_logits(path: Path, ids: list[int]) -> np.ndarray:
    from specdec_cli.llama.model import LlamaModel

    with LlamaModel(path, n_ctx=256) as model:
        return np.array(model.decode(ids, 1)[0])


@pytest.mark.model
def test_eps_zero_is_the_base_model_and_eps_changes_it(tiny_f32, tmp_path):
    same_path = sg.write_deepened(tiny_f32, tmp_path / "d0.gguf", extra=3, eps=0.0)
    moved_path = sg.write_deepened(tiny_f32, tmp_path / "d1.gguf", extra=3, eps=1.0)
    # One token: the same kernels on the same numbers, so the same bits.
    assert np.array_equal(last_logits(tiny_f32, [1]), last_logits(same_path, [1]))
    # A batch: llama.cpp keeps only the output rows before the LAST block's FFN, which in the
    # deepened model is an extra block, so the base's last block multiplies all rows (another
    # kernel, another summation order): equal up to float rounding, not bit for bit.
    ids = [1, 300, 301, 302, 400, 450]
    base, same, moved = (last_logits(p, ids) for p in (tiny_f32, same_path, moved_path))
    scale = np.abs(base).max()
    assert np.abs(base - same).max() <= 1e-5 * scale
    assert np.abs(base - moved).max() > 1e-2 * scale  # the extra blocks are really computed


@pytest.mark.model
def test_deepened_builtin_target_gives_the_base_greedy_output(builtin_paths, tmp_path):
    from synthetic_pair import check_identity, deepened_target

    _, base = builtin_paths
    deep = deepened_target(2, 0.0, base, directory=tmp_path)
    assert deep.parent == tmp_path and gguf.GGUFReader(deep).fields["llama.block_count"].contents() == 32
    result = check_identity(base, deep, "Write a short story about a robot who learns to paint.", max_tokens=24)
    assert len(result.base_tokens) == 24
    assert result.divergence is None, f"differs at token {result.divergence}"


@pytest.mark.model
def test_random_pair_loads_as_a_pair_and_has_a_cost_curve(tmp_path):
    from synthetic_pair import cost_report, random_model

    from specdec_cli.session import LoadOptions

    shapes = (sg.SHAPES["tiny-draft"], sg.SHAPES["tiny-target"])
    draft = random_model(shapes[0], 0, directory=tmp_path)
    target = random_model(shapes[1], 1, directory=tmp_path)
    assert random_model(shapes[1], 1, directory=tmp_path) == target  # reused, not rewritten
    report = cost_report(draft, target, shapes, LoadOptions(n_ctx=512), max_batch=8, alphas=[0.5, 0.9], repeats=2)
    assert len(report.target_batch_ms) == 8 and all(t > 0 for t in report.target_batch_ms)
    assert report.draft_step_ms > 0 and [p["alpha"] for p in report.predictions] == [0.5, 0.9]


@pytest.mark.model
def test_gpu_check_cpu_only_path_runs_end_to_end(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "MODELS": str(tmp_path / "models"), "SPECDEC_CACHE": str(tmp_path / "cache")}
    env.pop("OUT", None)
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--cpu-only", "--sampling", "--batch", "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((out / "gpu_check.json").read_text())
    assert result["identical"] and result["bench_exact"]
    assert {(r["drafter"], r["prompt"]) for r in result["identity"]} == {(d, p) for d in ("model", "lookup") for p in ("chat", "story")}
    assert len(result["cost"]["target_batch_ms"]) == 16
    assert {b["temperature"] for b in result["bench"]} == {0.0, 0.8}
    assert result["python_ms_per_round"] > 0
    assert set(result["seconds"]) >= {"write models", "import order", "load", "identity", "cost curve", "bench"}
    assert result["import_order"] == {"numpy first": 0, "specdec_cli first": 0}  # a CPU load crashes in neither order
    assert "greedy identity (speculative == target-only): yes" in (out / "summary.txt").read_text()
    # --sampling: issue 10's checks, each in its own file (at test size: one vocabulary, a short run)
    sampling = (out / "backend_sampling.txt").read_text()
    assert "| 49,152 | T=0.8 defaults |" in sampling and "logits for the last row only (a draft step)" in sampling
    assert "| 49,152 | T=1 no filter |" in (out / "overhead.txt").read_text()
    # --batch: the server's worker with 8 slots, every answer of a batch the same as alone
    batch = json.loads((out / "gpu_batch.json").read_text())
    assert len(batch["identity"]) == 16 and all(r["divergence"] is None for r in batch["identity"]), batch["identity"]
    assert {(r["clients"], r["drafting"]) for r in batch["load"]} == {(c, d) for c in (1, 4, 8) for d in ("auto", "off")}
    assert all(0 < r["tokens"] <= r["clients"] * 4 * 64 for r in batch["load"])
    assert all(r["passes"]["target rows"] >= r["tokens"] for r in batch["load"])  # each token is sampled from a target row
    assert all(r["passes"]["draft passes"] == 0 for r in batch["load"] if r["drafting"] == "off")
    # The GPU check's curve replays auto (benchmarks/policy_replay.py --costs gpu_check.json).
    (costs,) = policy_replay.costs_from_json(out / "gpu_check.json")
    assert costs.batch(16) == pytest.approx(result["cost"]["target_batch_ms"][15] / 1000)
    assert costs.draft_step == pytest.approx(result["cost"]["draft_step_ms"] / 1000)
    assert policy_replay.compare({"all": [True] * 32}, [costs], 32)[0]["auto"] > 0
