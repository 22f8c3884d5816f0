"""benchmarks/intervals.py: a confidence interval for a ratio measured once per repeat."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
intervals = importlib.import_module("intervals")


def test_the_interval_of_a_ratio_measured_per_repeat():
    # The docstring's examples, by hand: the logs of 0.9 and 1.1 are -0.10536 and 0.09531, their
    # mean -0.00503, its standard error 0.10034, t(0.975, 1) = 12.706: exp(-0.00503 -+ 1.2749).
    low, high = intervals.ratio_interval([0.9, 1.1])
    assert abs(low - 0.2781) < 1e-3 and abs(high - 3.5603) < 1e-3
    low, high = intervals.ratio_interval([0.96, 0.98, 1.00, 1.02])
    assert abs(low - 0.9495) < 1e-3 and abs(high - 1.0317) < 1e-3
    assert intervals.shown((low, high)) == "95 %: 0.95-1.03"
    # Repeats that agree more give a narrower interval, around their geometric mean.
    narrow = intervals.ratio_interval([0.99, 1.00, 1.01, 1.00])
    assert low < narrow[0] < 1.0 < narrow[1] < high
    # Repeats all below 1 that agree: the whole interval lies below 1 (slower, not noise).
    assert intervals.ratio_interval([0.95, 0.96, 0.94, 0.95])[1] < 1.0
    assert intervals.ratio_interval([0.95]) is None and intervals.shown(None) == ""  # one repeat: none
