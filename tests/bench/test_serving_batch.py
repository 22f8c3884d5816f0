"""benchmarks/serving_batch.py: one server's tokens/s over another's, per repeat, with the median and interval."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
serving_batch = importlib.import_module("serving_batch")


def row(server: str, clients: int, repeat: int, rate: float) -> dict:
    return {"server": server, "temperature": 0.8, "clients": clients, "repeat": repeat, "tokens_per_s": rate}


def test_the_ratios_per_repeat_their_median_and_interval():
    # 2 clients: 96 / 100, 100 / 100, 102 / 100 -> 0.96, 1.00, 1.02, median 1.00; the interval of
    # the three by intervals.ratio_interval (t(0.975, 2) = 4.30): 0.92-1.07. 4 clients, one repeat:
    # 0.50, no interval.
    rows = [row("specdec", 2, i, r) for i, r in enumerate((96.0, 100.0, 102.0))] + [row("specdec-off", 2, i, 100.0) for i in range(3)]
    rows += [row("specdec", 4, 0, 50.0), row("specdec-off", 4, 0, 100.0)]
    lines = serving_batch.against(rows, "specdec", "specdec-off").splitlines()
    assert lines[1] == "  T=0.8 clients=2: 0.96, 1.00, 1.02; median 1.00; 95 %: 0.92-1.07"
    assert lines[2] == "  T=0.8 clients=4: 0.50; median 0.50"
