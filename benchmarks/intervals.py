"""How sure a speed ratio is, from its repeats: the benchmarks' confidence intervals.

On a shared machine one repeat's ratio of two configurations, measured side by side, moves by
several per cent, so a ratio just under 1 may be noise. `ratio_interval` says how far the
repeats let it be trusted: a configuration is slower than another only where the whole
interval lies below 1.

    ratio_interval([0.96, 0.98, 1.00, 1.02])   # -> (0.950, 1.032): not shown to be slower

Many such intervals taken together call for care: of twenty ratios whose true value is 1, about
one has a 95 % interval wholly below 1 or above it by chance (2.5 % each way). `across_interval`
asks the question once for several workloads: is a configuration slower across them?

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
    found = across_interval([ratios], level)  # one group: its own spread, n - 1 degrees of freedom
    return None if found is None else found[1:]


def across_interval(groups: list[list[float]], level: float = 0.95) -> tuple[float, float, float] | None:
    """A ratio over several groups (workloads) of ratios measured once per repeat, each group
    weighing the same, and a `level` confidence interval for it: (estimate, low, high). The
    estimate is the mean over the groups of each one's mean log ratio, turned back into a ratio
    (the geometric mean of the groups' geometric means); its standard error is sqrt(sum of
    s_g^2 / n_g) / G (the groups are measured apart), with Student's t on the Welch-Satterthwaite
    degrees of freedom, since the groups' spreads differ. None where a group has under two repeats.
    Example: groups [0.96, 1.00] and [1.02, 1.04]: mean logs -0.0204 and 0.0294, their mean 0.0045
    (estimate 1.0046); per group s^2 / n = 0.000416 and 0.0000942, standard error 0.01130; degrees
    of freedom 0.000510^2 / (0.000416^2 + 0.0000942^2) = 1.43; t(0.975, 1.43) = 6.44 -> (0.934, 1.080)."""
    if not groups or any(len(ratios) < 2 for ratios in groups):
        return None
    from scipy import stats  # the test extras' (pyproject.toml); only here, where repeats are compared

    logs = [np.log(ratios) for ratios in groups]
    variances = np.array([g.var(ddof=1) / len(g) for g in logs])  # of each group's mean log ratio
    mean = float(np.mean([g.mean() for g in logs]))
    se = float(np.sqrt(variances.sum())) / len(logs)
    if se == 0.0:
        return float(np.exp(mean)), float(np.exp(mean)), float(np.exp(mean))
    dof = variances.sum() ** 2 / sum(v**2 / (len(g) - 1) for v, g in zip(variances, logs))
    half = stats.t.ppf(0.5 + level / 2, dof) * se
    return float(np.exp(mean)), float(np.exp(mean - half)), float(np.exp(mean + half))


def shown(interval: tuple[float, float] | None) -> str:
    """An interval as the benchmarks print it: (0.9495, 1.0317) -> '95 %: 0.95-1.03'; None -> ''."""
    return f"95 %: {interval[0]:.2f}-{interval[1]:.2f}" if interval else ""
