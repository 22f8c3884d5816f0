"""Goodness-of-fit helpers shared by the statistical tests (chi-square with pooled bins).

A chi-square test is only trusted when every bin expects at least 5 counts, so bins that
expect fewer are pooled into one bin (which is itself merged into the smallest regular bin
if it still expects fewer than 5). A count in a bin of probability zero is never pooled
away: it fails at once, since no sampling noise can put it there.

    counts = np.bincount(samples, minlength=len(p))
    assert chi_square_pvalue(counts, p) > ALPHA

`power_against` says how likely the same test is to notice a given wrong distribution
(non-central chi-square), so a test can assert that its sample size is big enough to catch
a named bug rather than merely state a size.

Left out: anything model-specific (the tests build their own exact distributions).
"""

from __future__ import annotations

import numpy as np
from scipy import stats

ALPHA = 1e-4  # per-test false-failure rate of every chi-square test in this suite
MIN_EXPECTED = 5.0


def _bins(probs: np.ndarray, n: int) -> list[np.ndarray]:
    """Index groups over `probs`: one per bin expecting >= MIN_EXPECTED counts, plus the pooled rest."""
    probs = np.asarray(probs, dtype=np.float64)
    expected = n * probs
    big = np.flatnonzero(expected >= MIN_EXPECTED)
    small = np.flatnonzero((expected < MIN_EXPECTED) & (probs > 0))
    groups = [np.array([i]) for i in big]
    if len(small):
        if expected[small].sum() >= MIN_EXPECTED or not groups:
            groups.append(small)
        else:  # the pooled bin is still too small: merge it into the smallest regular bin
            j = int(np.argmin(expected[big]))
            groups[j] = np.concatenate([groups[j], small])
    return groups


def chi_square_pvalue(counts: np.ndarray, probs: np.ndarray) -> float:
    """p-value of observed `counts` against the exact distribution `probs` (same length)."""
    counts = np.asarray(counts, dtype=np.float64)
    probs = np.asarray(probs, dtype=np.float64)
    assert counts.shape == probs.shape
    assert abs(probs.sum() - 1.0) < 1e-9, f"expected distribution sums to {probs.sum()}"
    impossible = counts[probs <= 0].sum()
    assert impossible == 0, f"{impossible:.0f} draws landed on outcomes of probability zero"
    n = counts.sum()
    groups = _bins(probs, int(n))
    assert len(groups) >= 2, "too few samples for a chi-square test: every bin expects < 5"
    obs = np.array([counts[g].sum() for g in groups])
    exp = np.array([n * probs[g].sum() for g in groups])
    exp *= obs.sum() / exp.sum()  # removes float rounding; the sums are equal up to 1e-9
    return float(stats.chisquare(obs, exp).pvalue)


def power_against(probs: np.ndarray, wrong: np.ndarray, n: int, alpha: float = ALPHA) -> float:
    """Probability that chi_square_pvalue rejects at `alpha` when the draws really follow `wrong`."""
    groups = _bins(probs, n)
    p = np.array([np.asarray(probs)[g].sum() for g in groups])
    w = np.array([np.asarray(wrong)[g].sum() for g in groups])
    df = len(groups) - 1
    noncentrality = n * float(np.sum((w - p) ** 2 / p))
    critical = stats.chi2.isf(alpha, df)
    return float(stats.ncx2.sf(critical, df, noncentrality))


def binomial_within(successes: int, n: int, rate: float, z: float) -> bool:
    """Whether `successes` out of `n` lies within z standard errors of n * rate."""
    sd = np.sqrt(n * rate * (1.0 - rate))
    return abs(successes - n * rate) <= z * sd
