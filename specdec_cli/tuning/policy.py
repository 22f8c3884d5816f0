"""How many tokens to draft each round, and with which drafter: a fixed k, or `auto`.

`draft_policy` makes the policy of one generation: a number is `FixedPolicy(k)`, k tokens every
round from the preferred drafter (fewer only at the end of the token budget; 0 is target-only),
and "auto" is adaptive.AdaptivePolicy, which learns k and the drafter from the run's own rounds.
The engine asks the policy before each round (`choose`) and tells it what the round did
(`observe`), through events.DraftPolicy; it never imports this module.

    draft_policy(8).choose(["lookup", "model"], budget=100)   # -> ("lookup", 8)
    draft_policy(8).choose(["model"], budget=3)               # -> ("model", 3): the budget caps k
    draft_policy("auto")                                      # an AdaptivePolicy, p-min 0 (off)

Why the output stays exact. Speculative sampling emits, at every position, a token whose law
given everything before it is p, whatever k was, provided two things: whether position i is
drafted is decided before the draft token x_i is drawn, and neither that decision nor x_i uses
this round's verification (the target's coins, its residual draws, or which drafts it accepts).
Every policy here chooses k from earlier rounds only, and the early stop (p-min) reads q_i, never
the token drawn from it. Peeking would bend the law: cutting the draft just before its first
rejection (so every round ends in a bonus) would emit a one-hot draft x with probability
p(x) + (1 - p(x)) p(x) instead of p(x); stopping because the drawn x had a small q(x) makes the
proposal follow q restricted to likely tokens while verify divides by q. (The target's logits of
this round are not even available while drafting: the batch that scores the drafts computes
them.) Timings vary from run to run, so with `auto` at temperature > 0 one seed can give
different text on two runs (k decides which random numbers are drawn); the distribution is the
same. Greedy output is always identical.

Left out: how `auto` chooses (adaptive.py), what a call hands on to the next (carried.py,
chain.py), the loop that consults the policy (decoding/engine.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Sequence

from ..errors import BadInput
from ..events import AUTO, DraftPolicy, DraftTokens, Earned, Round
from .adaptive import DEFAULT_P_MIN, AdaptivePolicy

if TYPE_CHECKING:
    from .cost_curve import CostCurve


def draft_policy(draft_tokens: DraftTokens, p_min: float | None = None, costs: "CostCurve | None" = None, first_pass: float | None = None) -> DraftPolicy:
    """A fresh policy for one generation: 'auto' learns (from `costs` on, when given; `first_pass`:
    AdaptivePolicy's prior), an int is fixed. p_min None: the default."""
    if draft_tokens == AUTO:
        return AdaptivePolicy(p_min=DEFAULT_P_MIN if p_min is None else p_min, costs=costs, first_pass=first_pass)
    if isinstance(draft_tokens, int) and not isinstance(draft_tokens, bool) and draft_tokens >= 0:
        return FixedPolicy(draft_tokens, p_min=p_min or 0.0)
    raise BadInput(f"draft_tokens must be 'auto' or a number of tokens >= 0, got {draft_tokens!r}")


@dataclass
class FixedPolicy:
    """k tokens from the preferred drafter every round (k = 0: target-only)."""

    k: int
    p_min: float = 0.0
    prefill_draft = True

    def choose(self, sources: Sequence[str], budget: int) -> tuple[str | None, int]:
        k = min(self.k, budget)
        return (sources[0], k) if sources and k > 0 else (None, 0)

    def observe(self, event: Round) -> None:
        pass

    def resume(self, earned: Mapping[str, Earned]) -> None:
        pass  # a fixed k learns nothing, so it neither uses nor hands on a record

    def earned(self) -> dict[str, Earned]:
        return {}
