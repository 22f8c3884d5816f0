"""A logits row to its processed distribution: greedy, or top-k, top-p, min-p, then temperature.

The same processing (llama.cpp's default order) is applied to the target's row, giving p, and to
the draft's, giving q, so the output follows the *processed* target distribution exactly.
Temperature 0 means greedy: the distribution is one-hot at the first maximal logit. The filters
are exact without a full sort: top-k ranks only the ids at or above a threshold that k block
maxima reach, and top-p sorts the largest weights first, the whole row only when its nucleus is
wider than they are.

Precision. Logits arrive as float32, so selection (maximum, top-k threshold, min-p prefilter)
compares float32 values, which is exact. Every probability of a filtered row is computed in
float64 on its support, so it equals a plain dense float64 implementation (the tests hold them
to 1e-12). Edges are handled in the maths, never by numpy warnings: a huge temperature flattens
the distribution; -inf logits have probability 0; all -inf, NaN or +inf raise NumericalError.

Example (sparse): logits [1, 5, 3, 4.5] with top-k 2 at T = 1 -> ids [1, 3], probabilities
[0.62, 0.38]; sampling, p/q and the residual never look at ids 0 and 2.

Left out: penalties (repetition, DRY), typical-p and mirostat, which change p in ways that depend
on more than the logits row; a grammar's mask, applied to the row before all of this
(masking.py); the whole-vocabulary softmax and its float32 bound (dense.py).
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import NumericalError
from .dense import FLOAT32_TEMPERATURES, UNDERFLOW_GAPS, softmax_row
from .distribution import Distribution
from .sampling import SamplingParams


# How many of the largest weights are sorted before falling back to a full sort for top-p.
_TOP_P_CANDIDATES = 1024
# Top-k selection splits the row into 4k blocks; the k-th largest block maximum is a
# threshold with at least k logits at or above it (each of k blocks holds one).
_BLOCKS_PER_K = 4


def check_finite(logits: np.ndarray) -> float:
    """Return the largest logit, raising NumericalError if any logit is NaN or +inf (or all are -inf)."""
    return float(logits[_checked_argmax(logits)])


def _checked_argmax(logits: np.ndarray) -> int:
    # One pass: argmax returns the first NaN if there is one, and +inf if there is one.
    i = int(logits.argmax())  # the method: np.argmax's dispatch costs more than the search, on a small vocabulary
    if not math.isfinite(logits[i]):
        _raise_not_finite()
    return i


def _raise_not_finite() -> None:
    raise NumericalError(
        "the model produced NaN or infinite logits; the GGUF file may be corrupt or the "
        "GPU offload broken (try --gpu-layers 0)"
    )


def argmax(logits: np.ndarray) -> int:
    """Greedy choice: the first index of the largest logit (ties go to the lowest id)."""
    return _checked_argmax(logits)


def softmax_at(row: np.ndarray, index: int) -> float:
    """softmax(row)[index] at temperature 1, in float64 (a draft's confidence for --p-min). Example: [0, 0], 1 -> 0.5."""
    z = row.astype(np.float64) - float(row.max())
    return float(np.exp(z[index]) / np.exp(z).sum())


def distribution(logits: np.ndarray, params: SamplingParams) -> Distribution:
    """Processed distribution of a row: top-k, top-p, min-p (at temperature 1), then temperature.

    Sparse whenever a filter is on; dense (float64 weights) for T > 0 with no filter.
    """
    n = logits.shape[-1]
    if params.greedy:
        return Distribution(n, np.array([_checked_argmax(logits)]), np.array([1.0]))
    top_k = params.top_k if 0 < params.top_k < n else 0
    if top_k:
        return _after_top_k(n, _top_k_ranked(logits, top_k), logits, params)
    else:
        top = check_finite(logits)
        if _unfiltered(params, n):
            return softmax_row(logits, top, params.temperature)
        if params.top_p < 1.0:
            ids, z, w = _nucleus_of_row(logits, top, params.top_p)
        else:
            ids = _min_p_candidates(logits, top, params.min_p)
            z = logits[ids].astype(np.float64) - top
            w = np.exp(z)
    if params.min_p > 0.0:
        keep = w >= params.min_p * w.max()
        ids, z = ids[keep], z[keep]

    tempered = _tempered(z.max() - z, params.temperature)
    return Distribution(n, ids, tempered / tempered.sum())


def _unfiltered(params: SamplingParams, n: int) -> bool:
    """T > 0 and no filter cuts a row of n logits: the processed distribution is dense."""
    return not params.greedy and not 0 < params.top_k < n and params.top_p >= 1.0 and params.min_p <= 0.0


def proposal(logits: np.ndarray, params: SamplingParams) -> Distribution:
    """The draft's q as a proposal law: `distribution`, except that a dense row of float32
    logits at 1/64 <= T <= 64 keeps float32 weights (`_float32_weights`; float32 exp is
    several times cheaper than float64 exp).

    Speculative sampling is exact for any proposal q, provided x is drawn from q and verify
    is given that same q (Leviathan et al. 2022, Appendix A.1 holds for every q with q(x) > 0):
    q need not be the draft model's float64 softmax, only the law actually sampled. Here it is
    q(i) = w[i] / total with float32 weights w and a float64 total, and everything that reads
    q (draw.py's float64 CDF, prob, the residual) reads those w in float64. Its only effect is
    on acceptance, by a relative ~1.6e-5 at most (see FLOAT32_EPS). The target's p is never
    computed this way: it is the law the output must follow.
    Example: logits [0, ln 3] (float32), T = 1, no filter -> weights [1/3, 1] in float32, q = [0.25, 0.75].
    """
    if float32_path(logits, params):
        return softmax_row(logits, check_finite(logits), params.temperature, float32=True)
    return distribution(logits, params)


def float32_path(logits: np.ndarray, params: SamplingParams) -> bool:
    """Whether rows of these logits may be handled from float32 weights (`proposal`,
    speculative.py's `_DenseTarget`): dense (T > 0, no filter) rows of float32 logits,
    1/64 <= T <= 64."""
    low, high = FLOAT32_TEMPERATURES
    return logits.dtype == np.float32 and _unfiltered(params, logits.shape[-1]) and low <= params.temperature <= high


def _after_top_k(n: int, ranked: np.ndarray, logits: np.ndarray, params: SamplingParams) -> Distribution:
    """Top-p, min-p and temperature on the k ids top-k kept (`ranked`: largest logit first, ties
    lowest id first), in few numpy calls: both cuts keep a prefix of them. The same sums and
    comparisons as the general path (`_nucleus`, min-p, `_tempered`)."""
    z = logits[ranked].astype(np.float64)
    z -= z[0]  # log-weights at temperature 1, descending, max 0
    w = np.exp(z)  # w[0] == exp(0) == 1
    m = len(w)
    if params.top_p < 1.0:
        cum = w.cumsum() / w.sum()
        m = min(int(cum.searchsorted(params.top_p, side="left")), m - 1) + 1
    if params.min_p > 0.0:  # w >= min_p * w[0]: a prefix of the descending w (w[::-1] ascends)
        m = min(m, len(w) - int(w[::-1].searchsorted(params.min_p * w[0], side="left")))
    widest = -z[m - 1]  # the largest gap kept
    order = ranked[:m].argsort()  # back to ascending ids
    z = z[order]
    if widest <= UNDERFLOW_GAPS * params.temperature:
        tempered = np.exp(z / params.temperature)  # the same values as _tempered(-z, T): no gap is capped
    else:
        tempered = _tempered(-z, params.temperature)
    return Distribution(n, ranked[order], tempered, tempered.sum())


def probabilities(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """The processed distribution as a dense float64 row of the same length as `logits`, summing to 1."""
    return distribution(logits, params).dense()


def log_probabilities(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """log p over the whole row, for reporting logprobs: the processed distribution the token
    was drawn from (-inf outside its support). At temperature 0 that law is a point mass, so
    the row's own softmax (T = 1, no filter) is reported instead, as OpenAI reports model
    probabilities whatever the temperature. Example: logits [0, 0], T = 1 -> [-0.693, -0.693]."""
    if params.greedy:
        z = logits.astype(np.float64) - check_finite(logits)
        return z - np.log(np.exp(z).sum())
    with np.errstate(divide="ignore"):
        return np.log(probabilities(logits, params))


def _tempered(gap: np.ndarray, temperature: float) -> np.ndarray:
    """exp(-gap / T) in float64 for gaps >= 0 (inf allowed): a gap over 800 T gives exactly 0."""
    return np.exp(-np.minimum(gap, UNDERFLOW_GAPS * temperature) / temperature)


def _top_k_ranked(logits: np.ndarray, k: int) -> np.ndarray:
    """Ids of the k largest logits, largest first; equal logits lowest id first.

    Exact, without a full argpartition: the row is cut into 4k blocks, the k-th largest
    block maximum is a threshold that at least k logits reach (one in each of k blocks), and
    only the few ids at or above it are ranked (a stable sort, largest first, when there are at
    most 4k of them; a partition first otherwise). Example: [1, 5, 3, 4.5], k=2 -> [1, 3].
    Raises NumericalError on NaN or +inf anywhere, or when every logit is -inf.
    """
    n = logits.shape[-1]
    count = _BLOCKS_PER_K * k
    size = n // count
    if size >= 8:
        cut = size * count
        blocks = logits[:cut].reshape(count, size)
        maxima = blocks.max(axis=1)  # NaN in a block makes its maximum NaN
        # The k-th largest maximum of the whole blocks, and the largest (NaN sorts last):
        # k blocks hold an id at or above the threshold.
        # (Methods, not np.partition / np.flatnonzero: their wrappers cost as much as the work here.)
        ranked = maxima.copy()
        ranked.partition((count - k, count - 1))
        threshold, top = ranked[count - k], float(ranked[count - 1])
        tail_top = float(logits[cut:].max()) if cut < n else top  # the ids that do not fill a block
        if top != top or tail_top != tail_top or not math.isfinite(max(top, tail_top)):
            _raise_not_finite()
        hit = (maxima >= threshold).nonzero()[0]  # only these blocks can hold candidates (about k of 4k)
        block, offset = np.divmod((blocks.take(hit, axis=0) >= threshold).ravel().nonzero()[0], size)
        candidates = hit[block] * size + offset
        if tail_top >= threshold:
            candidates = np.concatenate([candidates, cut + np.flatnonzero(logits[cut:] >= threshold)])
    else:
        check_finite(logits)
        candidates = np.arange(n)
    values = logits[candidates]
    if len(values) > _BLOCKS_PER_K * k:  # many ties or a short row: keep the k largest first
        kth = np.partition(values, len(values) - k)[len(values) - k]
        above = values > kth
        keep = above.copy()
        keep[np.flatnonzero(values == kth)[: k - int(above.sum())]] = True  # ties: lowest ids first
        candidates, values = candidates[keep], values[keep]
    return candidates[(-values).argsort(kind="stable")[:k]]  # largest first, ties lowest id first


def _nucleus(w: np.ndarray, top_p: float) -> np.ndarray:
    """Indices into `w` of the smallest set, largest first, whose mass reaches top_p (at least one).

    Ties in w are taken lowest index first. Returned largest weight first.
    """
    total = w.sum()
    m = min(len(w), _TOP_P_CANDIDATES)
    order = _top_k_ranked(w, m) if m < len(w) else np.argsort(-w, kind="stable")
    cum = np.cumsum(w[order]) / total
    cut = int(np.searchsorted(cum, top_p, side="left"))
    if cut >= len(order) and m < len(w):
        order = np.argsort(-w, kind="stable")  # the nucleus is wider than the candidates
        cum = np.cumsum(w[order]) / total
        cut = int(np.searchsorted(cum, top_p, side="left"))
    return order[: min(cut, len(order) - 1) + 1]


def _nucleus_of_row(logits: np.ndarray, top: float, top_p: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Top-p over a whole row (no top-k before it): (ids ascending, z, w) of the nucleus.

    The total mass needs every logit, in float64 (the cut compares cumulative shares with
    top_p); the sort needs only the candidates the cut can reach.
    """
    w_all = softmax_row(logits, top, 1.0).weights[: logits.shape[-1]]
    keep = np.sort(_nucleus(w_all, top_p))
    return keep, logits[keep].astype(np.float64) - top, w_all[keep]


def _min_p_candidates(logits: np.ndarray, top: float, min_p: float) -> np.ndarray:
    """Ids that may pass min-p (exp(z) >= min_p, z = logit - top), found by one float32 comparison.

    The bound is loosened by a relative 1e-5 so that float32 rounding never drops an id that
    the exact float64 test (done by the caller) keeps.
    """
    bound = top + float(np.log(min_p))
    bound -= 1e-5 * (1.0 + abs(bound))
    return np.flatnonzero(logits >= bound)
