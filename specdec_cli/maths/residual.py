"""The residual, normalise(max(0, p - q)): what the target still owes after a rejected draft.

On a rejection the target's token is drawn from the residual (Leviathan et al. 2022,
Algorithm 1; Chen et al. 2023, Algorithm 2), which makes every emitted token follow p whatever
q was. `p` is the target's processed distribution, `q` the draft's.

    residual(np.array([0.5, 0.5, 0.0]), np.array([0.75, 0.0, 0.25]))   # -> [0, 1, 0]

Left out: the accept/reject rule (speculative.py), drawing from the residual (draw.py).
"""

from __future__ import annotations

from typing import Union

import numpy as np

from .distribution import BLOCK, Distribution


def residual(p: Union[Distribution, np.ndarray], q: Union[Distribution, np.ndarray]):
    """normalise(max(0, p - q)): what the target still owes after a rejected draft.

    It lives on p's support (where p = 0 so is max(0, p - q)), so a sparse p gives a sparse
    residual whatever q is, and a dense p a dense one (kept dense: one pass per step, no
    search for the positive ids). If p == q everywhere the residual has no mass; a rejection
    then has probability zero, so returning p keeps the function total without changing any
    distribution. Dense numpy rows in give a dense numpy row out.
    """
    if not isinstance(p, Distribution):
        return residual(Distribution.from_dense(p), Distribution.from_dense(q)).dense()
    if p.ids is None:  # dense stays dense (whole blocks, zero-padded), with block sums for sampling
        # p.total * max(0, p - q) = max(0, p.weights - q * p.total): one scale fewer, and the
        # factor p.total cancels when the residual is normalised.
        if q.ids is None:  # q's weights may be float32 (filters.proposal): multiplied in float64
            r = np.multiply(q.weights, p.total / q.total, dtype=np.float64)
            np.subtract(p.weights, r, out=r)
        else:
            r = p.weights.copy()
            r[q.ids] -= q.weights * (p.total / q.total)
        np.maximum(r, 0.0, out=r)
        block_sums = r.reshape(-1, BLOCK).sum(axis=1)
        mass = block_sums.sum()
        return Distribution(p.n, None, r, mass, block_sums) if mass > 0.0 else p
    r = p.weights / p.total - q.probs_at(p.ids)
    keep = r > 0.0
    ids, r = p.ids[keep], r[keep]
    mass = r.sum()
    if mass <= 0.0:
        return p
    return Distribution(p.n, ids, r / mass)
