"""benchmarks/memory_workloads.py: the memory on against off over the calls whose texts agree."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from specdec_cli.decoding.stats import RunStats

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
memory_workloads = importlib.import_module("memory_workloads")


def call(tokens: int, seconds: float) -> RunStats:
    return RunStats(new_tokens=tokens, generation_seconds=seconds)


def test_a_call_whose_texts_differ_is_left_out_of_the_ratio():
    # The docstring's example: off 10 and 10 tokens/s, on 12 and 30; the second call's texts differ.
    calls = {"lookup": [call(10, 1.0), call(20, 2.0)], "lookup+memory": [call(12, 1.0), call(60, 2.0)], "target-only": [call(10, 1.0), call(20, 2.0)]}
    texts = {"lookup": ["a", "b"], "lookup+memory": ["a", "c"], "target-only": ["a", "b"]}
    ratios = memory_workloads.same_text_ratios(calls, texts)
    assert list(ratios) == ["lookup"]  # a configuration without its "+memory" twin has no ratio
    ratio, left_out = ratios["lookup"]
    assert abs(ratio - 1.2) < 1e-12 and left_out == 1
    # Where every text agrees, it is the pooled ratio: (12 + 60) / 3 s against (10 + 20) / 3 s.
    ratio, left_out = memory_workloads.same_text_ratios(calls, {**texts, "lookup+memory": ["a", "b"]})["lookup"]
    assert abs(ratio - 2.4) < 1e-12 and left_out == 0
