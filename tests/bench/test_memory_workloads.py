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


def test_the_interval_of_a_ratio_measured_per_repeat():
    # The docstring's examples, by hand: logs of 0.9 and 1.1 are -0.10536 and 0.09531, their mean
    # -0.00503, standard error 0.10034, t(0.975, 1) = 12.706.
    low, high = memory_workloads.ratio_interval([0.9, 1.1])
    assert abs(low - 0.2781) < 1e-3 and abs(high - 3.5603) < 1e-3
    low, high = memory_workloads.ratio_interval([0.96, 0.98, 1.00, 1.02])
    assert abs(low - 0.9495) < 1e-3 and abs(high - 1.0317) < 1e-3
    # It holds the repeats' geometric mean, and narrows as the repeats agree more.
    narrow = memory_workloads.ratio_interval([0.99, 1.00, 1.01, 1.00])
    assert low < narrow[0] < 1.0 < narrow[1] < high
    assert memory_workloads.ratio_interval([0.95]) is None  # one repeat: no interval
