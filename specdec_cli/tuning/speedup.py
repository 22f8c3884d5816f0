"""The speed-up model that explains a run's figures: Leviathan et al. 2022, Theorem 3.8.

The verify cost is measured instead of assumed equal to one target step. With per-token
acceptance alpha and k drafts a round yields E = (1 - alpha^(k+1)) / (1 - alpha) tokens on
average (k + 1 when alpha = 1), and

    speedup = E * T_target(1) / (k * T_draft + T_target(k + 1))

where T_target(n) is the time of one target batch of n tokens and T_draft one draft step.
Example: alpha = 0.8, k = 4, T_draft = 5 ms, T_target(1) = 12 ms, T_target(5) = 18 ms
-> E = 3.36, speedup = 3.36 * 12 / 38 = 1.06.

The k that `auto` drafts (`best_draft_length`) maximises the same ratio with per-position
acceptance: with a_i = P(draft i is proposed and accepted | drafts 1..i-1 were), a round of k
drafts yields on average E(k) = 1 + sum_{i<=k} prod_{j<=i} a_j tokens (maths/speculative.
expected_tokens) and costs C(k) = k * T_draft + T_batch(k + 1), T_batch(n) being the time of a
round whose target pass scores n tokens (plus, for a draft model, what its catch-up costs beyond
one step: after a fully accepted round it evaluates two tokens, the last draft and the bonus).
A plain target step (k = 0) yields 1 token in T_batch(1). Pick k in 0..max_k maximising
E(k) / C(k). Example: a_i = 0.8, T_draft = 5 ms, T_batch(n) = 12 + 1.5 (n - 1) ms:
k = 0: 1 / 12 = 0.0833 tokens/ms; k = 1: 1.8 / 18.5 = 0.0973; k = 2: 2.44 / 25 = 0.0976;
k = 3: 2.952 / 31.5 = 0.0937 -> k = 2.

Left out: measuring the cost curve (cost_curve.measure_cost_curve) and the acceptance
(estimates.py); when `auto` drafts at all, and with which proposer (adaptive.py).
"""

from __future__ import annotations

from typing import Sequence

from ..maths.speculative import expected_tokens
from .cost_curve import CostCurve


def expected_tokens_per_round(alpha: float, k: int) -> float:
    """E[tokens per round] under i.i.d. acceptance alpha (Leviathan et al. 2022, eq. 1)."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def predicted_speedup(alpha: float, k: int, draft_step: float, target_step: float, verify_batch: float) -> float:
    """Theorem 3.8 with a measured verify cost: time per token target-only / speculative."""
    if k == 0:
        return 1.0
    return expected_tokens_per_round(alpha, k) * target_step / (k * draft_step + verify_batch)


def predict(alpha: float, k: int, cost: CostCurve) -> float:
    """predicted_speedup from a measured cost curve, whose verify cost is T_target(k + 1)."""
    return predicted_speedup(alpha, k, cost.draft_step, cost.target_step, cost.target_batch[k])


def best_draft_length(
    acceptance: Sequence[float],
    draft_step: float,
    batch_seconds: Sequence[float],
    max_k: int,
    min_k: int = 0,
    draft_overhead: float = 0.0,
    per_token: float = 0.0,
) -> tuple[int, float]:
    """The k in min_k..max_k with the most expected tokens per second, and that rate.

    batch_seconds[n - 1] = T_batch(n), for n = 1..max_k + 1; acceptance holds a_1..a_max_k.
    Rate(0) = 1 / T_batch(1); rate(k) = E(k) / (draft_overhead + k * draft_step + T_batch(k + 1)
    + per_token * E(k)), draft_overhead being what a drafting round costs beyond its k steps and
    per_token what each token it makes costs later (a draft model's catch-up:
    adaptive.AdaptivePolicy.plans). Ties go to the smaller k.
    """
    assert len(acceptance) >= max_k and len(batch_seconds) > max_k and 0 <= min_k <= max(max_k, 1)
    best_k, best_rate = (0, 1.0 / batch_seconds[0]) if min_k == 0 else (0, -1.0)
    expected = expected_tokens(acceptance[:max_k])
    for k in range(1, max_k + 1):
        rate = expected[k] / (draft_overhead + k * draft_step + batch_seconds[k] + per_token * expected[k])
        if k >= min_k and rate > best_rate:
            best_k, best_rate = k, rate
    return best_k, best_rate
