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
        # X'WX and X'Wy of the weighted least squares, x = (1, R, S), in plain floats: a fit a pass,
        # under the batcher's lock, where numpy's calls on 3 x 3 arrays cost some 0.1 ms each.
        self.xtx = [[0.0] * 3 for _ in range(3)]
        self.xty = [0.0] * 3
        self.weight = 0.0
        self.total = 0.0  # weighted sum of T
        self._adds = 0
        self._line: tuple[int, tuple[float, float, float]] | None = None  # (adds when fitted, line()): asked several times a pass

    def add(self, rows: int, sequences: int, seconds: float) -> None:
        x, d = (1.0, float(rows), float(sequences)), self.decay
        self.xtx = [[d * m + xi * xj for m, xj in zip(row, x)] for row, xi in zip(self.xtx, x)]
        self.xty = [d * m + xi * seconds for m, xi in zip(self.xty, x)]
        self.weight = self.weight * d + 1.0
        self.total = self.total * d + seconds
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
        ridge = [0.0, self.prior_weight, self.prior_weight]
        m = [[v + (ridge[i] if i == j else 0.0) for j, v in enumerate(row)] for i, row in enumerate(self.xtx)]
        y = [self.xty[0], self.xty[1] + self.prior_weight * PRIOR_ROW_SHARE * mean, self.xty[2]]
        a, b, c = solve3(m, y)
        return max(a, 0.0), max(b, 0.0), max(c, 0.0)


def solve3(m: list[list[float]], y: list[float]) -> list[float]:
    """x with m x = y for an invertible 3 x 3 m (PassCost's ridged normal equations are positive
    definite once a pass is seen), by Cramer's rule in floats: some 40 multiplications, where a
    loop of elimination costs several times more in Python. Example: [[2, 0, 0], [0, 4, 0],
    [1, 0, 1]], [2, 8, 3] -> [1, 2, 2]."""
    (a, b, c), (d, e, f), (g, h, i) = m
    ei_fh, di_fg, dh_eg = e * i - f * h, d * i - f * g, d * h - e * g
    det = a * ei_fh - b * di_fg + c * dh_eg
    u, v, w = y
    return [
        (u * ei_fh - b * (v * i - f * w) + c * (v * h - e * w)) / det,
        (a * (v * i - f * w) - u * di_fg + c * (d * w - v * g)) / det,
        (a * (e * w - v * h) - b * (d * w - v * g) + u * dh_eg) / det,
    ]


def by_line(rows: Sequence[int], line: tuple[float, float, float]) -> float:
    """A pass of these rows per sequence by the line: a + c N + b R.
    Example: rows [1, 9] under (9.5, 0.5, 2) ms -> 9.5 + 2 x 2 + 0.5 x 10 = 18.5 ms."""
    a, b, c = line
    return a + c * len(rows) + b * sum(rows)


def shares(seconds: float, rows: Sequence[int], line: tuple[float, float, float]) -> list[float]:
    """What each sequence of a pass is charged: seconds * (a / N + c + b r_i) / (a + c N + b R).
    Example (the module's): 20 ms for rows [1, 9] under (9.5, 0.5, 0) ms -> [5.25, 9.25] / 14.5 * 20 ms."""
    a, b, c = line
    n = len(rows)
    whole = by_line(rows, line)
    if whole <= 0:
        return [seconds / n] * n
    return [seconds * (a / n + c + b * r) / whole for r in rows]


def aside_seconds(seconds: float, rows: Sequence[int], kept: Sequence[int], line: tuple[float, float, float]) -> float:
    """What a pass spent on rows beyond the `kept` rows of each sequence (a target pass's prompt
    rows beyond those that want logits; a draft pass's catch-up rows): its seconds less what, by
    the line, the pass would have cost with only the kept rows (nothing where none are kept).
    Example: 64 ms for rows [1, 8, 8, 10] of which [1, 1, 1, 1] are kept, under (20, 1.5, 2) ms ->
    64 x (1 - (20 + 2 x 4 + 1.5 x 4) / (20 + 2 x 4 + 1.5 x 27)) = 32.2 ms; a pass of a prompt's
    middle chunk alone, all of it."""
    whole = by_line(rows, line)
    if whole <= 0:
        return 0.0
    left = [r for r in kept if r > 0]
    without = by_line(left, line) if left else 0.0  # nothing kept: the whole pass was set aside
    return max(seconds * (1.0 - without / whole), 0.0)
