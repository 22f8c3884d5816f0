"""model+lookup: lookup where the context's last n-gram was seen before, the draft model otherwise,
and the draft model drafting on where a memory match ends.

A round's proposal is lookup's (deterministic), the draft model's (sampled), or a memory match
the draft model drafts on from (`MemoryThenModel`): the match's tokens, each with the one-hot q
that proposed it, then the draft model's, each with the q it was drawn from. Verification needs
no more than that (maths/speculative.verify: every draft x_i ~ q_i given the drafts before it;
a one-hot q_i is a draft that was certain to be proposed), so the law stays the target's.

Left out: drafting for the draft (cascade.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ..maths.sampling import SamplingParams, point_mass
from .interface import Proposal, Proposer
from .lookup import LookupDrafter, MemoryMatch
from .model import ModelDrafter

EXTENDED = "model:"  # the name of a memory match the draft model drafts on from: "model:" + the match's ("model:lookup:memory:6+")


class ModelAndLookup:
    """Lookup when the context's last n-gram was seen before, the draft model otherwise."""

    name = "model+lookup"

    def __init__(self, model: ModelDrafter, lookup: LookupDrafter) -> None:
        self.model = model
        self.lookup = lookup

    def prefill(self, context: Sequence[int]) -> None:
        self.model.prefill(context)
        self.lookup.prefill(context)

    def candidates(self, context: Sequence[int]) -> list[Proposer]:
        """Lookup's matches, then each memory match drafted on by the draft model, then the draft
        model. A memory match mostly ends where the earlier calls went on differently (an
        extraction's frame ends, and this call's value comes next: memory.RIVAL_SHARE); alone, its
        round ends there and takes the draft model's long rounds' place, so the extended round,
        which the draft model's policy name marks as using it ("model:lookup:memory:6+"), competes
        beside it on what it earns. Example: a memory match "lookup:memory:6+" -> [that match,
        MemoryThenModel("model:lookup:memory:6+"), the draft model]."""
        found = self.lookup.candidates(context)
        extended = [MemoryThenModel(EXTENDED + match.name, match, self.model, self.lookup.is_end) for match in found if isinstance(match, MemoryMatch)]
        return found + extended + self.model.candidates(context)

    def sync(self, context: Sequence[int]) -> None:
        self.model.sync(context)


@dataclass(frozen=True)
class MemoryThenModel:
    """A memory match's tokens, then the draft model's own draft from where they end, up to k in all.
    Example: k = 6, the match proposes [7, 8, 9] -> [7, 8, 9] + the draft model's 3 tokens after
    context + [7, 8, 9] (one catch-up over the three, then steps); at T > 0 q_rows = the point
    masses at 7, 8, 9, then the draft model's q rows. Nothing is added after an end of generation."""

    name: str
    match: Proposer
    model: ModelDrafter
    is_end: Callable[[int], bool]

    def propose(
        self, context: Sequence[int], k: int, params: SamplingParams, rng: np.random.Generator, p_min: float = 0.0
    ) -> Proposal:
        out = self.match.propose(context, k, params, rng, p_min)
        if not out.tokens or len(out.tokens) >= k or self.is_end(out.tokens[-1]):
            return out
        more = self.model.propose(list(context) + out.tokens, k - len(out.tokens), params, rng, p_min)
        if more.q_rows:
            out.q_rows = [point_mass(len(more.q_rows[0]), x) for x in out.tokens] + more.q_rows
        out.tokens += more.tokens
        out.decode_seconds, out.catch_up_seconds = more.decode_seconds, more.catch_up_seconds
        return out
