"""The draft model: a small GGUF model that samples each draft token from its processed distribution q.

With `p_min > 0` it stops early, before drawing a token whose draft confidence (max of q, or
of the raw softmax at temperature 0) is below p_min (llama.cpp's --draft-p-min). Given the
target's `is_end`, it stops after a draft that ends generation.

    drafter = ModelDrafter(LlamaModel("tiny.gguf"))
    drafter.propose([1, 2, 3], 4, GREEDY, rng).tokens   # e.g. [4, 5, 6, 7]

The draft model's KV cache follows kv_sync's rule: `propose` catches up lazily, `sync` eagerly
(the engine calls it in a `finally`).

Left out: verification (maths/speculative.py), another vocabulary (cross_vocab.py).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from .. import clock
from ..maths.sampling import Distribution, SamplingParams, argmax, proposal, sample, softmax_at
from .interface import Proposal, Proposer
from .kv_sync import CausalModel, catch_up, common_prefix


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

    def pick(
        self, row: np.ndarray, params: SamplingParams, rng: np.random.Generator, p_min: float
    ) -> tuple[int, int, Distribution | None] | None:
        """(proposed id, the id the draft model evaluates next, q or None if deterministic), or
        None to stop here. The early stop looks at q (or the softmax) only, before x is drawn:
        the proposal stays "x ~ q" whenever there is one, which is what verify assumes."""
        row = row[: self.vocab_limit]
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
        self, context: Sequence[int], k: int, params: SamplingParams, rng: np.random.Generator, p_min: float = 0.0
    ) -> Proposal:
        out = Proposal(q_rows=None if params.greedy else [])
        t0 = clock.now()
        own = self.own_context(context)
        k = min(k, self.model.n_ctx - len(own))
        if k <= 0 or not own:
            return out
        logits = catch_up(self.model, own)
        out.catch_up_seconds = out.decode_seconds = clock.now() - t0
        self.extend(out, logits[0], k, params, rng, p_min)
        return out

    def extend(self, out: Proposal, row: np.ndarray, k: int, params: SamplingParams, rng: np.random.Generator, p_min: float) -> None:
        """Draft on, one step at a time, from `row` (the draft's logits after its cache) until `out`
        holds k tokens, the early stop, or an end of generation (nothing after it can be emitted,
        so drafts past it cost a draft step and a target row each for nothing; like p_min's stop
        it depends on the draft's own tokens only, which keeps the law); the last draft is never
        evaluated here (the target does that)."""
        while len(out.tokens) < k:
            picked = self.pick(row, params, rng, p_min)
            if picked is None:
                break
            x, d, q = picked
            if q is not None:
                out.q_rows.append(q)
            out.tokens.append(x)
            if len(out.tokens) == k or self.is_end(x):
                break
            t0 = clock.now()
            row = self.model.decode([d], 1)[0]
            out.decode_seconds += clock.now() - t0

    def sync(self, context: Sequence[int]) -> None:
        self.model.rewind(common_prefix(self.model.tokens, self.own_context(context)))

