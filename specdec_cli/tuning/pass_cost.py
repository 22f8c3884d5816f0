"""What one pass of a shared model costs, and what each sequence in it is charged.

A pass of R rows over N sequences took T seconds. `PassCost` fits T = a + b R + c N through one
model's recent passes: a is what any pass costs (reading the weights), b a row, c a sequence.
`shares` splits a pass's T among its sequences by that line: the fixed cost evenly, each
sequence's own cost, each row at the marginal cost of a row, scaled to what the pass took.
decoding/batch.py charges the sequences of every pass so (clock.py), and `-k auto` learns from
those charges what its rows cost at the batch size it is in.

Example: passes (R, N, T) of (1, 1, 12 ms), (9, 1, 16 ms) and (4, 4, 19.5 ms), seen alike ->
a = 9.5, b = 0.5, c = 2.0 ms; a pass of 20 ms with rows [1, 9] under (9.5, 0.5, 0) ms charges
[7.24, 12.76] ms.

Left out: the passes themselves and who waits through them (decoding/batch.py).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

PRIOR_ROW_SHARE = 0.05  # before two batch sizes are seen: a row costs this share of a one-row pass


class PassCost:
    """T = a + b R + c S through one model's recent passes (R rows, S sequences; weights decaying).

    a is what any pass costs (reading the weights), b a row, c a sequence (its own stretch of the
    cache to attend over, its own outputs). Least squares, ridged toward b = PRIOR_ROW_SHARE of a
    mean pass per row and c = 0, so that passes of one shape alone still give a line (the module's
    example holds up to the ridge).
    """

    def __init__(self, decay: float = 0.98, prior_weight: float = 1.0) -> None:
        self.decay = decay
        self.prior_weight = prior_weight
        self.xtx = np.zeros((3, 3))
        self.xty = np.zeros(3)
        self.weight = 0.0
        self.total = 0.0  # weighted sum of T
        self._adds = 0
        self._line: tuple[int, tuple[float, float, float]] | None = None  # (adds when fitted, line()): asked several times a pass

    def add(self, rows: int, sequences: int, seconds: float) -> None:
        x = np.array([1.0, rows, sequences])
        self.xtx = self.xtx * self.decay + np.outer(x, x)
        self.xty = self.xty * self.decay + x * seconds
        self.weight = self.weight * self.decay + 1.0
        self.total = self.total * self.decay + seconds
        self._adds += 1

    @property
    def measured(self) -> bool:
        return self.weight > 0

    def line(self) -> tuple[float, float, float]:
        """(a, b, c), each >= 0; (1, 0, 0) before any pass (every sequence then pays alike)."""
        if not self.measured:
            return 1.0, 0.0, 0.0
        adds, cached = self._adds, self._line  # a pass may add while another thread asks: a fit is kept for the adds it read before
        if cached is None or cached[0] != adds:
            cached = self._line = (adds, self._fit())
        return cached[1]

    def _fit(self) -> tuple[float, float, float]:
        mean = self.total / self.weight
        ridge = self.prior_weight * np.diag([0.0, 1.0, 1.0])
        prior = self.prior_weight * np.array([0.0, PRIOR_ROW_SHARE * mean, 0.0])
        a, b, c = np.linalg.lstsq(self.xtx + ridge, self.xty + prior, rcond=None)[0]
        b, c = max(b, 0.0), max(c, 0.0)
        a = max(a, 0.0)
        return float(a), float(b), float(c)


def shares(seconds: float, rows: Sequence[int], line: tuple[float, float, float]) -> list[float]:
    """What each sequence of a pass is charged: seconds * (a / N + c + b r_i) / (a + c N + b R).
    Example (the module's): 20 ms for rows [1, 9] under (9.5, 0.5, 0) ms -> [5.25, 9.25] / 14.5 * 20 ms."""
    a, b, c = line
    n, total = len(rows), sum(rows)
    whole = a + c * n + b * total
    if whole <= 0:
        return [seconds / n] * n
    return [seconds * (a / n + c + b * r) / whole for r in rows]
