"""Pure-numpy sampling: logits to processed distributions, draws from them, the residual.

Names follow Leviathan et al. 2022 and Chen et al. 2023: `p` is always the target's
distribution, `q` always the draft's, and `residual` is what a rejection samples from,
normalise(max(0, p - q)). The accept/reject rule that puts them together is speculative.py's.

The same processing (top-k, top-p, min-p, then temperature; llama.cpp's default order)
is applied to p and q, so the output follows the *processed* target distribution exactly.
Temperature 0 means greedy: the distribution is one-hot at the first maximal logit.

A processed distribution is a `Distribution`: its support (ids, ascending) and the
probabilities on it. With any filter on, the support is small (top-k 40 keeps at most 40
ids) and everything after the selection (top-p, min-p, temperature, sampling, p/q, the
residual, the bonus draw) touches only the support. Only T > 0 with no filter needs the
whole vocabulary; then the row is kept dense.

Precision. Logits arrive as float32, so selection (maximum, top-k threshold, min-p
prefilter) compares float32 values, which is exact. Every probability is computed in
float64, on the support only when a filter is on, so both paths equal a plain dense float64
implementation (the tests hold them to 1e-12). Dense rows (T > 0, no filter) are where the
cost is: a float64 exp over the whole vocabulary costs several times a float32 one. float32
exp is off by up to ~1.6e-5 relative per weight (the float32 rounding of z times |z|; the
bound is derived at FLOAT32_EPS and held by a test), so a float32 row is never taken for p
itself; it is used where it provably cannot change the output's law:

- the draft's dense q (`proposal`) keeps float32 weights: speculative sampling is exact for
  any q that x is really drawn from, and that q, read in float64 everywhere, is what verify
  gets;
- a dense target row is decided and sampled from float32 weights with exact corrections
  (speculative.py's `_DenseTarget`), built on `softmax_row(..., float32=True)`, the bound
  FLOAT32_EPS and `dense_weight` (one id's float64 weight, computed as `softmax_row` does).

float64 stays for every probability that is returned (`distribution`, `residual`), for
filtered rows (their few candidates), and for the decisions' scalars (w64(x), p(x) / q(x)).
Sampling a dense row goes by block sums (no full cumsum), a dense residual stays dense, and
nothing is dense at all with a filter.

Edges are handled in the maths, never by numpy warnings: a tiny temperature (1e-300) caps
each gap at 800 temperatures before dividing, so exp underflows to exactly 0 instead of
overflowing; a huge one flattens the distribution; -inf logits have probability 0; all -inf,
NaN or +inf raise NumericalError.

Example (sparse): logits [1, 5, 3, 4.5] with top-k 2 at T = 1 -> ids [1, 3], probabilities
[0.62, 0.38]; sampling, p/q and the residual never look at ids 0 and 2.

Left out: penalties (repetition, DRY), typical-p and mirostat, which change p in ways that
depend on more than the logits row; a grammar's mask, applied to the row before all of this
(masking.py). No global RNG: every draw takes a
`numpy.random.Generator` that the caller seeded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Union

import numpy as np

from ..errors import NumericalError

# How many of the largest weights are sorted before falling back to a full sort for top-p.
_TOP_P_CANDIDATES = 1024
# Dense rows are summed and sampled in blocks of this many ids (a two-level CDF).
_BLOCK = 1024
# Top-k selection splits the row into 4k blocks; the k-th largest block maximum is a
# threshold with at least k logits at or above it (each of k blocks holds one).
_BLOCKS_PER_K = 4
# A gap of more than this many temperatures gives weight exp(-800) == 0.0 in float64.
_UNDERFLOW_GAPS = 800.0
# The float32 weights of a dense row (`proposal`, speculative.py's `_DenseTarget`) and their
# sum are within a factor 1 +- this of the float64 ones, for float32 logits and
# 1/64 <= T <= 64. Per weight exp(z), z = (x - top) / T:
# z rounds three times in float32 (the subtraction, 1/T, the product), so z32 = z (1 + d),
# |d| <= 3.01 * 2^-24, and exp(z32) = exp(z) exp(z d) is off by at most |z| 3.01 * 2^-24 <=
# 1.57e-5 where exp(z) is a normal float32 (z >= -87.4); numpy's float32 exp adds at most
# 2.52 ulp (3.0e-7); smaller weights (< 1.2e-38 each, against a largest weight of exactly 1)
# and float64 rounding add less than 1e-9. All weights are positive, so the sum keeps the
# largest relative error of its terms: 1.6e-5, and 2^-15 = 3.05e-5 leaves a factor of ~2.
FLOAT32_EPS = 2.0**-15
_FLOAT32_TEMPERATURES = (1.0 / 64.0, 64.0)


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings; the defaults are llama.cpp's. top_k=0, top_p=1, min_p=0 switch a filter off."""

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


GREEDY = SamplingParams(temperature=0.0)


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
        self.block_sums = block_sums  # dense rows only: sums of each _BLOCK weights (for sampling)

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


def check_finite(logits: np.ndarray) -> float:
    """Return the largest logit, raising NumericalError if any logit is NaN or +inf (or all are -inf)."""
    return float(logits[_checked_argmax(logits)])


def _checked_argmax(logits: np.ndarray) -> int:
    # One pass: argmax returns the first NaN if there is one, and +inf if there is one.
    i = int(np.argmax(logits))
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


def point_mass(n: int, x: int) -> "Distribution":
    """The one-hot distribution at x over n ids: the q of a deterministic draft. Example: point_mass(4, 2).dense() -> [0, 0, 1, 0]."""
    return Distribution(n, np.array([x]), np.array([1.0]))


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
    q (sampling's float64 CDF, prob, the residual) reads those w in float64. Its only effect is
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
    low, high = _FLOAT32_TEMPERATURES
    return logits.dtype == np.float32 and _unfiltered(params, logits.shape[-1]) and low <= params.temperature <= high


def _float32_weights(logits: np.ndarray, top: float, temperature: float, out: np.ndarray, floor_gaps: float = 128.0) -> np.ndarray:
    """exp((logits - top) / T) in float32 into `out` (float32 logits, 1/64 <= T <= 64); returns out.

    Logits more than `floor_gaps` T below the top are raised to that floor first, so that the
    subtraction cannot overflow however far apart they are (at the default 128 T their weight
    is 0 in float32, as it would be anyway). Near +-3e38 the float32 spacing exceeds 24 T:
    then the floor is the float below the top. Most rows have no logit that far down, and one
    min pass finds that out: on the development machine (numpy 2.4, AVX2) np.maximum against a
    scalar ran 3-4 times slower than a pass, so the floor is applied, against a filled row, only
    when it is needed.
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
    if widest <= _UNDERFLOW_GAPS * params.temperature:
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
    return np.exp(-np.minimum(gap, _UNDERFLOW_GAPS * temperature) / temperature)


def softmax_row(
    logits: np.ndarray, top: float, temperature: float, float32: bool = False, floor_gaps: float = 128.0
) -> Distribution:
    """softmax(logits / T) over the whole row: weights padded with zeros to whole blocks, float64
    block sums. float32=True (`proposal`, speculative.py's `_DenseTarget`) computes float32
    weights by `_float32_weights`."""
    n = logits.shape[-1]
    blocks = -(-n // _BLOCK)
    w = np.zeros(blocks * _BLOCK, dtype=np.float32 if float32 else np.float64)
    z = w[:n]
    if float32:
        _float32_weights(logits, top, temperature, z, floor_gaps)
    else:
        np.subtract(logits, top, out=z, dtype=np.float64)
        if temperature != 1.0:
            if temperature < 1.0:  # gaps beyond 800 T underflow anyway; capping them keeps z / T finite
                np.maximum(z, -_UNDERFLOW_GAPS * temperature, out=z)
            np.divide(z, temperature, out=z)
        np.exp(z, out=z)
    block_sums = w.reshape(blocks, _BLOCK).sum(axis=1, dtype=np.float64)
    return Distribution(n, None, w, float(block_sums.sum()), block_sums)


def dense_weight(logit: float, top: float, temperature: float) -> float:
    """One id's float64 weight exp((logit - top) / T), exactly as `softmax_row` computes it (the
    same steps on one scalar: the row's ufuncs on a row of one cost about 12 us a call here,
    against under 1 us, and verify calls this per decision; a test holds the two equal).
    Example: dense_weight(0.0, 0.0, 0.5) -> 1.0; the gap of a logit 1e6 below the top at T = 0.01
    is capped at 800 T, giving exp(-800) = 0.0 as in the row."""
    z = np.float64(logit) - top
    if temperature < 1.0:
        z = max(z, -_UNDERFLOW_GAPS * temperature)
    return float(np.exp(z / temperature))


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
    block = dist.weights[b * _BLOCK : (b + 1) * _BLOCK]
    rest = target - (block_cdf[b - 1] if b > 0 else 0.0)
    return b * _BLOCK + _locate(np.cumsum(block, dtype=np.float64), rest, block)


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
        if q.ids is None:  # q's weights may be float32 (`proposal`): multiplied in float64
            r = np.multiply(q.weights, p.total / q.total, dtype=np.float64)
            np.subtract(p.weights, r, out=r)
        else:
            r = p.weights.copy()
            r[q.ids] -= q.weights * (p.total / q.total)
        np.maximum(r, 0.0, out=r)
        block_sums = r.reshape(-1, _BLOCK).sum(axis=1)
        mass = block_sums.sum()
        return Distribution(p.n, None, r, mass, block_sums) if mass > 0.0 else p
    r = p.weights / p.total - q.probs_at(p.ids)
    keep = r > 0.0
    ids, r = p.ids[keep], r[keep]
    mass = r.sum()
    if mass <= 0.0:
        return p
    return Distribution(p.n, ids, r / mass)
