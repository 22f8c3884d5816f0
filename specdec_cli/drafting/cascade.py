"""The cascade: where lookup has a guess, the draft model checks it in ONE batch and samples its own draft from it.

Left out: the draft model alone (model.py), lookup alone (lookup.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .. import clock
from ..causal_model import catch_up
from ..maths.draw import sample
from ..maths.filters import argmax, proposal
from ..maths.sampling import SamplingParams
from ..maths.speculative import keep_or_resample
from .combined import ModelAndLookup
from .interface import Guide, Proposal, Proposer


@dataclass(frozen=True)
class GuessedDraft:
    """One cascade round: the lookup match that guesses, and the draft model that samples from the guess."""

    name: str
    drafter: CascadeDrafter
    guess: Proposer

    def propose(
        self, context: Sequence[int], k: int, params: SamplingParams, rng: np.random.Generator, p_min: float = 0.0,
        guide: Guide | None = None,
    ) -> Proposal:  # fmt: skip
        guessed = self.guess.propose(context, k, params, rng, p_min).tokens  # a guess, not a proposal: the guide stays where it is
        return self.drafter.sample_with_guess(context, guessed, k, params, rng, p_min, guide)



class CascadeDrafter(ModelAndLookup):
    """Drafting for the draft: where lookup (or the memory) has a guess, the draft model scores the
    guess in ONE batch instead of k sequential steps, and its own exact sample comes out of it.

    Staged speculative decoding (Spector & Re 2023) and CS-Drafting (Chen et al., NeurIPS 2024)
    cascade drafters; here the lookup's guess g_1..g_m is verified against the draft model's q
    as the target verifies drafts (a deterministic proposal: keep g_i with probability q_i(g_i),
    else draw from normalise(max(0, q_i - onehot(g_i))) and stop; all kept: one more token from
    q_{m+1}). So the tokens are an exact sample of the draft model, and q_rows are the very rows
    that batch gave, which is all the target's verification needs (speculative.verify: x ~ q).
    Without a guess it drafts as ModelDrafter does. A ModelAndLookup otherwise (its two drafters,
    prefill, sync), whose lookup candidates are turned into guessed rounds. At temperature 0 the sample is the draft's
    greedy continuation. Where the sample leaves the guess (or takes all of it) short of k tokens,
    the draft model drafts on from there step by step, as ModelDrafter does. Example: k = 4, guess
    [7, 8, 9], the draft's greedy choices 7, 8, 5 -> proposal [7, 8, 5] from one draft batch of 4
    rows, then one step from 5 on gives the fourth token (2 of ModelDrafter's 4 steps saved).

    Under a constraint each row of the batch is masked by the guide's mask after the sample so
    far (q'), so a guessed token the grammar forbids is never kept, and the sample stays exact.

    Left out: p_min's early stop in a guessed round (the batch is scored whole); drafts of another
    vocabulary (the guess is in target ids: session uses it for a same-vocabulary pair only).
    """

    name = "cascade"

    def candidates(self, context: Sequence[int]) -> list[Proposer]:
        """A guessed round for each lookup match, named by it ("cascade:3-5", "cascade:memory:6+"),
        then the draft model step by step. The tokens are the draft model's sample either way, so
        `auto` weighs what each costs per kept token (a wrong guess, such as the memory's value
        from an earlier call, costs a batch for one token); a fixed k takes the first."""
        guessed = [GuessedDraft("cascade:" + found.name.split(":", 1)[1], self, found) for found in self.lookup.candidates(context)]
        return guessed + self.model.candidates(context)

    def sample_with_guess(
        self, context: Sequence[int], guess: Sequence[int], k: int, params: SamplingParams, rng: np.random.Generator, p_min: float = 0.0,
        guide: Guide | None = None,
    ) -> Proposal:  # fmt: skip
        """Up to k tokens of the draft model's own sample: decided from one batch that scores `guess`
        as far as the sample follows it (and one token more), then step by step as ModelDrafter drafts."""
        drafter = self.model
        model = drafter.model
        own = drafter.own_context(context)
        k = min(k, model.n_ctx - len(own))
        guess = list(guess[: max(0, k - 1)])
        out = Proposal(q_rows=None if params.greedy else [])
        if k <= 0 or not own:
            return out
        t0 = clock.now()
        logits = catch_up(model, own + guess, len(guess) + 1)  # row i: after own + guess[:i]
        kept = 0
        try:
            for i in range(len(guess) + 1):
                if guide is not None and guide.full():
                    break
                row = logits[i, : drafter.vocab_limit]
                if guide is not None:
                    guide.mask().apply(row)  # in place: each row of the batch is read once
                q = None if params.greedy else proposal(row, params)
                x = argmax(row) if q is None else sample(q, rng) if i == len(guess) else keep_or_resample(q, guess[i], rng)
                out.add(x, q, guide)
                if i == len(guess) or x != guess[i] or drafter.is_end(x):
                    break
                kept += 1
        finally:
            model.rewind(len(own) + kept)  # the cache holds the sample but its last token, as ModelDrafter leaves it
        out.decode_seconds = out.catch_up_seconds = clock.now() - t0
        if out.tokens and len(out.tokens) < k and not drafter.is_end(out.tokens[-1]) and not (guide is not None and guide.full()):
            t0 = clock.now()
            row = model.decode(out.tokens[-1:], 1)[0]
            out.decode_seconds += clock.now() - t0
            drafter.extend(out, row, k, params, rng, p_min, guide)
        return out
