"""The draft model: a small GGUF model that samples each draft token from its processed distribution q.

With `p_min > 0` it stops early, before drawing a token whose draft confidence (max of q, or
of the raw softmax at temperature 0) is below p_min (llama.cpp's --draft-p-min). Given the
target's `is_end`, it stops after a draft that ends generation.

    drafter = ModelDrafter(LlamaModel("tiny.gguf"))
    drafter.propose([1, 2, 3], 4, GREEDY, rng).tokens   # e.g. [4, 5, 6, 7]

The draft model's KV cache follows causal_model.py's rule: `propose` catches up lazily, `sync` eagerly
(the engine calls it in a `finally`).

Under a constraint (a `Guide`, interface.py) each step's row is masked before q is formed
(maths/masking.py: q' = normalise(q · mask)), and a position the grammar forces takes its token
without a step: the draft model evaluates it together with the next step's tokens, in one
decode. Example: drafts '{', then the forced '"name": "', then one sampled token: two draft
decodes ('{' with the forced tokens, then the last one is left to the target), not five.

Left out: verification (maths/speculative.py), another vocabulary (cross_vocab.py).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from .. import clock
from ..causal_model import CausalModel, catch_up, common_prefix
from ..maths.masking import Mask
from ..maths.distribution import Distribution
from ..maths.draw import sample
from ..maths.filters import argmax, proposal, softmax_at
from ..maths.sampling import SamplingParams
from .interface import Guide, Proposal, Proposer


class ModelDrafter:
    """Drafts with a small GGUF model, sampling each token from its processed distribution q.

    Two steps are methods so that a drafter of another vocabulary (cross_vocab.py) reuses the
    loop: `own_context` (the draft's tokens for the engine's context; here the same ids) and
    `pick` (the proposed token, the draft id fed back, and the q it was drawn from).
    """

    name = "model"

    def __init__(self, model: CausalModel, vocab_limit: int | None = None, is_end: Callable[[int], bool] | None = None) -> None:
        self.model = model
        # Ids at or beyond the shared vocabulary are never proposed (compat.PairReport.shared_vocab, checked by session.check_pair).
        self.vocab_limit = vocab_limit or model.n_vocab
        self.is_end = is_end or (lambda token: False)  # the target's end of generation, of a proposed (target) id

    def own_context(self, context: Sequence[int]) -> list[int]:
        """The draft model's tokens for the engine's context: the same ids."""
        return list(context)

    def own_id(self, token: int) -> int | None:
        """The id the draft model evaluates for a proposed token (a forced one): the same id."""
        return token

    @property
    def q_size(self) -> int:
        """The length of the q rows this drafter proposes from (the ids verify scores)."""
        return self.vocab_limit

    def pick(
        self, row: np.ndarray, params: SamplingParams, rng: np.random.Generator, p_min: float, mask: Mask | None = None
    ) -> tuple[int, int, Distribution | None] | None:
        """(proposed id, the id the draft model evaluates next, q or None if deterministic), or
        None to stop here. The early stop looks at q (or the softmax) only, before x is drawn:
        the proposal stays "x ~ q" whenever there is one, which is what verify assumes. With a
        constraint's `mask`, the row is masked first (q')."""
        row = row[: self.vocab_limit]
        if mask is not None:
            mask.apply(row)  # in place: the draft's row is read once, here
        if params.greedy:
            x = argmax(row)
            if p_min > 0.0 and softmax_at(row, x) < p_min:
                return None
            return x, x, None
        q = proposal(row, params)
        if p_min > 0.0 and q.max_prob() < p_min:  # (max_prob of a dense q is a pass over the row)
            return None
        x = sample(q, rng)
        return x, x, q

    def prefill(self, context: Sequence[int], evaluate: bool = True) -> None:
        if evaluate:
            catch_up(self.model, self.own_context(context), 0)

    def candidates(self, context: Sequence[int]) -> list[Proposer]:
        return [self]

    def propose(
        self, context: Sequence[int], k: int, params: SamplingParams, rng: np.random.Generator, p_min: float = 0.0,
        guide: Guide | None = None,
    ) -> Proposal:  # fmt: skip
        out = Proposal(q_rows=None if params.greedy else [])
        t0 = clock.now()
        own = self.own_context(context)
        k = min(k, self.model.n_ctx - len(own))
        if k <= 0 or not own:
            return out
        logits = catch_up(self.model, own)
        out.catch_up_seconds = out.decode_seconds = clock.now() - t0
        self.extend(out, logits[0], k, params, rng, p_min, guide)
        return out

    def extend(
        self, out: Proposal, row: np.ndarray, k: int, params: SamplingParams, rng: np.random.Generator, p_min: float,
        guide: Guide | None = None,
    ) -> None:  # fmt: skip
        """Draft on from `row` (the draft's logits after its cache) until `out` holds k tokens of
        its own, the early stop, or an end of generation (nothing after it can be emitted, so
        drafts past it cost a draft step and a target row each for nothing; like p_min's stop it
        depends on the draft's own tokens only, which keeps the law); the last draft is never
        evaluated here (the target does that). Under a constraint, forced tokens join without a
        pick (they are not counted in k) and are evaluated with the next step's batch; the
        proposal ends where the guide is full."""
        own = len(out.tokens)  # tokens already in `out` (a cascade's guessed batch) count as the drafter's own
        pending: list[int] = []  # draft ids not yet evaluated since `row`
        while guide is None or not guide.full():
            forced = guide.forced() if guide is not None else None
            if forced is not None:
                d = self.own_id(forced)
                if d is None:
                    break
                out.add_forced(forced, self.q_size, guide)
                pending.append(d)
                if self.is_end(forced):
                    break
                continue
            if own >= k:
                break
            if pending:
                t0 = clock.now()
                row = self.model.decode(pending, 1)[0]
                out.decode_seconds += clock.now() - t0
                pending = []
            picked = self.pick(row, params, rng, p_min, guide.mask() if guide is not None else None)
            if picked is None:
                break
            x, d, q = picked
            out.add(x, q, guide)
            own += 1
            pending = [d]
            if self.is_end(x):
                break

    def sync(self, context: Sequence[int]) -> None:
        self.model.rewind(common_prefix(self.model.tokens, self.own_context(context)))

