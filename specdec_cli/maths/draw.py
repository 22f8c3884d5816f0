"""Drawing one token from a distribution: its CDF inverted at one uniform from the caller's generator.

A sparse distribution inverts the cumulative weights of its support; a dense row goes by its
block sums (distribution.BLOCK ids a block, no cumulative sum over the whole vocabulary): the
block by its sum, then the id inside it. A zero-probability id is never drawn, even where the
uniform times the total rounds up to the last cumulative weight. No global RNG: every draw
takes a `numpy.random.Generator` that the caller seeded.

    sample(Distribution(5, np.array([1, 3]), np.array([0.25, 0.75])), rng)   # 1 a quarter of the time, else 3
    sample(np.array([0.0, 2.0, 0.0]), rng)                                    # -> 1 (a dense row, unnormalised)

Left out: the distributions (filters.py, dense.py), what a rejection draws from (residual.py).
"""

from __future__ import annotations

from typing import Union

import numpy as np

from .distribution import BLOCK, Distribution


def sample(probs: Union[Distribution, np.ndarray], rng: np.random.Generator) -> int:
    """Draw one token from a distribution by inverting its CDF (never a zero-probability id).

    A dense numpy row (possibly unnormalised) is accepted too.
    """
    dist = probs if isinstance(probs, Distribution) else Distribution.from_dense(probs)
    if dist.ids is None:
        return _sample_dense(dist, rng)
    return int(dist.ids[_invert_cdf(dist.weights, rng.random())])


def _invert_cdf(weights: np.ndarray, u: float) -> int:
    """Index i with cdf[i-1] <= u * cdf[-1] < cdf[i], for u in [0, 1); never a zero weight."""
    cdf = weights.cumsum(dtype=np.float64)
    return _locate(cdf, u * cdf[-1], weights)


def _locate(cdf: np.ndarray, target: float, weights: np.ndarray) -> int:
    i = int(cdf.searchsorted(target, side="right"))
    if i >= len(cdf):  # target rounded up to cdf[-1]: the last id with weight
        i = int(np.flatnonzero(weights)[-1])
    return i


def _sample_dense(dist: Distribution, rng: np.random.Generator) -> int:
    """Two-level CDF inversion with one uniform draw: the block by its sum, then the id inside it."""
    block_cdf = np.cumsum(dist.block_sums)
    target = rng.random() * block_cdf[-1]
    b = _locate(block_cdf, target, dist.block_sums)
    block = dist.weights[b * BLOCK : (b + 1) * BLOCK]
    rest = target - (block_cdf[b - 1] if b > 0 else 0.0)
    return b * BLOCK + _locate(np.cumsum(block, dtype=np.float64), rest, block)
