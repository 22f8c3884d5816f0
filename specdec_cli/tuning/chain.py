"""Calls one after another on one loaded pair: each `auto` policy goes on from the last one's.

A fresh policy spends a short call's first rounds learning: k = 3 on the priors in round 1, a
first batch size in round 2, a plain target step soon after to measure T_batch(1), and costs from
few sizes, which one slow pass can tilt. Where the target's pass is dear and drafts mostly hit (a
target over RPC), that warm-up is a good part of the call. A caller that runs calls one after
another (a library loop, benchmarks/rpc.py) hands each the previous call's policy `continued()`:
costs, acceptance and back-offs go on as if the calls were one run, and only each call's first
round (slow after the prefill) teaches nothing. Acceptance fades by DECAY per round, so a call
whose text drafts worse than the last one's corrects it as a run does when its text changes.
`TunedPolicies` keeps one such chain per setting:

    tuned = TunedPolicies()
    first = tuned.policy("auto", key=0.8)    # fresh
    tuned.policy("auto", key=0.8)            # first.continued(): goes on from what first learnt
    tuned.policy("auto", key=0.0)            # another setting: fresh
    tuned.policy(4)                          # FixedPolicy(4): nothing to go on from

Not for calls that run at once: each would learn into the other's. (The server starts each
request from the pass costs its batches measured instead: decoding/batch.py.) Measured over RPC:
docs/rpc.md, "Measured: the target through RPC at 0, 2 and 10 ms round trips".

Left out: what a continued policy keeps (adaptive.AdaptivePolicy.continued), the records carried
through the drafting memory (carried.py).
"""

from __future__ import annotations

from ..events import DraftPolicy, DraftTokens
from .adaptive import AdaptivePolicy
from .policy import draft_policy


class TunedPolicies:
    """The policies of calls that run one after another on one loaded pair: each `auto` policy
    continues the last one handed out for the same setting, a fixed k is as draft_policy makes
    it. `key` tells settings apart whose acceptance differs (the temperature, the drafter); the
    module's docstring has the example."""

    def __init__(self) -> None:
        self._last: dict[tuple, AdaptivePolicy] = {}

    def policy(self, draft_tokens: DraftTokens, p_min: float | None = None, key: object = None) -> DraftPolicy:
        last = self._last.get((draft_tokens, p_min, key))
        policy = last.continued() if last is not None else draft_policy(draft_tokens, p_min)
        if isinstance(policy, AdaptivePolicy):
            self._last[draft_tokens, p_min, key] = policy
        return policy
