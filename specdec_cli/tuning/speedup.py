"""The speed-up model that explains a run's figures: Leviathan et al. 2022, Theorem 3.8.

The verify cost is measured instead of assumed equal to one target step. With per-token
acceptance alpha and k drafts a round yields E = (1 - alpha^(k+1)) / (1 - alpha) tokens on
average (k + 1 when alpha = 1), and

    speedup = E * T_target(1) / (k * T_draft + T_target(k + 1))

where T_target(n) is the time of one target batch of n tokens and T_draft one draft step.
Example: alpha = 0.8, k = 4, T_draft = 5 ms, T_target(1) = 12 ms, T_target(5) = 18 ms
-> E = 3.36, speedup = 3.36 * 12 / 38 = 1.06.

Left out: E by position (maths/speculative.expected_tokens, what `auto` plans with), measuring
the cost curve (cost_curve.measure_cost_curve).
"""

from __future__ import annotations

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
