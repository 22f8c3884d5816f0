"""benchmarks/intervals.py: a confidence interval for a ratio measured once per repeat."""

from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path

from scipy import stats

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


def test_a_ratio_over_workloads_weighs_each_workload_the_same():
    # The docstring's example, by hand: mean logs -0.020411 and 0.029512, their mean 0.0045505
    # (exp: 1.00456); s^2 / n per group 0.00041661 and 0.000094263, standard error
    # sqrt(0.00051087) / 2 = 0.011301; Welch-Satterthwaite 0.00051087^2 / (0.00041661^2 +
    # 0.000094263^2) = 1.4305 degrees of freedom.
    estimate, low, high = intervals.across_interval([[0.96, 1.00], [1.02, 1.04]])
    half = stats.t.ppf(0.975, 1.4305) * 0.011301
    assert abs(estimate - 1.00456) < 1e-4
    assert abs(low - math.exp(0.0045505 - half)) < 1e-4 and abs(high - math.exp(0.0045505 + half)) < 1e-4
    assert abs(low - 0.934) < 1e-3 and abs(high - 1.080) < 1e-3  # as the docstring rounds them
    # One workload: its own repeats' interval, n - 1 degrees of freedom (ratio_interval's example).
    _, low, high = intervals.across_interval([[0.96, 0.98, 1.00, 1.02]])
    assert abs(low - 0.9495) < 1e-3 and abs(high - 1.0317) < 1e-3
    # A workload of one repeat has no spread to go by: none.
    assert intervals.across_interval([[0.96, 1.00], [1.02]]) is None and intervals.across_interval([]) is None
