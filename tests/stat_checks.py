"""Goodness-of-fit helpers and sampling settings shared by the statistical tests.

A chi-square test is only trusted when every bin expects at least 5 counts, so bins that
expect fewer are pooled into one bin (which is itself merged into the smallest regular bin
if it still expects fewer than 5): specdec_cli.audit.gof's pooling and statistic, which
`specdec audit` uses too. The p-value is gof.simulated_test's, as in the audit: the
statistic against exact samplers simulated from the law (fixed seed), so that `p > level`
fails an exact sampler with probability at most `level` (the chi-square law's tail is too
thin at these counts; audit/gof.py). A count in a bin of probability zero is never pooled away:
it fails at once, since no sampling noise can put it there.

    counts = np.bincount(samples, minlength=len(p))
    assert chi_square_pvalue(counts, p) > ALPHA

`first_two_law` gives the exact law of a generation's first two tokens from the target's
processed rows, and `first_two_pvalue` tests samples against it (the toy, real and `auto`
tests all use it). Example: p1 = [0.5, 0.5] and p2 = [1, 0] after either token ->
{(0, 0): 0.5, (1, 0): 0.5} (also with the zero-probability entries left out).

`power_against` says how likely the same test is to notice a given wrong distribution
(non-central chi-square), so a test can assert that its sample size is big enough to catch
a named bug rather than merely state a size.

Left out: anything model-specific (the tests build their own exact distributions).
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Iterable, Sequence

import numpy as np
from scipy import stats

from specdec_cli.audit import gof
from specdec_cli.maths.sampling import SamplingParams

ALPHA = 1e-4  # per-test false-failure rate of every chi-square test in this suite
MIN_EXPECTED = gof.MIN_EXPECTED

PLAIN = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)  # the raw softmax, no filter
PROCESSED = SamplingParams(temperature=0.7, top_k=3, top_p=0.95, min_p=0.05)  # every filter biting


def chi_square_pvalue(counts: np.ndarray, probs: np.ndarray, level: float = ALPHA) -> float:
    """p-value of observed `counts` against the exact distribution `probs` (same length),
    simulated for a test at `level`: above `level` exactly when that test passes."""
    chi_square_statistic(counts, probs)  # its checks: no impossible draw, at least two cells
    return gof.simulated_test(counts, probs, level, np.random.default_rng(0)).p_value


def chi_square_statistic(counts: np.ndarray, probs: np.ndarray) -> tuple[float, int]:
    """Pearson's statistic of `counts` against `probs` over the pooled bins, and its degrees of freedom."""
    counts = np.asarray(counts, dtype=np.float64)
    probs = np.asarray(probs, dtype=np.float64)
    assert counts.shape == probs.shape
    assert abs(probs.sum() - 1.0) < 1e-6, f"expected distribution sums to {probs.sum()}"
    probs = probs / probs.sum()  # float32 rows sum to 1 only up to rounding
    impossible = counts[probs <= 0].sum()
    assert impossible == 0, f"{impossible:.0f} draws landed on outcomes of probability zero"
    statistic, dof = gof.chi_square_statistic(counts, probs)
    assert dof >= 1, "too few samples for a chi-square test: every bin expects < 5"
    return statistic, dof


def first_two_law(
    next_p: Callable[[tuple[int, ...]], np.ndarray], n: int, is_end: Callable[[int], bool] = lambda token: False
) -> dict[tuple[int, ...], float]:
    """The exact law of the first two generated tokens. next_p(prefix) is the target's processed
    distribution after the generated tokens `prefix`. A first token expected fewer than
    MIN_EXPECTED times in n samples, or one that ends generation, is not followed up: its
    key (t1,) stands for "t1, then anything". Example above."""
    p1 = np.asarray(next_p(()), dtype=np.float64)
    law: dict[tuple[int, ...], float] = {}
    for t1 in (int(t) for t in np.flatnonzero(p1)):
        if n * p1[t1] < MIN_EXPECTED or is_end(t1):
            law[(t1,)] = float(p1[t1])
            continue
        p2 = np.asarray(next_p((t1,)), dtype=np.float64)
        for t2 in np.flatnonzero(p2):
            law[(t1, int(t2))] = float(p1[t1] * p2[t2])
    return law


def first_two_pvalue(samples: Iterable[Sequence[int]], law: dict[tuple[int, ...], float], level: float = ALPHA) -> float:
    """chi_square_pvalue of generations (their first one or two tokens) against first_two_law."""
    counts = Counter((s[0],) if (s[0],) in law else tuple(s[:2]) for s in samples)
    assert all(key in law for key in counts), f"sequences of target probability 0: {[k for k in counts if k not in law][:3]}"
    keys = list(law)
    return chi_square_pvalue(np.array([counts[key] for key in keys]), np.array([law[key] for key in keys]), level)


def power_against(probs: np.ndarray, wrong: np.ndarray, n: int, alpha: float = ALPHA) -> float:
    """Probability that the chi-square law's test rejects at `alpha` when the draws really follow
    `wrong` (chi_square_pvalue's simulated test has about this power: it rejects when fewer than
    20 of 20 / alpha exact samplers reach the statistic)."""
    groups = gof.pool_cells(probs, n)
    p = gof.pooled(np.asarray(probs), groups)
    w = gof.pooled(np.asarray(wrong), groups)
    df = len(groups) - 1
    noncentrality = n * float(np.sum((w - p) ** 2 / p))
    critical = stats.chi2.isf(alpha, df)
    return float(stats.ncx2.sf(critical, df, noncentrality))


def binomial_within(successes: int, n: int, rate: float, z: float) -> bool:
    """Whether `successes` out of `n` lies within z standard errors of n * rate."""
    sd = np.sqrt(n * rate * (1.0 - rate))
    return abs(successes - n * rate) <= z * sd
