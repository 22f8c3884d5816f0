"""Pure-numpy sampling: logits to probabilities, and the speculative accept/reject rule.

The rule is speculative sampling as in Leviathan et al. 2022 ("Fast Inference from
Transformers via Speculative Decoding", Algorithm 1) and Chen et al. 2023 ("Accelerating
Large Language Model Decoding with Speculative Sampling", Algorithm 2). Names follow them:
`p` is always the target's distribution, `q` always the draft's.

    accept draft token x with probability min(1, p(x) / q(x))
    on rejection, sample from normalise(max(0, p - q))          (the residual)
    if all k drafts are accepted, sample one bonus token from p

The same processing (top-k, top-p, min-p, then temperature; llama.cpp's default order)
is applied to p and q, so the output follows the *processed* target distribution exactly.
Temperature 0 means greedy: the distribution is one-hot at the first maximal logit.

Example (greedy): p = one-hot(7), q = one-hot(7) -> the draft token 7 is accepted;
p = one-hot(3), q = one-hot(7) -> 7 is rejected and the residual is one-hot(3).

Left out: penalties (repetition, DRY), grammars, typical-p and mirostat, which change p
in ways that depend on more than the logits row. No global RNG: every draw takes a
`numpy.random.Generator` that the caller seeded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .errors import NumericalError

# How many of the largest logits are sorted before falling back to a full sort for top-p.
_TOP_P_CANDIDATES = 1024


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


def check_finite(logits: np.ndarray) -> float:
    """Return the largest logit, raising NumericalError if any logit is NaN or +inf."""
    top = float(logits.max())
    if not np.isfinite(top):
        raise NumericalError(
            "the model produced NaN or infinite logits; the GGUF file may be corrupt or the "
            "GPU offload broken (try --gpu-layers 0)"
        )
    return top


def argmax(logits: np.ndarray) -> int:
    """Greedy choice: the first index of the largest logit (ties go to the lowest id)."""
    check_finite(logits)
    return int(np.argmax(logits))


def one_hot(n: int, index: int) -> np.ndarray:
    out = np.zeros(n, dtype=np.float64)
    out[index] = 1.0
    return out


def probabilities(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """Processed distribution over the row: top-k, top-p, min-p (at temperature 1), then temperature.

    Returns float64 probabilities of the same length as `logits`, summing to 1.
    """
    top = check_finite(logits)
    n = logits.shape[-1]
    if params.greedy:
        return one_hot(n, int(np.argmax(logits)))

    if 0 < params.top_k < n:
        ids = np.argpartition(logits, n - params.top_k)[n - params.top_k :]
        ids.sort()
    else:
        ids = np.arange(n)
    z = logits[ids].astype(np.float64) - top  # log-weights at temperature 1, max 0
    w = np.exp(z)

    if params.top_p < 1.0:
        keep = _nucleus(w, params.top_p)
        ids, z, w = ids[keep], z[keep], w[keep]
    if params.min_p > 0.0:
        keep = w >= params.min_p * w.max()
        ids, z = ids[keep], z[keep]

    tempered = np.exp((z - z.max()) / params.temperature)
    out = np.zeros(n, dtype=np.float64)
    out[ids] = tempered / tempered.sum()
    return out


def _nucleus(w: np.ndarray, top_p: float) -> np.ndarray:
    """Indices into `w` of the smallest set, largest first, whose mass reaches top_p (at least one)."""
    total = w.sum()
    m = min(len(w), _TOP_P_CANDIDATES)
    if m < len(w):
        cand = np.argpartition(w, len(w) - m)[len(w) - m :]
    else:
        cand = np.arange(len(w))
    order = cand[np.argsort(-w[cand], kind="stable")]
    cum = np.cumsum(w[order]) / total
    cut = int(np.searchsorted(cum, top_p, side="left"))
    if cut >= len(order) and m < len(w):
        order = np.argsort(-w, kind="stable")  # the nucleus is wider than the candidates
        cum = np.cumsum(w[order]) / total
        cut = int(np.searchsorted(cum, top_p, side="left"))
    return order[: min(cut, len(order) - 1) + 1]


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    """Draw one token from a distribution by inverting its CDF (never a zero-probability id)."""
    cdf = np.cumsum(probs)
    u = rng.random() * cdf[-1]
    return int(np.searchsorted(cdf, u, side="right"))


def residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """normalise(max(0, p - q)): what the target still owes after a rejected draft.

    If p == q everywhere the residual has no mass; a rejection then has probability zero,
    so returning p keeps the function total without changing any distribution.
    """
    r = np.maximum(p - q, 0.0)
    mass = r.sum()
    if mass <= 0.0:
        return p
    return r / mass


@dataclass(frozen=True)
class Verdict:
    """The outcome of verifying one draft: how many drafts were kept and the target's token."""

    accepted: int
    token: int
    bonus: bool  # True: all drafts accepted and `token` is the bonus; False: a correction


def verify(
    target_logits: np.ndarray,
    draft_tokens: Sequence[int],
    q_rows: Sequence[np.ndarray] | None,
    params: SamplingParams,
    rng: np.random.Generator,
) -> Verdict:
    """Speculative sampling over one target batch (Leviathan et al. 2022, Algorithm 1).

    target_logits: (k + 1, n) rows; row i is the target's logits after draft i (row 0:
    after the context). q_rows[i] is the draft's processed distribution for draft i, or
    None for a deterministic drafter (then q is one-hot at the draft token, so x is kept
    with probability p(x) and the residual is p without x). p rows are processed lazily:
    rows after the first rejection are never touched.
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
        p = probabilities(target_logits[i], params)
        q = one_hot(n, x) if q_rows is None else q_rows[i]
        assert q[x] > 0.0, "a draft token must have positive draft probability"
        if rng.random() < p[x] / q[x]:  # u < p/q happens with probability min(1, p/q)
            continue
        return Verdict(accepted=i, token=sample(residual(p, q), rng), bonus=False)
    return Verdict(accepted=k, token=sample(probabilities(target_logits[k], params), rng), bonus=True)
