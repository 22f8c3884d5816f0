"""One sequence's constraint while it generates: the matcher at the output so far, and the drafts on top.

A round under a constraint (decoding/engine.py) goes:

    guide.mask()           the tokens allowed at the next position (llguidance's bitmask)
    guide.push(x)          a draft x, taken tentatively: the next mask is the one after it
    ...                    (the drafter masks q at each position: q' = normalise(q · mask))
    guide.masks()          the masks of every drafted position and the one after them: the
                           target's rows are masked by the same masks (p')
    guide.settle(n, t)     n drafts were kept and the target chose t: the matcher rolls back
                           the rejected drafts and takes t; the next round starts after t

A mask that admits exactly one token forces it (`forced`): p' puts all its mass there, so the
engine adds it to the round as a draft that cannot be rejected and no drafter proposes (a free
draft). Masks are computed once per position and kept until the round settles, so the draft's
q' and the target's p' of a position come from the same mask.

Example, a grammar for '{"a": ' then digits, over a vocabulary with the token '{"a": ':

    guide = Guide(grammar.matcher(tokenizer), n_vocab)
    guide.forced()         -> the id of '{"a": '      (the only token the mask admits)
    guide.push(that id); guide.forced() -> None       (a digit: several are allowed)

Left out: compiling grammars (compile.py), applying a mask to logits (maths/masking.py), who
drafts (drafting/), the round (decoding/engine.py).
"""

from __future__ import annotations

import time

import llguidance
import numpy as np

from ..errors import GrammarError
from ..maths.masking import Mask, words_for


class Guide:
    """The matcher at the committed output plus `depth` tentative (drafted) tokens, and each position's mask."""

    def __init__(self, matcher: llguidance.LLMatcher, n_vocab: int, ends: frozenset[int] = frozenset()) -> None:
        self.matcher = matcher
        self.n_vocab = n_vocab
        self.words = words_for(n_vocab)
        self.ends = ends  # end-of-generation ids: the matcher takes no token past one (llguidance does not count it as consumed)
        self._masks: list[Mask] = []  # per position: index d is the mask after d tentative tokens
        self._taken: list[int] = []  # the tentative tokens since the last settle
        self.room = 0  # the most tentative tokens this round may hold (the engine sets it each round)
        self.mask_seconds = 0.0  # in llguidance's mask computation, over the generation

    @property
    def depth(self) -> int:
        """Tentative tokens taken since the last settle."""
        return len(self._taken)

    def _ends_at(self) -> int:
        """The position of the first tentative end of generation (depth where there is none): the
        matcher has consumed the tentative tokens before it, none from it on."""
        return next((i for i, t in enumerate(self._taken) if t in self.ends), self.depth)

    def mask(self) -> Mask:
        """The mask at the current position (maths/masking.Mask: llguidance's words, read once)."""
        while len(self._masks) <= self.depth:
            self._masks.append(self._compute())
        return self._masks[self.depth]

    @classmethod
    def over(cls, matcher: llguidance.LLMatcher, tokenizer: llguidance.LLTokenizer) -> "Guide":
        """A guide over a tokenizer's vocabulary, its EOS tokens as the ends."""
        return cls(matcher, tokenizer.vocab_size, frozenset(tokenizer.eos_tokens))

    def _compute(self) -> Mask:
        if self._ends_at() < self.depth:  # past an end of generation nothing is emitted: any token may stand there
            return Mask.of(np.full(self.words, -1, dtype=np.int32), self.n_vocab)
        out = np.zeros(self.words, dtype=np.int32)
        start = time.perf_counter()
        self.matcher.unsafe_compute_mask_ptr(out.ctypes.data, out.nbytes)
        if self.matcher.is_error():
            raise GrammarError(f"the constraint cannot go on: {self.matcher.get_error()}")
        mask = Mask.of(out, self.n_vocab)
        self.mask_seconds += time.perf_counter() - start
        if mask.count == 0:
            raise GrammarError("the constraint allows no token here (the grammar has no way to go on)")
        return mask

    def allows(self, token: int) -> bool:
        """Whether the mask at the current position admits `token`."""
        return self.mask().allows(token)

    def forced(self) -> int | None:
        """The token the grammar forces here (its mask admits it alone), or None."""
        return self.mask().single

    def full(self) -> bool:
        """The round holds `room` tentative tokens: nothing more may be proposed."""
        return self.depth >= self.room

    def forced_at(self, depth: int) -> bool:
        """Whether the mask at tentative position `depth` (computed) admitted one token alone."""
        return self._masks[depth].single is not None

    def push(self, token: int) -> None:
        """Take a draft tentatively. Only a token the mask admits may be pushed (drafters check `allows`)."""
        assert self.allows(token), f"token {token} is not allowed by the constraint here"
        # An end of generation, and anything after one, is kept out of the matcher: nothing after it is emitted.
        if self._ends_at() == self.depth and token not in self.ends and not self.matcher.consume_token(token):
            raise GrammarError(f"the constraint refused token {token}: {self.matcher.get_error()}")
        self._taken.append(token)

    def masks(self) -> list[Mask]:
        """The masks of positions 0..depth: each draft's and the one after the last draft."""
        self.mask()
        return self._masks[: self.depth + 1]

    def settle(self, kept: int, token: int) -> None:
        """Keep the first `kept` tentative tokens, roll the others back, take the target's `token`;
        the output so far then ends with it, and the next position starts afresh."""
        assert 0 <= kept <= self.depth, f"kept {kept} of {self.depth} drafts"
        consumed = max(0, self._ends_at() - kept)  # of the tokens rolled back, those the matcher took
        if consumed and not self.matcher.rollback(consumed):
            raise GrammarError(f"the constraint could not roll back {consumed} tokens: {self.matcher.get_error()}")
        del self._taken[kept:]
        self.push(token)
        self._taken.clear()
        self._masks.clear()
