"""A whole-vocabulary row: softmax(logits / T) over every id, in float64 or in certified float32.

A dense row (T > 0, no filter) is where the cost is: a float64 exp over the whole vocabulary
costs several times a float32 one. float32 exp is off by up to ~1.6e-5 relative per weight (the
float32 rounding of z times |z|; the bound is derived at FLOAT32_EPS and held by a test), so a
float32 row is never taken for p itself; it is used where it provably cannot change the output's
law:

- the draft's dense q (filters.proposal) keeps float32 weights: speculative sampling is exact for
  any q that x is really drawn from, and that q, read in float64 everywhere, is what verify gets;
- a dense target row is decided and sampled from float32 weights with exact corrections
  (speculative.py's `_DenseTarget`), built on `softmax_row(..., float32=True)`, the bound
  FLOAT32_EPS and `dense_weight` (one id's float64 weight, computed as `softmax_row` does).

float64 stays for every probability that is returned (filters.distribution, the residual) and
for the decisions' scalars (w64(x), p(x) / q(x)). A tiny temperature (1e-300) caps each gap at
UNDERFLOW_GAPS temperatures before dividing, so exp underflows to exactly 0 instead of
overflowing.

    softmax_row(np.array([0.0, np.log(3.0)]), np.log(3.0), 1.0).dense()   # -> [0.25, 0.75]
    dense_weight(-1e6, 0.0, 0.01)                                        # -> 0.0: the gap capped at 800 T

Left out: filtered rows and the choice of the float32 path (filters.py), drawing (draw.py).
"""

from __future__ import annotations

import numpy as np

from .distribution import BLOCK, Distribution


# A gap of more than this many temperatures gives weight exp(-800) == 0.0 in float64.
UNDERFLOW_GAPS = 800.0
# The float32 weights of a dense row (filters.proposal, speculative.py's `_DenseTarget`) and their
# sum are within a factor 1 +- this of the float64 ones, for float32 logits and
# 1/64 <= T <= 64. Per weight exp(z), z = (x - top) / T:
# z rounds three times in float32 (the subtraction, 1/T, the product), so z32 = z (1 + d),
# |d| <= 3.01 * 2^-24, and exp(z32) = exp(z) exp(z d) is off by at most |z| 3.01 * 2^-24 <=
# 1.57e-5 where exp(z) is a normal float32 (z >= -87.4); numpy's float32 exp adds at most
# 2.52 ulp (3.0e-7); smaller weights (< 1.2e-38 each, against a largest weight of exactly 1)
# and float64 rounding add less than 1e-9. All weights are positive, so the sum keeps the
# largest relative error of its terms: 1.6e-5, and 2^-15 = 3.05e-5 leaves a factor of ~2.
FLOAT32_EPS = 2.0**-15
FLOAT32_TEMPERATURES = (1.0 / 64.0, 64.0)  # the temperatures FLOAT32_EPS is derived for


def softmax_row(
    logits: np.ndarray, top: float, temperature: float, float32: bool = False, floor_gaps: float = 128.0
) -> Distribution:
    """softmax(logits / T) over the whole row: weights padded with zeros to whole blocks, float64
    block sums. float32=True (filters.proposal, speculative.py's `_DenseTarget`) computes float32
    weights by `_float32_weights`."""
    n = logits.shape[-1]
    blocks = -(-n // BLOCK)
    w = np.zeros(blocks * BLOCK, dtype=np.float32 if float32 else np.float64)
    z = w[:n]
    if float32:
        _float32_weights(logits, top, temperature, z, floor_gaps)
    else:
        np.subtract(logits, top, out=z, dtype=np.float64)
        if temperature != 1.0:
            if temperature < 1.0:  # gaps beyond 800 T underflow anyway; capping them keeps z / T finite
                np.maximum(z, -UNDERFLOW_GAPS * temperature, out=z)
            np.divide(z, temperature, out=z)
        np.exp(z, out=z)
    block_sums = w.reshape(blocks, BLOCK).sum(axis=1, dtype=np.float64)
    return Distribution(n, None, w, float(block_sums.sum()), block_sums)


def _float32_weights(logits: np.ndarray, top: float, temperature: float, out: np.ndarray, floor_gaps: float = 128.0) -> np.ndarray:
    """exp((logits - top) / T) in float32 into `out` (float32 logits, 1/64 <= T <= 64); returns out.

    Logits more than `floor_gaps` T below the top are raised to that floor first, so that the
    subtraction cannot overflow however far apart they are (at the default 128 T their weight
    is 0 in float32, as it would be anyway). Near +-3e38 the float32 spacing exceeds 24 T:
    then the floor is the float below the top. Most rows have no logit that far down, and one
    min pass finds that out. np.maximum against a scalar costs several such passes, so the floor
    is applied, against a filled row, only when it is needed.
    """
    floor = np.float32(top - floor_gaps * temperature)
    if floor >= top - (floor_gaps - 24.0) * temperature:
        floor = np.nextafter(floor, np.float32(-np.inf))
    source = logits
    if logits.min() < floor:
        out.fill(floor)
        source = np.maximum(logits, out, out=out)
    np.subtract(source, np.float32(top), out=out)
    if temperature != 1.0:
        np.multiply(out, np.float32(1.0 / temperature), out=out)
    return np.exp(out, out=out)


def dense_weight(logit: float, top: float, temperature: float) -> float:
    """One id's float64 weight exp((logit - top) / T), exactly as `softmax_row` computes it (the
    same steps on one scalar, as numpy's ufuncs on a row of one cost many times the scalar steps
    and verify calls this per decision; a test holds the two equal).
    Example: dense_weight(0.0, 0.0, 0.5) -> 1.0; the gap of a logit 1e6 below the top at T = 0.01
    is capped at 800 T, giving exp(-800) = 0.0 as in the row."""
    z = np.float64(logit) - top
    if temperature < 1.0:
        z = max(z, -UNDERFLOW_GAPS * temperature)
    return float(np.exp(z / temperature))
