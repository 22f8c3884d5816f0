"""Goodness of fit against an exact law: pooled Pearson chi-square, its p-value, total variation.

Pure maths on counts and probabilities (numpy and `math`; no scipy at run time, the tests
check every function here against scipy). Cells are pooled the usual way before a
chi-square test: every cell expecting fewer than MIN_EXPECTED draws goes into one pooled
cell, which is itself merged into the smallest regular cell if it still expects fewer.

    probs = [0.5, 0.3, 0.19, 0.01], n = 100 -> cells [0], [1], [2], and [3] pooled into [2]
    (it expects 1 draw): pool_cells gives [[0], [1], [2, 3]]

`chi_square` returns Pearson's statistic over the pooled cells, its degrees of freedom and
the upper tail of the chi-square law there (`chi2_sf`: the regularized upper incomplete
gamma function Q(df/2, x/2), by its series below a + 1 and its continued fraction above,
Numerical Recipes 3rd ed. section 6.2). A count in a cell of probability zero makes the
p-value 0: no sampling noise can put it there.

`chi_square`'s p-value comes from the chi-square law, which is only an approximation for
counts: with cells expecting 5 to 20 draws its far tail is too thin. On the built-in pair's
first-pair law (30 cells, n = 400) the two tests at level 5e-4 each rejected an exact
sampler 1.6e-3 of the time together (400,000 simulated audits), not the 1e-3 promised. So
the audit decides with `simulated_test`, exact at any n: it draws R exact samplers' counts
(multinomial on the pooled law), and rejects when fewer than SIMULATED_EXCEEDANCES = m of
their statistics reach the observed one, with R + 1 = ceil(m / level). For an exact
engine the observed statistic is one more draw of the same law, so its rank among the R + 1
is uniform (ties counted against rejecting) and P(reject) <= m / (R + 1) <= level. The
simulation stops as soon as m statistics reach the observed one: the verdict can no longer
be "reject", and a typical exact engine is done after about 2m draws. Its p-value is
(1 + B) / (1 + r) for B of the r simulated statistics at or above the observed one.

    level 5e-4 -> R = 39,999; an observed statistic reached by 3 of them -> p = 1e-4, rejects

`total_variation` is TV(p_hat, p) = 1/2 sum |p_hat - p| over the pooled cells, with a
confidence interval that holds whatever the true law s of the draws is: with probability at
least `level`, ||p_hat - s||_1 <= eps = sqrt((m - 1) / n) + sqrt(2 ln(1 / (1 - level)) / n)
(m cells: E||p_hat - s||_1 <= sum sqrt(s_i (1 - s_i) / n) <= sqrt((m - 1) / n) by
Cauchy-Schwarz, and McDiarmid's inequality bounds the excess, since one draw moves the norm
by at most 2 / n), so by the triangle inequality TV(s, p) lies within TV(p_hat, p) +- eps / 2.
Example: m = 20 cells, n = 2000 draws, level 0.95 -> eps / 2 = 0.076. The interval is
conservative; `tv_noise` says what TV(p_hat, p) an exact sampler shows at this n.

Left out: where the draws and the law come from (audit/run.py); showing results (audit/render.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MIN_EXPECTED = 5.0  # draws a cell must expect before it stands alone in a chi-square test
TV_LEVEL = 0.95  # confidence of the total-variation interval
SIMULATED_EXCEEDANCES = 20  # m: the simulated test rejects when fewer than m exact samplers reach the observed statistic
_FIRST_BATCH = 256  # simulated samplers in the first batch; each next batch is 4 times larger, at most _MAX_BATCH
_MAX_BATCH = 1 << 16
_MAX_BATCH_COUNTS = 1 << 22  # simulated counts held at once (32 MiB of int64), for laws of many cells

_EPS = 1e-15  # relative precision of the incomplete-gamma evaluations
_TINY = 1e-300
_MAX_TERMS = 100_000


def pool_cells(probs: np.ndarray, n: int) -> list[np.ndarray]:
    """Index groups over `probs`: one per cell expecting >= MIN_EXPECTED of n draws, plus the pooled rest (example above)."""
    probs = np.asarray(probs, dtype=np.float64)
    expected = n * probs
    big = np.flatnonzero(expected >= MIN_EXPECTED)
    small = np.flatnonzero((expected < MIN_EXPECTED) & (probs > 0))
    groups = [np.array([i]) for i in big]
    if len(small):
        if expected[small].sum() >= MIN_EXPECTED or not groups:
            groups.append(small)
        else:  # the pooled cell is still too small: merge it into the smallest regular cell
            j = int(np.argmin(expected[big]))
            groups[j] = np.concatenate([groups[j], small])
    return groups


def pooled(values: np.ndarray, groups: list[np.ndarray]) -> np.ndarray:
    """Per-cell values summed over pool_cells' groups. Example: [1, 2, 3], groups [[0], [1, 2]] -> [1, 5]."""
    return np.array([values[g].sum() for g in groups])


def chi2_sf(x: float, df: int) -> float:
    """P(X > x) for X chi-square with df degrees of freedom. Example: chi2_sf(3.841, 1) -> 0.0500."""
    if df < 1:
        raise ValueError(f"a chi-square law needs at least 1 degree of freedom, got {df}")
    if x <= 0.0:
        return 1.0
    a, half = df / 2.0, x / 2.0
    if half < a + 1.0:
        return max(0.0, 1.0 - _gamma_p_series(a, half))
    return _gamma_q_fraction(a, half)


def _prefactor(a: float, x: float) -> float:
    """x^a e^-x / Gamma(a), in logs so that large a and x do not overflow."""
    return math.exp(a * math.log(x) - x - math.lgamma(a))


def _gamma_p_series(a: float, x: float) -> float:
    """The regularized lower incomplete gamma P(a, x) by its power series (converges fast for x < a + 1)."""
    term = total = 1.0 / a
    for i in range(1, _MAX_TERMS):
        term *= x / (a + i)
        total += term
        if abs(term) < abs(total) * _EPS:
            return total * _prefactor(a, x)
    raise ArithmeticError(f"the incomplete gamma series did not converge (a={a}, x={x})")


def _gamma_q_fraction(a: float, x: float) -> float:
    """The regularized upper incomplete gamma Q(a, x) by its continued fraction (modified Lentz; x >= a + 1)."""
    b = x + 1.0 - a
    c = 1.0 / _TINY
    d = 1.0 / b
    h = d
    for i in range(1, _MAX_TERMS):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = _TINY if abs(d) < _TINY else d
        c = b + an / c
        c = _TINY if abs(c) < _TINY else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _EPS:
            return h * _prefactor(a, x)
    raise ArithmeticError(f"the incomplete gamma continued fraction did not converge (a={a}, x={x})")


@dataclass(frozen=True)
class ChiSquare:
    statistic: float
    dof: int
    p_value: float
    cells: int  # after pooling
    outcomes: int  # cells of positive probability before pooling
    pooled: int  # of which pooled (each expected < MIN_EXPECTED draws)
    impossible: int  # draws that landed on outcomes of probability zero


def chi_square(counts: np.ndarray, probs: np.ndarray) -> ChiSquare:
    """Pearson's test of `counts` against the exact law `probs` (same length), over pooled cells.

    One cell (df 0) cannot be tested: its p-value is 1 unless a draw is impossible.
    Example: counts [48, 52], probs [0.5, 0.5] -> statistic 0.16, df 1, p-value 0.689.
    """
    assert np.shape(counts) == np.shape(probs) and abs(float(np.sum(probs)) - 1.0) < 1e-6, "the law must be a distribution over the counted outcomes"
    counts, probs, n, groups = _prepared(counts, probs)
    impossible = int(counts[probs <= 0].sum())
    statistic, dof = _pearson(counts, probs, groups)
    if impossible:
        p_value = 0.0
    else:
        p_value = chi2_sf(statistic, dof) if dof >= 1 else 1.0
    pooled = sum(len(g) for g in groups if len(g) > 1)
    return ChiSquare(statistic, dof, p_value, len(groups), int((probs > 0).sum()), pooled, impossible)


def chi_square_statistic(counts: np.ndarray, probs: np.ndarray) -> tuple[float, int]:
    """Pearson's statistic over the pooled cells and its degrees of freedom (draws of probability 0 ignored)."""
    counts, probs, _, groups = _prepared(counts, probs)
    return _pearson(counts, probs, groups)


@dataclass(frozen=True)
class SimulatedTest:
    p_value: float  # (1 + B) / (1 + r): B of the r simulated statistics reach the observed one
    simulations: int  # r: R, or fewer when the simulation stopped early (then the test cannot reject)
    rejects: bool


def simulations_for(level: float) -> int:
    """R, the exact samplers the test draws at most. Example: 5e-4 -> 39,999."""
    return math.ceil(SIMULATED_EXCEEDANCES / level) - 1


def simulated_test(counts: np.ndarray, probs: np.ndarray, level: float, rng: np.random.Generator) -> SimulatedTest:
    """Pearson's statistic of `counts` against `probs`, tested at `level` against exact samplers
    simulated from `probs` (module docstring). A draw of probability zero rejects outright (p 0)."""
    counts, probs, n, groups = _prepared(counts, probs)
    if counts[probs <= 0].sum() > 0:
        return SimulatedTest(0.0, 0, True)
    statistic, dof = _pearson(counts, probs, groups)
    if dof < 1:
        return SimulatedTest(1.0, 0, False)
    law = pooled(probs, groups)
    expected = n * law
    reach = statistic * (1.0 - 1e-9) - 1e-12  # a simulated statistic equal to the observed one, up to rounding, reaches it
    limit, done, above = simulations_for(level), 0, 0
    batch = _FIRST_BATCH
    while done < limit and above < SIMULATED_EXCEEDANCES:
        size = min(batch, limit - done, max(1, _MAX_BATCH_COUNTS // len(law)))
        simulated = rng.multinomial(n, law, size=size)
        above += int(((((simulated - expected) ** 2) / expected).sum(axis=1) >= reach).sum())
        done += size
        batch = min(4 * batch, _MAX_BATCH)
    return SimulatedTest((1 + above) / (1 + done), done, above < SIMULATED_EXCEEDANCES)


def _prepared(counts: np.ndarray, probs: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, list[np.ndarray]]:
    """counts and probs in float64, probs normalised (float rows sum to 1 only up to rounding), the
    number of draws, and pool_cells' groups at that number: what every test here starts from."""
    counts = np.asarray(counts, dtype=np.float64)
    probs = np.asarray(probs, dtype=np.float64)
    probs = probs / probs.sum()
    n = int(counts.sum())
    return counts, probs, n, pool_cells(probs, n)


def _pearson(counts: np.ndarray, probs: np.ndarray, groups: list[np.ndarray]) -> tuple[float, int]:
    if not groups:
        return 0.0, 0
    obs = pooled(counts, groups)
    exp = pooled(probs, groups)
    exp *= obs.sum() / exp.sum()  # the possible draws against the law's whole mass
    return float(((obs - exp) ** 2 / exp).sum()), len(groups) - 1


@dataclass(frozen=True)
class TotalVariation:
    estimate: float  # TV(p_hat, p) over the pooled cells
    low: float  # the TV_LEVEL interval for TV(s, p), s the draws' true law (see the module docstring)
    high: float
    noise: float  # what an exact sampler exceeds with probability 1 - TV_LEVEL at this n (simulated)


def total_variation(counts: np.ndarray, probs: np.ndarray, rng: np.random.Generator, repeats: int = 2000) -> TotalVariation:
    """TV of the draws' pooled frequencies from the exact law, its interval, and the noise level at this n.

    Example: counts [60, 40], probs [0.5, 0.5] -> estimate 0.1, interval [0, 0.272] (0.1 +- 0.172).
    """
    counts, probs, n, groups = _prepared(counts, probs)
    obs = pooled(counts, groups) / n
    law = pooled(probs, groups)
    law /= law.sum()
    estimate = 0.5 * float(np.abs(obs - law).sum()) + 0.5 * float(counts[probs <= 0].sum()) / n
    half = 0.5 * tv_margin(len(groups), n)
    exact = rng.multinomial(n, law, size=repeats) / n
    noise = float(np.quantile(0.5 * np.abs(exact - law).sum(axis=1), TV_LEVEL))
    return TotalVariation(estimate, max(0.0, estimate - half), min(1.0, estimate + half), noise)


def tv_margin(cells: int, n: int, level: float = TV_LEVEL) -> float:
    """eps with P(||p_hat - s||_1 > eps) <= 1 - level for n draws over `cells` cells. Example: (2, 100) -> 0.345."""
    return math.sqrt(max(cells - 1, 0) / n) + math.sqrt(2.0 * math.log(1.0 / (1.0 - level)) / n)
