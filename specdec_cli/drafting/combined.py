"""model+lookup: lookup where the context's last n-gram was seen before, the draft model otherwise.

One drafter per round: a round's proposal is either deterministic or sampled, never mixed.

Left out: drafting for the draft (cascade.py).
"""

from __future__ import annotations

from typing import Sequence

from .interface import Proposer
from .lookup import LookupDrafter
from .model import ModelDrafter


class ModelAndLookup:
    """Lookup when the context's last n-gram was seen before, the draft model otherwise."""

    name = "model+lookup"

    def __init__(self, model: ModelDrafter, lookup: LookupDrafter) -> None:
        self.model = model
        self.lookup = lookup

    def prefill(self, context: Sequence[int], evaluate: bool = True) -> None:
        self.model.prefill(context, evaluate)
        self.lookup.prefill(context, evaluate)

    def candidates(self, context: Sequence[int]) -> list[Proposer]:
        return self.lookup.candidates(context) + self.model.candidates(context)

    def sync(self, context: Sequence[int]) -> None:
        self.model.sync(context)

