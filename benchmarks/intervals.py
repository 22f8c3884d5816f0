"""How sure a speed ratio is, from its repeats: the benchmarks' confidence intervals.

On a shared machine one repeat's ratio of two configurations, measured side by side, moves by
several per cent, so a ratio just under 1 may be noise. `ratio_interval` says how far the
repeats let it be trusted: a configuration is slower than another only where the whole
interval lies below 1.

    ratio_interval([0.96, 0.98, 1.00, 1.02])   # -> (0.950, 1.032): not shown to be slower

Left out: the repeats themselves (memory_workloads.py, serving_batch.py measure them).
"""

from __future__ import annotations

import numpy as np


def ratio_interval(ratios: list[float], level: float = 0.95) -> tuple[float, float] | None:
    """A `level` confidence interval for a ratio measured once per repeat: the repeats' log ratios
    taken as a normal sample, Student's t with n - 1 degrees of freedom around their mean, turned
    back into ratios (so it is an interval for their geometric mean). None under two repeats.
    Example: ratios 0.9 and 1.1: logs -0.1054 and 0.0953, mean -0.0050, standard error 0.1003,
    t(0.975, 1) = 12.71 -> (0.278, 3.56); ratios 0.96, 0.98, 1.00, 1.02 -> (0.950, 1.032)."""
    if len(ratios) < 2:
        return None
    from scipy import stats  # the test extras' (pyproject.toml); only here, where repeats are compared

    logs = np.log(ratios)
    half = stats.t.ppf(0.5 + level / 2, len(logs) - 1) * logs.std(ddof=1) / np.sqrt(len(logs))
    return float(np.exp(logs.mean() - half)), float(np.exp(logs.mean() + half))


def shown(interval: tuple[float, float] | None) -> str:
    """An interval as the benchmarks print it: (0.9495, 1.0317) -> '95 %: 0.95-1.03'; None -> ''."""
    return f"95 %: {interval[0]:.2f}-{interval[1]:.2f}" if interval else ""
