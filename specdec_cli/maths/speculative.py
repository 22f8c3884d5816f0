"""The speculative accept/reject rule over one target batch, named after the papers.

The rule is speculative sampling as in Leviathan et al. 2022 ("Fast Inference from
Transformers via Speculative Decoding", Algorithm 1) and Chen et al. 2023 ("Accelerating
Large Language Model Decoding with Speculative Sampling", Algorithm 2). `p` is always the
target's processed distribution, `q` always the draft's (both from filters.py, which
processes them alike, so the output follows the processed target distribution exactly):

    accept draft token x with probability min(1, p(x) / q(x))
    on rejection, sample from normalise(max(0, p - q))          (the residual)
    if all k drafts are accepted, sample one bonus token from p

`verify` applies it to the k + 1 rows of one target batch; `sample_row` draws a target-only
token from p (the baseline, and plain steps under `auto`). At temperature 0 both are argmax.
`verify_block` is block verification (Sun et al. 2025), which decides the block jointly and
keeps at least as many drafts in expectation; `VERIFIERS` names both rules. `expected_kept`
gives, for the drafts of one block-verified round, how many each rule keeps in expectation
(what `--verify auto` weighs against block's extra time: tuning/rule_choice.py).

A filtered p is a small support (distribution.py), so the rule runs on it directly. A dense p
(T > 0, no filter) goes through `_DenseTarget`: p itself is never approximated, but the
decisions are made from its float32 weights wherever a certified bound settles them, and the
float64 row is computed only when one does not (see the class).

Example (greedy): p = one-hot(7), q = one-hot(7) -> the draft token 7 is accepted;
p = one-hot(3), q = one-hot(7) -> 7 is rejected and the residual is one-hot(3).

Left out: processing logits into p and q, the draws and the residual themselves
(filters.py, draw.py, residual.py); who drafts (drafting/); the loop around a round (decoding/engine.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, Union

import numpy as np

from .dense import FLOAT32_EPS, dense_weight, softmax_row
from .distribution import Distribution, point_mass
from .draw import sample
from .filters import argmax, check_finite, distribution, float32_path
from .residual import residual
from .sampling import SamplingParams

# A target row goes the float32 way only if |top| <= this many temperatures: then float32's
# spacing near the top (|top| 2^-23) is at most T / 128, so the floor 86 T below the top
# (`_DenseTarget`) keeps every float32 weight normal and every id's bound w64 <= w32 (1 + eps).
_FLOAT32_TOP = 2.0**16
# Floor of `_DenseTarget`'s weights, in temperatures below the top: exp(-86) = 4.5e-38 is a
# normal float32. Floored ids are over-weighted (thinning takes the excess back) and add at
# most n exp(-86) (1e-32 at 262,144 ids) to a normaliser of at least 1.
_TARGET_FLOOR_GAPS = 86.0
# Draws from the float32 proposal before an exact float64 fallback (each try is a fresh,
# independent attempt, so a fallback after failed tries leaves the law unchanged).
_THINNING_TRIES = 64


@dataclass(frozen=True)
class Verdict:
    """The outcome of verifying one draft: how many drafts were kept and the target's token."""

    accepted: int
    token: int
    bonus: bool  # True: all drafts accepted and `token` is the bonus; False: a correction
    # verify_block only (a sampled draft of 1 token or more): how many more drafts block verification
    # keeps in expectation than the token rule, for these drafts (expected_kept's block - token)
    block_gain: float | None = None


def verify(
    target_logits: np.ndarray,
    draft_tokens: Sequence[int],
    q_rows: Sequence[Union[Distribution, np.ndarray]] | None,
    params: SamplingParams,
    rng: np.random.Generator,
) -> Verdict:
    """Speculative sampling over one target batch (Leviathan et al. 2022, Algorithm 1).

    target_logits: (k + 1, n) rows; row i is the target's logits after draft i (row 0:
    after the context). q_rows[i] is the draft's processed distribution for draft i (a
    Distribution, or a dense row), or None for a deterministic drafter (then q is one-hot at
    the draft token, so x is kept with probability p(x) and the residual is p without x).
    p rows are processed lazily: rows after the first rejection are never touched.
    """
    k = len(draft_tokens)
    assert target_logits.shape[0] >= k + 1, "the target must score every draft and one more position"
    if params.greedy:
        for i, x in enumerate(draft_tokens):
            best = argmax(target_logits[i])
            if best != x:
                return Verdict(accepted=i, token=best, bonus=False)
        return Verdict(accepted=k, token=argmax(target_logits[k]), bonus=True)

    n = target_logits.shape[1]
    for i, x in enumerate(draft_tokens):
        if q_rows is None:
            q = point_mass(n, x)
        else:
            q = q_rows[i] if isinstance(q_rows[i], Distribution) else Distribution.from_dense(q_rows[i])
        q_x = q.prob(x)
        assert q_x > 0.0, "a draft token must have positive draft probability"
        u = rng.random()
        # A dense row is decided from its float32 weights, exactly (`_DenseTarget`); its
        # float64 row is computed only when u lies too close to p(x) / q(x) to call.
        row = _DenseTarget.of(target_logits[i], params)
        if row is not None:
            if row.accepts(u, x, q_x):
                continue
            return Verdict(accepted=i, token=row.draw_residual(q, rng), bonus=False)
        correction = keep_or_correct(distribution(target_logits[i], params), x, q, u, rng)
        if correction is not None:
            return Verdict(accepted=i, token=correction, bonus=False)
    return Verdict(accepted=k, token=sample_row(target_logits[k], params, rng), bonus=True)


def keep_or_correct(p: Distribution, x: int, q: Distribution, u: float, rng: np.random.Generator) -> int | None:
    """One position of the rule: None when draft x ~ q is kept (u < p(x) / q(x), which happens with
    probability min(1, p(x) / q(x))), else the correction drawn from normalise(max(0, p - q)).
    Example: p = [0.5, 0.5], q = point_mass(2, 0), u = 0.7 -> x = 0 rejected, the correction is 1."""
    if u < p.prob(x) / q.prob(x):
        return None
    return sample(residual(p, q), rng)


def keep_or_resample(q: Distribution, guess: int, rng: np.random.Generator) -> int:
    """A deterministic guess verified against q as `verify` verifies a lookup draft against p: the
    guess with probability q(guess), else a draw from normalise(max(0, q - onehot(guess))); the
    result is distributed as q (the cascade's draft, drafting/cascade.py)."""
    u = rng.random()
    correction = keep_or_correct(q, guess, point_mass(q.n, guess), u, rng)
    return guess if correction is None else correction


def verify_block(
    target_logits: np.ndarray,
    draft_tokens: Sequence[int],
    q_rows: Sequence[Union[Distribution, np.ndarray]] | None,
    params: SamplingParams,
    rng: np.random.Generator,
) -> Verdict:
    """Block verification (Sun, Mendlovic, Leviathan, Aharoni, Ro, Beirami, Suresh, ICLR 2025,
    "Block Verification Accelerates Speculative Decoding", Algorithm 2): the draft block is
    decided jointly, not token by token. Same arguments and result as `verify`.

    With p_i = P(· | c, X^i) the target's rows and q_i = Q(· | c, X^i) the draft's:

        w_0 = 1;  w_i = min(1, w_{i-1} p_{i-1}(X_i) / q_{i-1}(X_i))          (`block_weights`)
        h_i = m_i / (m_i + 1 - w_i),  m_i = sum_x max(0, w_i p_i(x) - q_i(x))  for i < k;  h_k = w_k
        tau = the largest i with eta_i <= h_i (0 if none), eta_1..eta_k ~ U(0, 1)
        then X_1..X_tau are kept, and the next token is drawn from p_k (the bonus) if tau = k,
        else from normalise(max(0, w_tau p_tau - q_tau)).

    A later draft can rescue an earlier one the token rule would reject. It keeps at least
    as many drafts in expectation as `verify`, and the output follows p exactly. It needs
    the draft's q rows: at temperature 0, or for a deterministic drafter (q_rows None:
    lookup), it is `verify` (the paper: nothing to gain there). The rows are dense float64
    (k + 1 target rows and k draft rows), which the token rule mostly avoids.

    Example: k = 1 -> w_1 = h_1 = min(1, p(x) / q(x)), the residual normalise(max(0, p - q)):
    the token rule.
    """
    k = len(draft_tokens)
    if params.greedy or q_rows is None or k == 0:
        return verify(target_logits, draft_tokens, q_rows, params, rng)
    assert target_logits.shape[0] >= k + 1, "the target must score every draft and one more position"
    p = [distribution(target_logits[i], params).dense() for i in range(k + 1)]
    q = [row.dense() if isinstance(row, Distribution) else np.asarray(row, dtype=np.float64) for row in q_rows[:k]]
    w = block_weights(p, q, draft_tokens)
    h = [block_acceptance(p, q, w, i) for i in range(1, k + 1)]  # h[i - 1] = h_i
    token_kept, block_kept = expected_kept(p, q, draft_tokens, h)
    gain = block_kept - token_kept  # for the next rounds' choice of rule only (tuning/rule_choice.py), never this one's
    eta = rng.random(k)
    tau = 0
    for i in range(1, k + 1):
        if eta[i - 1] <= h[i - 1]:
            tau = i
    if tau == k:
        return Verdict(accepted=k, token=sample_row(target_logits[k], params, rng), bonus=True, block_gain=gain)
    left = np.maximum(w[tau] * p[tau] - q[tau], 0.0)
    # h_tau > 0 made tau possible, so the residual has mass (where w_tau = 1 and p_tau = q_tau,
    # h_{tau + 1} = 1 carries the block past tau)
    assert left.sum() > 0.0, "block verification stopped where its residual is empty"
    return Verdict(accepted=tau, token=sample(left / left.sum(), rng), bonus=False, block_gain=gain)


def block_weights(p: Sequence[np.ndarray], q: Sequence[np.ndarray], drafts: Sequence[int]) -> list[float]:
    """w_0 = 1, w_i = min(1, w_{i-1} p_{i-1}(X_i) / q_{i-1}(X_i)): how much of the target's mass the
    block X^i still carries. Example: p_0(X_1) = 0.2, q_0(X_1) = 0.4 -> w_1 = 0.5."""
    w = [1.0]
    for i, x in enumerate(drafts):
        assert q[i][x] > 0.0, "a draft token must have positive draft probability"
        w.append(min(1.0, w[-1] * p[i][x] / q[i][x]))
    return w


def block_acceptance(p: Sequence[np.ndarray], q: Sequence[np.ndarray], w: Sequence[float], i: int) -> float:
    """h_i, the chance that the block is kept up to draft i (see verify_block). Where w_i = 1 and
    w_i p_i <= q_i everywhere (so p_i = q_i) there is nothing to lose by keeping it: 1."""
    if i == len(q):
        return w[i]
    mass = float(np.maximum(w[i] * p[i] - q[i], 0.0).sum())
    denominator = mass + 1.0 - w[i]
    return mass / denominator if denominator > 0.0 else 1.0


def expected_kept(p: Sequence[np.ndarray], q: Sequence[np.ndarray], drafts: Sequence[int], h: Sequence[float]) -> tuple[float, float]:
    """How many of these drafts each rule keeps in expectation, given the drafts: (token rule, block).

    With r_i = p_{i-1}(X_i) / q_{i-1}(X_i) and h_1..h_k as in verify_block (h[i - 1] = h_i):

        token: sum_i prod_{j<=i} min(1, r_j)          (draft i is kept iff all of 1..i pass their test)
        block: sum_i P(tau >= i) = sum_i (1 - prod_{j>=i} (1 - h_j))   (tau >= i iff some eta_j <= h_j, j >= i)

    Exact figures, not samples: one round verified by block gives both, which is how
    `--verify auto` learns block's gain without running the token rule on the same drafts.
    Example, two drafts over two tokens: p_0 = [0.25, 0.75], q_0 = [0.5, 0.5], X_1 = 0 (r_1 = 0.5);
    p_1 = [0.8, 0.2], q_1 = [0.4, 0.6], X_2 = 0 (r_2 = 2). Token: 0.5 + 0.5 x 1 = 1.0. Block:
    w_1 = 0.5, w_2 = min(1, 0.5 x 2) = 1, h_1 = 0 (w_1 p_1 <= q_1: nothing left to correct to),
    h_2 = w_2 = 1, so tau = 2 always: 2.0. The second draft rescues the first.
    """
    token = expected_tokens([min(1.0, p[i][x] / q[i][x]) for i, x in enumerate(drafts)])[-1] - 1.0
    block, missed = 0.0, 1.0  # missed = prod_{j>=i} (1 - h_j), built from the last draft back
    for h_i in reversed(h):
        missed *= 1.0 - h_i
        block += 1.0 - missed
    return token, block


def expected_tokens(acceptance: Sequence[float]) -> list[float]:
    """E(k) for k = 0..len(acceptance): the tokens a round of k drafts yields in expectation,
    1 + sum_{i<=k} prod_{j<=i} a_j, where a_j is the chance that draft j is kept once drafts
    1..j-1 were (Leviathan et al. 2022, eq. 1, with acceptance by position).
    Example: [0.8, 0.5] -> [1, 1.8, 2.2]."""
    out, reach = [1.0], 1.0
    for a in acceptance:
        reach *= a
        out.append(out[-1] + reach)
    return out


VERIFIERS = {"token": verify, "block": verify_block}  # options.VERIFY_RULES names them, with "auto" (tuning/rule_choice.py)
DEFAULT_VERIFY = "token"  # run, bench, audit and serve unless told: block and auto do not pay on the built-in pair (docs/benchmarks.md)


def sample_row(logits: np.ndarray, params: SamplingParams, rng: np.random.Generator) -> int:
    """One token from a target row's processed distribution p: the argmax at temperature 0; a
    dense float32 row by `_DenseTarget.draw` (no float64 row); otherwise `sample(distribution)`."""
    if params.greedy:
        return argmax(logits)
    row = _DenseTarget.of(logits, params)
    return row.draw(rng) if row is not None else sample(distribution(logits, params), rng)


class _DenseTarget:
    """One dense target row (T > 0, no filter), decided and sampled from float32 weights, exactly.

    w32 holds float32 weights exp((logit - top) / T), floored 86 temperatures below the top,
    with float64 block sums. For every id, the float64 weight w64 (computed as `softmax_row`
    computes it) is at most w32 (1 + FLOAT32_EPS) (its derivation in dense.py, for |z| <= 86;
    a floored id's w64 is below the floor's), and the float64 normaliser Z lies within
    Z32 (1 +- FLOAT32_EPS), Z32 = sum(w32) (the derivation's 1.6e-5 relative error leaves
    room for the reciprocal). So:

    - a test "v < g(Z)", g decreasing in Z (accepting a draft: u < w64(x) / (Z q(x)); keeping a
      residual candidate: v < 1 - q(y) Z / w64(y)), is decided from Z32 unless v falls within
      the bounds' band; then Z is computed in float64 once and decides it (`_below`);
    - x ~ p by thinning (`draw`): x ~ w32 by CDF inversion, kept with probability
      w64(x) / (w32(x) (1 + eps)) <= 1, else drawn again: the kept x has law w64(x) / Z, p;
    - the residual normalise(max(0, p - q)) by rejection (`draw_residual`): y ~ p, kept with
      probability max(0, 1 - q(y) / p(y)): the kept y has law proportional to max(0, p - q).

    Example: logits [0, 0] at T = 1: w32 = [1, 1], Z32 = 2; a draft x = 0 with q(x) = 1 and
    u = 0.4 is accepted (0.4 < 0.5 / 1 by more than the band) without the float64 row.
    """

    def __init__(self, logits: np.ndarray, top: float, temperature: float) -> None:
        self.logits, self.top, self.temperature = logits, top, temperature
        self.w32 = softmax_row(logits, top, temperature, float32=True, floor_gaps=_TARGET_FLOOR_GAPS)
        self.z: float | None = None  # the float64 normaliser, once a decision needed it

    @classmethod
    def of(cls, logits: np.ndarray, params: SamplingParams) -> "_DenseTarget | None":
        """The row's float32 handling, or None: not a `float32_path` row, or its top logit is
        too large for it (see _FLOAT32_TOP)."""
        if not float32_path(logits, params):
            return None
        top = check_finite(logits)
        return cls(logits, top, params.temperature) if abs(top) <= _FLOAT32_TOP * params.temperature else None

    def weight64(self, x: int) -> float:
        """x's float64 weight, as `softmax_row` computes it."""
        return dense_weight(self.logits[x], self.top, self.temperature)

    def _below(self, v: float, g) -> bool:
        """v < g(Z) for g decreasing in Z, from Z32's bounds when they agree, else from Z itself."""
        if self.z is None:
            if v < g(self.w32.total * (1.0 + FLOAT32_EPS)):
                return True
            if v >= g(self.w32.total * (1.0 - FLOAT32_EPS)):
                return False
            self.z = softmax_row(self.logits, self.top, self.temperature).total
        return v < g(self.z)

    def accepts(self, u: float, x: int, q_x: float) -> bool:
        """u < p(x) / q(x): the speculative acceptance test of draft x."""
        w = self.weight64(x)
        return self._below(u, lambda z: w / (z * q_x))

    def draw(self, rng: np.random.Generator) -> int:
        """x ~ p, by thinning draws from w32."""
        for _ in range(_THINNING_TRIES):  # each try keeps its x with probability >= 1 / (1 + eps)
            x = sample(self.w32, rng)
            if rng.random() * float(self.w32.weights[x]) * (1.0 + FLOAT32_EPS) < self.weight64(x):
                return x
        return sample(softmax_row(self.logits, self.top, self.temperature), rng)

    def draw_residual(self, q: Distribution, rng: np.random.Generator) -> int:
        """y ~ normalise(max(0, p - q)), by rejection from p: a try keeps y with probability
        max(0, 1 - q(y) / p(y)), so it succeeds with probability sum(max(0, p - q)) (the
        rejection probability of the draft); after _THINNING_TRIES failures, the float64 residual."""
        for _ in range(_THINNING_TRIES):
            y = self.draw(rng)
            q_y = q.prob(y)
            v = rng.random()
            if q_y == 0.0:
                return y
            w = self.weight64(y)
            if self._below(v, lambda z: 1.0 - q_y * z / w):
                return y
        return sample(residual(softmax_row(self.logits, self.top, self.temperature), q), rng)
