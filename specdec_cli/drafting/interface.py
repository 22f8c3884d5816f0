"""What a drafter is: asked for up to k tokens that continue `context`, it answers with a `Proposal`.

The proposal holds the token ids and, for a sampling drafter, the processed distribution q it
drew each one from (None for a deterministic drafter, whose q is one-hot). It never verifies;
that is `maths.speculative.verify`'s job.

    drafter = ModelDrafter(LlamaModel("tiny.gguf"))
    proposal = drafter.propose(context=[1, 2, 3], k=4, params=GREEDY, rng=rng)
    proposal.tokens  # e.g. [4, 5, 6, 7]

`candidates(context)` lists who can propose for this context, preferred first; the
draft-length policy (tuning/policy.py) picks one and its k each round. Lookup names its match by
length ("lookup:1", "lookup:2", "lookup:3-5", "lookup:6+"), so that the policy learns
separately how well short and long matches are accepted.

Under a constraint, `propose` also gets the sequence's `Guide` (grammar/guide.py): the drafter
proposes only tokens its mask allows, pushes each one it proposes (so the next position's mask
is the one after it), samples from q' = normalise(q · mask), and stops where the guide is full.
A position whose mask allows one token alone is forced: a drafter may take it without a draft
step (the draft model evaluates it with the next step's batch); the engine adds any forced
tokens after the proposal.

Left out: the drafters themselves (model.py, lookup.py, combined.py, cascade.py, cross_vocab.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence

import numpy as np

from ..maths.masking import Mask
from ..maths.distribution import Distribution, point_mass
from ..maths.sampling import SamplingParams


@dataclass
class Proposal:
    tokens: list[int] = field(default_factory=list)
    q_rows: list[Distribution] | None = None  # the sparse q of each draft; None: deterministic (q one-hot)
    decode_seconds: float = 0.0  # time spent inside the draft model's decode calls
    catch_up_seconds: float = 0.0  # of which bringing its cache up to the context (see policy.draft_step_seconds)

    def add(self, x: int, q: Distribution | None, guide: "Guide | None") -> None:
        """Add draft x (drawn from q; None: deterministic), and take it at the guide's position."""
        if q is not None:
            self.q_rows.append(q)
        self.tokens.append(x)
        if guide is not None:
            guide.push(x)

    def add_forced(self, x: int, n: int, guide: "Guide") -> None:
        """Add the token the constraint forces: a one-point q over n ids where the proposal has q rows."""
        self.add(x, point_mass(n, x) if self.q_rows is not None else None, guide)


class Guide(Protocol):
    """A sequence's constraint as drafting sees it (grammar/guide.Guide)."""

    def mask(self) -> Mask:
        """The tokens allowed at the next position (maths/masking.py)."""
        ...

    def allows(self, token: int) -> bool: ...

    def forced(self) -> int | None:
        """The one token allowed at the next position, or None."""
        ...

    def push(self, token: int) -> None:
        """Take a proposed token: the next position is after it."""
        ...

    def full(self) -> bool:
        """The round holds as many tokens as it may: propose no more."""
        ...


class Proposer(Protocol):
    """One way to propose for the current context; `name` ("model", "lookup:3-5") is the key
    under which the policy keeps its measurements."""

    name: str

    def propose(
        self, context: Sequence[int], k: int, params: SamplingParams, rng: np.random.Generator, p_min: float = 0.0, guide: Guide | None = None
    ) -> Proposal: ...


class Drafter(Proposer, Protocol):
    def prefill(self, context: Sequence[int], evaluate: bool = True) -> None:
        """Take in the prompt, all but the token that opens round 1. With evaluate=False a draft
        model leaves it to be caught up when it first drafts (batch.BatchedPolicy.prefill_draft);
        what costs no model pass (lookup's index, the prompt's length) is taken in either way."""
        ...

    def candidates(self, context: Sequence[int]) -> list[Proposer]:
        """Who can propose for this context, preferred first (empty: a plain target step)."""
        ...

    def sync(self, context: Sequence[int]) -> None: ...

