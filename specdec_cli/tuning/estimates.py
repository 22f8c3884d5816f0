"""Running estimates that `auto` (adaptive.AdaptivePolicy) chooses k from, learnt from earlier rounds.

- `Acceptance`: a_1..a_m, the chance that draft position i gives a token when 1..i-1 did, from
  exponentially weighted hits and trials per position, shrunk toward the pooled rate;
- `WeightedMean`: an exponentially weighted mean (draft step, catch-up, backlog per round);
- `BatchCost`: T_batch(n), what a round whose target pass scores n tokens costs: the measured
  mean at n = 1 (before a plain step measured it, `estimate_step`), a line through the sizes
  seen for n >= 2 (`fit_curve`); and what a size's first pass costs more (over RPC);
- `clamp`: a timing held within OUTLIER_FACTOR of its running estimate.

Example: WeightedMean() after add(10.0) and add(20.0) has value (0.9 x 10 + 20) / 1.9 = 15.26:
the older sample fades by DECAY per sample.

Left out: what is chosen from these estimates, and when a plain step re-measures T_batch(1)
(adaptive.py); where the timings come from (events.Round, filled in by decoding/engine.py).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

PRIOR_WEIGHT = 2.0  # pseudo-trials behind the prior acceptance of the pooled rate
POSITION_PRIOR_FAILURES = 2.0  # pseudo-failures behind the pooled rate in each position's a_i (see Acceptance)
PRIOR_BATCH_SLOPE = 0.05  # (T_batch(n + 1) - T_batch(n)) / T_batch(1) before measuring
SLOPE_PRIOR_WEIGHT = 8.0  # the prior slope counts as much as two rounds two tokens either side of the mean
DECAY = 0.9  # forgetting factor per observation: about the last 10 rounds count
FIRST_PASS_WEIGHT = 0.25  # a batch size's first pass builds its graph: it counts a quarter of a sample (BatchCost.add)
OUTLIER_FACTOR = 2.0  # a timing counts at most this factor away from its running estimate


class Acceptance:
    """a_1..a_m from exponentially weighted hits and trials per position, shrunk toward the pooled rate.

    pooled = (all hits + w * prior) / (all trials + w). Each position's failure rate
    1 - a_i is then shrunk toward 1 - pooled by f pseudo-failures (POSITION_PRIOR_FAILURES),
    i.e. f / (1 - pooled) pseudo-trials:

        1 - a_i = (failures_i + f) / (trials_i + f / (1 - pooled)).

    (The posterior mean of a failure rate with a Gamma prior of shape f and mean 1 - pooled.)
    The evidence about a rate near 1 lies in its failures, so the pseudo-count is measured in
    failures: where drafts are mostly accepted (pooled 0.97: 67 pseudo-trials) one rejection
    at a deep position, tried once, moves its a_i by about 0.01, not by 0.3, and k is not held
    below it; where they often fail (pooled 0.5: 4 pseudo-trials) a position soon speaks for
    itself. A draft that really tires along the way (a_i falling with i: a p-min stop, a
    lookup match running out) shows up once its failures pile up. Positions not tried yet
    inherit the pooled rate.
    Example, w = 2, prior 0.7, f = 2: after one round of 4 drafts with the 4th rejected,
    pooled = (3 + 1.4) / (4 + 2) = 0.733, f / (1 - pooled) = 7.5 pseudo-trials,
    a_1 = 1 - 2 / 8.5 = 0.765 and a_4 = 1 - 3 / 8.5 = 0.647. (Before issue 13's dip was
    fixed, a_i = (hits_i + w * pooled) / (trials_i + w) gave a_4 = 1.467 / 3 = 0.489: with
    pooled 0.97, one rejection at position 7 made a_7 about 0.65, k settled at 6, and
    rounds that short never tried position 7 again.)
    """

    def __init__(
        self,
        positions: int,
        prior: float,
        prior_weight: float = PRIOR_WEIGHT,
        decay: float = DECAY,
        position_failures: float = POSITION_PRIOR_FAILURES,
    ) -> None:
        self.hits = np.zeros(positions)
        self.trials = np.zeros(positions)
        self.prior, self.prior_weight, self.decay = prior, prior_weight, decay
        self.position_failures = position_failures

    def add(self, k: int, accepted: int) -> None:
        """One round allowed k drafts: positions 1..accepted gave a token, position accepted + 1
        (if <= k) did not, whether its draft was rejected or never proposed (p-min, lookup
        running out): either way the round ended there."""
        if k <= 0:
            return
        self.hits *= self.decay
        self.trials *= self.decay
        self.trials[: min(k, accepted + 1)] += 1.0
        self.hits[:accepted] += 1.0

    def resume(self, hits: Sequence[float], trials: Sequence[float]) -> None:
        """Start from counts an earlier call ended with (Acceptance's own, as `counts` gives them);
        positions beyond this one's are dropped. Example: Acceptance(2, 0.7) after
        resume([0.9, 0.0, 5.0], [1.9, 0.9, 5.0]) has hits [0.9, 0.0] and trials [1.9, 0.9]."""
        m = min(len(self.hits), len(hits), len(trials))
        self.hits[:] = 0.0
        self.trials[:] = 0.0
        self.hits[:m] = hits[:m]
        self.trials[:m] = trials[:m]

    def counts(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """(hits, trials) per position, as `resume` takes them."""
        return tuple(self.hits.tolist()), tuple(self.trials.tolist())

    def rates(self) -> list[float]:
        w, f = self.prior_weight, self.position_failures
        pooled = (self.hits.sum() + w * self.prior) / (self.trials.sum() + w)
        failure = max(1.0 - pooled, 1e-9)  # the prior is below 1, so pooled is too; a guard only
        return (1.0 - (self.trials - self.hits + f) / (self.trials + f / failure)).tolist()


def clamp(value: float, expected: float | None) -> float:
    """A timing capped at OUTLIER_FACTOR times its running estimate: a stall (another process on
    the CPU, a page fault) must not steer the next rounds, while a lasting slow-down still comes
    through within a few rounds. Faster timings pass as they are. Example: clamp(0.240, 0.020) -> 0.040."""
    return value if expected is None else min(value, expected * OUTLIER_FACTOR)


class WeightedMean:
    """Exponentially weighted mean: each new sample weighs 1, older ones fade by `decay` per sample."""

    def __init__(self, decay: float = DECAY) -> None:
        self.decay, self.weight, self.total = decay, 0.0, 0.0

    def add(self, value: float, weight: float = 1.0) -> None:
        self.weight = self.weight * self.decay + weight
        self.total = self.total * self.decay + weight * value

    def fade(self) -> None:
        """Age the evidence by one step without a new sample: the value stays, its weight shrinks."""
        self.weight *= self.decay
        self.total *= self.decay

    @property
    def value(self) -> float | None:
        return self.total / self.weight if self.weight else None


class BatchCost:
    """T_batch(n): the measured mean for n = 1 (before that, `estimate_step`), and a line for n >= 2.

    The line is a weighted least-squares fit through the per-size means seen (n >= 2), each
    weighted by its evidence, which fades by `decay` per round whatever size that round was; its
    slope is pulled toward the prior PRIOR_BATCH_SLOPE * T(1) per token by a ridge term worth
    SLOPE_PRIOR_WEIGHT (in units of weight x tokens^2), so that two noisy rounds at adjacent
    sizes cannot tilt it far, while rounds spread over several sizes soon outweigh the prior.
    Slope >= 0, and no T(n) below T(1). A line fits the CPU verify cost well (a few per cent of
    a step per token); on a GPU it comes out flatter. Example: T(1) = 12 ms, and no other
    size seen: T(n) = 12 * (1 + 0.05 (n - 1)) ms; with T(5) = 18 ms seen often, T(n) runs
    through 18 at n = 5 with a slope between the prior 0.6 and what the data say.
    """

    def __init__(self, decay: float = DECAY) -> None:
        self.decay = decay
        self.means: dict[int, WeightedMean] = {}
        self._curve: list[float] = []  # cache of curve(), cleared by add()
        # The sizes whose pass this process has run (llama.cpp reserves the one-token shape when
        # it creates a context), and what a size's first pass cost beyond its second: over RPC
        # llama.cpp asks the server for five allocation sizes first, five round trips (docs/rpc.md).
        self.run: set[int] = {1}
        self.first_pass = WeightedMean(decay)
        # A size's first pass, until its second is timed: its seconds, what its mean took of them
        # (`clamp`), and its share of that mean's weight (which stays as it was added: every sample
        # of a mean fades alike).
        self._first: dict[int, tuple[float, float, float]] = {}

    def add(self, n: int, seconds: float) -> None:
        """One round whose target pass scored n tokens cost `seconds`. Every other size's evidence
        fades by `decay` as its own does, so the line follows the last rounds whatever their sizes:
        a size not seen for a while (the short drafts of a call's first rounds) stops steering it.
        Without that, one slow pass at a size never visited again weighed on the line for good.
        And a size's first pass counts FIRST_PASS_WEIGHT of a sample: llama.cpp builds the graph
        of a batch shape it has not run yet, which over RPC took a pass of 13 tokens to 100-130 ms
        where passes of that size took 50-65 ms after."""
        # A first plain step is not held to an estimate of T_batch(1), which may be far off. A plain
        # step's expectation is T_batch(1) as measured: no line to fit (every plain round of a
        # batch in which drafting does not pay comes here).
        if n == 1:
            expected = self.means[1].value if self.measured else None
        else:
            curve = self.curve(n)
            expected = curve[n - 1] if curve else None
        for size, mean in self.means.items():
            if size != n:  # mean.fade(), inline: every round fades each size seen (17 in the server's policies)
                mean.weight *= mean.decay
                mean.total *= mean.decay
        first = n not in self.means
        weight = FIRST_PASS_WEIGHT if first and n > 1 else 1.0
        mean = self.means.setdefault(n, WeightedMean(self.decay))
        held = clamp(seconds, expected)
        mean.add(held, weight)
        self._curve = []
        if n in self._first:  # the size's second pass: what its first cost more (the line, fitted through first passes too, would say less)
            self.first_pass.add(self._first.pop(n)[0] - seconds)
        elif n not in self.run:
            self.run.add(n)
            self._first[n] = (seconds, held, weight / mean.weight)

    def seed(self, curve: Sequence[float]) -> None:
        """Start from a measured curve, T_batch(n) = curve[n - 1] (n = 1..): one whole sample per
        size, as if each had been seen once and not first (it was measured apart: a cost curve, the
        server's batches)."""
        for n, seconds in enumerate(curve, start=1):
            self.means.setdefault(n, WeightedMean(self.decay)).add(seconds)
        self._curve = []

    @property
    def measured(self) -> bool:
        """Whether T_batch(1) was measured (by a plain step), not estimated."""
        return 1 in self.means

    def sizes(self) -> int:
        """How many batch sizes have been measured."""
        return len(self.means)

    def curve(self, max_n: int) -> list[float]:
        """[T_batch(1), .., T_batch(max_n)]; empty until some batch was measured."""
        if not self.means:
            return []
        if len(self._curve) < max_n:
            self._curve = fit_curve({n: (m.value, m.weight) for n, m in self.means.items()}, max_n)
        return self._curve[:max_n]

    @property
    def first_pass_extra(self) -> float | None:
        """What a size's first pass is known to cost beyond its later ones, where that is more than
        nothing (over RPC some 50 ms); None where it is not (a CPU) or not measured."""
        extra = self.first_pass.value
        return extra if extra is not None and extra > 0.0 else None

    @property
    def unsettled(self) -> bool:
        """Whether `settled` has anything to settle: a first pass known to cost more, T_batch(1)
        measured by a plain step, and a size timed only on its first pass."""
        return bool(self._first) and self.measured and self.first_pass_extra is not None

    def settled(self, max_n: int) -> list[float]:
        """`curve` as it will stand once the sizes timed only on their first pass have run again:
        each such pass counts less what a first pass costs more (`first_pass`), but not
        below T_batch(1). Over RPC, where that is some 60 ms, a call whose first rounds tried
        a few sizes once each sees them at 100-120 ms against 34 for a plain step, and would
        judge drafting dear on passes that cost 45-65 ms when they run again. `curve` itself
        where no such size is left, a first pass is not known to cost more, or no plain step
        measured T_batch(1). Example: size 5 timed once at 110 ms, then a plain step at 34 ms,
        first passes 60 ms dearer -> T(5) = 50 ms here, where `curve` puts it at 110."""
        if not self.unsettled:
            return self.curve(max_n)
        extra, floor = self.first_pass_extra, self.means[1].value
        points = {n: (m.value, m.weight) for n, m in self.means.items()}
        for n, (seconds, held, share) in self._first.items():
            # The size's mean holds the pass as `held` at `share` of its weight; settled, the pass
            # would have cost `seconds` less the extra (and been held to no more than it was).
            value, weight = points[n]
            points[n] = (max(value - share * max(held - (seconds - extra), 0.0), floor), weight)
        return fit_curve(points, max_n)


def fit_curve(points: dict[int, tuple[float, float]], max_n: int) -> list[float]:
    """[T_batch(1), .., T_batch(max_n)] from per-size (mean, weight) points, n = 1 among them once
    a plain step measured it: BatchCost's line. A handful of sizes, fitted once a round: plain
    floats (numpy's calls on arrays this small cost more than the sums, some 0.1 ms of every
    round). Example: {1: (12 ms, 1), 5: (18 ms, 9)} -> T(n) = 18 + 0.6 (n - 5) ms: one size
    says nothing of the slope, so it is the prior's, 0.05 T(1) a token."""
    seen = [(float(n), y, w) for n, (y, w) in points.items() if n >= 2]
    if seen:
        weight = sum(w for _, _, w in seen)
        xm, ym = sum(w * x for x, _, w in seen) / weight, sum(w * y for _, y, w in seen) / weight
        sxx, sxy = sum(w * (x - xm) ** 2 for x, _, w in seen), sum(w * (x - xm) * (y - ym) for x, y, w in seen)
        t1 = points[1][0] if 1 in points else estimate_step([(x, y) for x, y, _ in seen], xm, ym, sxx, sxy)
        prior_slope = PRIOR_BATCH_SLOPE * t1
        slope = max((sxy + SLOPE_PRIOR_WEIGHT * prior_slope) / (sxx + SLOPE_PRIOR_WEIGHT), 0.0)
    else:
        t1 = points[1][0]
        xm, ym, slope = 1.0, t1, PRIOR_BATCH_SLOPE * t1
    return [t1] + [max(float(ym + slope * (n - xm)), t1) for n in range(2, max_n + 1)]


def estimate_step(sizes: Sequence[tuple[float, float]], xm: float, ym: float, sxx: float, sxy: float) -> float:
    """T_batch(1) estimated from batches of sizes x >= 2 costing y (`sizes`: pairs (x, y); means
    xm, ym; weighted sums of squares sxx, sxy, as `BatchCost.curve` fits them), before a plain
    step measured it.

    From two sizes or more: the fitted line at n = 1, kept within [max y / x, min y] (a batch of
    n tokens costs at most n steps and at least one). From one size n: y / (1 + PRIOR_BATCH_SLOPE
    (n - 1)), the prior's guess, which may be far off either way (a GPU's curve is flat, a CPU's
    may grow by a whole step per token); the policy takes no plain-step decision on it.
    Example: T(8) = 110 ms and T(17) = 124 ms (a GPU's flat curve) -> 110 - 7 x 14 / 9 = 99.1 ms;
    T(8) = 80 ms and T(17) = 170 ms (a step per token) -> 10 ms; T(8) = 110 ms alone -> 81.5 ms.
    """
    if sxx <= 0.0:
        return float(ym / (1.0 + PRIOR_BATCH_SLOPE * (xm - 1.0)))
    at_one = ym + sxy / sxx * (1.0 - xm)
    return float(min(max(at_one, max(y / x for x, y in sizes)), min(y for _, y in sizes)))
