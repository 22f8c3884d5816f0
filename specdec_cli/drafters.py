"""Who proposes draft tokens: one small interface, and the draft-model implementation.

A drafter is asked for up to k tokens that continue `context` and answers with a
`Proposal`: the token ids and, for a sampling drafter, the processed distribution q it drew
each one from (None for a deterministic drafter, whose q is one-hot). It never verifies;
that is `sampling.verify`'s job.

    drafter = ModelDrafter(LlamaModel("tiny.gguf"))
    proposal = drafter.propose(context=[1, 2, 3], k=4, params=GREEDY, rng=rng)
    proposal.tokens  # e.g. [4, 5, 6, 7]

The draft model's KV cache is matched to the context lazily: `propose` keeps the longest
common prefix of what the cache holds and the context, drops the rest and evaluates only
the tokens after it. `sync` does the same eagerly (the engine calls it in a `finally`).

Left out here: the choice of k (the engine's) and any drafter that needs no model (added
beside this one behind the same interface).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol, Sequence

import numpy as np

from .sampling import SamplingParams, argmax, probabilities, sample


@dataclass
class Proposal:
    tokens: list[int] = field(default_factory=list)
    q_rows: list[np.ndarray] | None = None  # None: deterministic proposal (q one-hot)
    decode_seconds: float = 0.0  # time spent inside the draft model's decode calls


class Drafter(Protocol):
    def prefill(self, context: Sequence[int]) -> None: ...

    def propose(self, context: Sequence[int], k: int, params: SamplingParams, rng: np.random.Generator) -> Proposal: ...

    def sync(self, context: Sequence[int]) -> None: ...


class CausalModel(Protocol):
    """What drafting and verification need from a model (the llama.cpp backend or a fake)."""

    tokens: list[int]
    n_vocab: int
    n_ctx: int

    def decode(self, tokens: Sequence[int], n_logits: int = 1) -> np.ndarray | None: ...

    def rewind(self, n_keep: int) -> None: ...


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token lists. Example: [1,2,3], [1,2,4] -> 2."""
    n = min(len(a), len(b))
    if list(a[:n]) == list(b[:n]):
        return n
    i = 0
    while a[i] == b[i]:
        i += 1
    return i


def catch_up(model: CausalModel, context: Sequence[int], n_logits: int = 1) -> np.ndarray | None:
    """Bring a model's KV cache to `context` and return logits for its last `n_logits` tokens.

    At least `n_logits` tokens are (re)evaluated, so the last row is always fresh.
    """
    keep = min(common_prefix(model.tokens, context), len(context) - n_logits)
    model.rewind(keep)
    return model.decode(context[keep:], n_logits)


class ModelDrafter:
    """Drafts with a small GGUF model, sampling each token from its processed distribution q."""

    def __init__(self, model: CausalModel, vocab_limit: int | None = None) -> None:
        self.model = model
        # Ids at or beyond the shared vocabulary are never proposed (see engine.shared_vocab).
        self.vocab_limit = vocab_limit or model.n_vocab

    def prefill(self, context: Sequence[int]) -> None:
        if context:
            self.model.rewind(common_prefix(self.model.tokens, context))
            if len(self.model.tokens) < len(context):
                self.model.decode(context[len(self.model.tokens) :], 0)

    def propose(self, context: Sequence[int], k: int, params: SamplingParams, rng: np.random.Generator) -> Proposal:
        out = Proposal(q_rows=None if params.greedy else [])
        k = min(k, self.model.n_ctx - len(context))
        if k <= 0:
            return out
        t0 = time.perf_counter()
        logits = catch_up(self.model, context)
        out.decode_seconds += time.perf_counter() - t0
        for i in range(k):
            row = logits[0, : self.vocab_limit]
            if params.greedy:
                x = argmax(row)
            else:
                q = probabilities(row, params)
                x = sample(q, rng)
                out.q_rows.append(q)
            out.tokens.append(x)
            if i + 1 < k:  # the last draft is never evaluated here: the target does that
                t0 = time.perf_counter()
                logits = self.model.decode([x], 1)
                out.decode_seconds += time.perf_counter() - t0
        return out

    def sync(self, context: Sequence[int]) -> None:
        self.model.rewind(common_prefix(self.model.tokens, context))
