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


def test_each_drafters_ratio_over_the_workloads_weighs_each_workload_the_same():
    # intervals.across_interval's example as two workloads of two repeats each: lookup's ratios
    # 0.96, 1.00 on one and 1.02, 1.04 on the other -> 1.0046 (0.934-1.080); cascade's are 1 everywhere.
    results = {
        "extract": {"memory_on_off_by_repeat": [{"lookup": 0.96, "cascade": 1.0}, {"lookup": 1.00, "cascade": 1.0}]},
        "edit": {"memory_on_off_by_repeat": [{"lookup": 1.02, "cascade": 1.0}, {"lookup": 1.04, "cascade": 1.0}]},
    }
    across = memory_workloads.across_workloads(results)
    assert list(across) == ["lookup", "cascade"]
    estimate, low, high = across["lookup"]
    assert abs(estimate - 1.0046) < 1e-4 and abs(low - 0.934) < 1e-3 and abs(high - 1.080) < 1e-3
    assert across["cascade"] == (1.0, 1.0, 1.0)  # no spread at all: no interval to widen
    # One repeat per workload gives no interval, so no ratio over the workloads either.
    assert memory_workloads.across_workloads({name: {"memory_on_off_by_repeat": r["memory_on_off_by_repeat"][:1]} for name, r in results.items()}) == {}
