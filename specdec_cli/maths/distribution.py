"""A processed distribution: `Distribution`, a support and the probabilities on it.

Names follow Leviathan et al. 2022 and Chen et al. 2023: `p` is always the target's processed
distribution and `q` always the draft's, and each is a `Distribution`. With any filter on, the
support is small (top-k 40 keeps at most 40 ids): its ids, ascending, and their weights, and
everything downstream (draws, p/q, the residual, the bonus draw) touches only the support. Only
T > 0 with no filter needs the whole vocabulary; then the row is dense (ids None), its weights
padded with zeros to whole blocks of BLOCK ids, each block's sum kept for drawing (draw.py).

    Distribution(5, np.array([1, 3]), np.array([0.25, 0.75])).dense()   # -> [0, 0.25, 0, 0.75, 0]
    point_mass(4, 2).dense()                                            # -> [0, 0, 1, 0]

Left out: making one from logits (filters.py, dense.py), drawing from one (draw.py).
"""

from __future__ import annotations

import numpy as np


# Dense rows are summed and sampled in blocks of this many ids (a two-level CDF).
BLOCK = 1024


class Distribution:
    """A processed distribution over ids 0..n-1: probability weights[i] / total at ids[i].

    ids is ascending (sparse), or None when the row is dense (weights[j] belongs to id j;
    weights may run past n with zeros, to whole blocks). Ids outside the support have
    probability 0. `len()` is the vocabulary size n, as for a dense row.
    Example: Distribution(5, np.array([1, 3]), np.array([0.25, 0.75])).dense() ->
    [0, 0.25, 0, 0.75, 0].
    """

    __slots__ = ("n", "ids", "weights", "total", "block_sums")

    def __init__(self, n: int, ids: np.ndarray | None, weights: np.ndarray, total: float = 1.0, block_sums=None) -> None:
        self.n = n
        self.ids = ids
        self.weights = weights
        self.total = float(total)
        self.block_sums = block_sums  # dense rows only: sums of each BLOCK weights (for sampling)

    @classmethod
    def from_dense(cls, probs: np.ndarray) -> "Distribution":
        """The support of a dense probability row (which may be unnormalised)."""
        probs = np.asarray(probs, dtype=np.float64)
        ids = np.flatnonzero(probs > 0)
        return cls(len(probs), ids, probs[ids], 1.0)

    def __len__(self) -> int:
        return self.n

    @property
    def sparse(self) -> bool:
        return self.ids is not None

    def prob(self, x: int) -> float:
        if self.ids is None:
            return float(self.weights[x]) / self.total
        i = int(self.ids.searchsorted(x))
        if i < len(self.ids) and self.ids[i] == x:
            return float(self.weights[i]) / self.total
        return 0.0

    def probs_at(self, ids: np.ndarray) -> np.ndarray:
        """float64 probabilities at the given ids (ascending)."""
        if self.ids is None:
            return self.weights[ids].astype(np.float64) / self.total
        out = np.zeros(len(ids), dtype=np.float64)
        pos = np.minimum(np.searchsorted(self.ids, ids), len(self.ids) - 1)
        hit = self.ids[pos] == ids
        out[hit] = self.weights[pos[hit]] / self.total
        return out

    def max_prob(self) -> float:
        return float(self.weights.max()) / self.total

    def dense(self) -> np.ndarray:
        """The float64 probability row of length n."""
        if self.ids is None:
            return self.weights[: self.n].astype(np.float64) / self.total
        out = np.zeros(self.n, dtype=np.float64)
        out[self.ids] = self.weights / self.total
        return out


def point_mass(n: int, x: int) -> "Distribution":
    """The one-hot distribution at x over n ids: the q of a deterministic draft. Example: point_mass(4, 2).dense() -> [0, 0, 1, 0]."""
    return Distribution(n, np.array([x]), np.array([1.0]))
