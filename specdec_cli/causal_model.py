"""What the core needs from a model, and the rule that brings its KV cache to a context.

`CausalModel` is the interface the round (decoding/), the drafters (drafting/) and the cost
curve (tuning/) hold a model by: its cache's tokens, a decode that returns logits rows, a
rewind. llama/model.LlamaModel implements it, and so do the tests' fakes and a shared batch's
sequence views (decoding/batch.SharedSequence). It lives here, below every part that uses it,
so that no part reaches up or sideways for the model it drives.

A cache is matched to the context lazily: keep the longest common prefix of what the cache
holds and the context, drop the rest, and evaluate only the tokens after it.

    common_prefix([1, 2, 3], [1, 2, 4])        # -> 2
    catch_up(model, [1, 2, 4])                 # model.tokens [1, 2, 3] -> rewind(2), decode([4])

Left out: when to sync (the engine and the drafters decide), loading a model (llama/).
"""

from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np


class CausalModel(Protocol):
    """What drafting and verification need from a model (the llama.cpp backend or a fake)."""

    tokens: list[int]
    n_vocab: int
    n_ctx: int

    def decode(self, tokens: Sequence[int], n_logits: int = 1) -> np.ndarray | None: ...

    def rewind(self, n_keep: int) -> None: ...

    def piece(self, token: int) -> bytes: ...

    def is_end_of_generation(self, token: int) -> bool: ...


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token lists. Example: [1,2,3], [1,2,4] -> 2."""
    n = min(len(a), len(b))
    if isinstance(a, list) and isinstance(b, list):  # the usual case, every round (a cache's tokens, a context): one copy at most
        if (a if len(a) == n else a[:n]) == (b if len(b) == n else b[:n]):
            return n
    elif list(a[:n]) == list(b[:n]):
        return n
    i = 0
    while a[i] == b[i]:
        i += 1
    return i


def catch_up(model: CausalModel, context: Sequence[int], n_logits: int = 1) -> np.ndarray | None:
    """Bring a model's KV cache to `context` and return logits for its last `n_logits` tokens.

    At least `n_logits` tokens are (re)evaluated, so the last row is always fresh; with
    n_logits=0 (a prefill) only what the cache lacks is evaluated, possibly nothing.
    """
    keep = min(common_prefix(model.tokens, context), len(context) - n_logits)
    model.rewind(keep)
    if keep == len(context):
        return None
    return model.decode(context[keep:], n_logits)
