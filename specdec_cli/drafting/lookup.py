"""Prompt lookup: drafts copied from an earlier occurrence of the context's end, needing no model.

`LookupDrafter` finds the earlier occurrence of the context's last n-gram (largest n first)
that agrees with the context longest, and proposes what followed it (prompt-lookup decoding).
Example, sizes (2, 1): context [5, 6, 7, 9, 5, 6] ends in (5, 6), seen before ending at index 2
-> proposal [7, 9, 5, 6, ...]: the copy may run on into the text it is producing (as in LZ77),
so a repeating pattern is proposed in full. It proposes nothing when nothing matches, stops
after an end-of-generation token, and before any id the verifier cannot score. With a memory
(memory.py) it also proposes what followed the context's end in an earlier call. Under a
constraint (a `Guide`, interface.py) a proposal stops before the first token the grammar forbids.

Left out: the index itself (ngram.py), the memory's file (memory.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ..errors import BadInput
from ..maths.sampling import SamplingParams
from .interface import Guide, Proposal, Proposer
from .memory import DraftMemory, Recall
from .ngram import MATCH_CAP, PLACES, RECALL_TOKENS, NgramIndex, agreement

# An earlier call's text is proposed only where it agrees with this context's end for at least
# this many tokens: a match of one or two tokens in another text mostly fails (the bench's
# suite, built-in pair, T = 0: 17 such rounds gave 19 tokens, each round dearer than a plain
# step, which gives one), and where the memory pays (repeated frames, an edited function)
# matches are long.
MEMORY_MIN_MATCH = 3
MEMORY_CLASS = "lookup:memory"  # the prefix of a memory match's name (match_class): 'lookup:memory:6+'
# A match this long repeats a passage, whoever wrote it ('lookup:memory:16+'). A shorter one that
# one earlier call alone continued (no witness: memory.Recall) is its own class, 'lookup:memory:
# once:6+', with its own record. Logged with one class for both (`extract`, model+lookup), call
# 2's round 2 drafted 12 tokens of such a match and kept 1, and that record kept the 6-token
# opening that calls 1 and 2 agree on out of every later call's round 1 (the draft model's 3 or 4).
PASSAGE = 16
MEMORY_ONCE = MEMORY_CLASS + ":once"


@dataclass(frozen=True)
class LookupOptions:
    ngram_sizes: tuple[int, ...] = (3, 2, 1)  # tried largest first
    max_tokens: int = 10  # longest proposal
    places: int = PLACES  # occurrences of an n-gram measured for the longest agreement (1: the latest wins)

    @classmethod
    def from_range(cls, ngram_min: int, ngram_max: int, max_tokens: int) -> "LookupOptions":
        """Checked user options. Example: (1, 3, 10) -> sizes (3, 2, 1), proposals of up to 10 tokens."""
        if not 1 <= ngram_min <= ngram_max:
            raise BadInput(f"lookup n-gram sizes must satisfy 1 <= min <= max, got min {ngram_min}, max {ngram_max}")
        if max_tokens < 1:
            raise BadInput(f"--lookup-max-tokens must be at least 1, got {max_tokens}")
        return cls(tuple(range(ngram_max, ngram_min - 1, -1)), max_tokens)



def match_length(context: Sequence[int], start: int, cap: int = 8) -> int:
    """How many tokens before `start` equal the context's last ones (at most cap).
    Example: context [1, 2, 3, 9, 2, 3], start 3 -> 2 (the (2, 3) before index 3)."""
    return agreement(context, start, context, cap)


def match_class(length: int, prefix: str = "lookup") -> str:
    """The policy's key for a lookup match: its acceptance depends much on how long the match is
    (a repeated passage is copied whole, a one-token match mostly fails). 1, 2 -> 'lookup:1',
    'lookup:2'; 3..5 -> 'lookup:3-5'; 6 or more -> 'lookup:6+'; a memory match of PASSAGE or
    more (prefix 'lookup:memory') -> 'lookup:memory:16+'."""
    if length <= 2:
        return f"{prefix}:{length}"
    if length <= 5:
        return f"{prefix}:3-5"
    return f"{prefix}:6+" if length < PASSAGE or prefix == "lookup" else f"{prefix}:16+"


def lone(recall: Recall) -> bool:
    """Whether a memory match is shorter than PASSAGE and no other earlier occurrence witnesses it.
    Examples: length 7, no witness -> True; one witness, or length 20 -> False."""
    return recall.witnesses == 0 and recall.length < PASSAGE


def memory_class(recall: Recall) -> str:
    """A memory match's name (see PASSAGE): by its length, and apart where it is `lone`. Examples:
    length 7, one witness -> 'lookup:memory:6+'; length 7, none -> 'lookup:memory:once:6+';
    length 20, none -> 'lookup:memory:16+'."""
    return match_class(recall.length, MEMORY_ONCE if lone(recall) else MEMORY_CLASS)


def recall_length(match: int, options: LookupOptions) -> int:
    """How many tokens a memory match may propose: more the longer the match (SuffixDecoding's
    speculation length), at least the lookup's own cap. Example: match 12, cap 10 -> 24."""
    return max(options.max_tokens, min(RECALL_TOKENS, 2 * match))


class LookupDrafter:
    """Prompt-lookup drafting: copy what followed the earlier occurrence of the last n-gram that
    agrees with the context longest (NgramIndex), or what followed it in an earlier call (memory)."""

    name = "lookup"

    def __init__(
        self,
        options: LookupOptions = LookupOptions(),
        *,
        vocab_limit: int | None = None,
        is_end: Callable[[int], bool] | None = None,
        memory: DraftMemory | None = None,
    ) -> None:
        assert options.max_tokens >= 1, "a lookup proposal may hold at least one token"
        self.options = options
        self.memory = memory  # earlier calls' sequences (memory.py); None: this context only
        self.index = NgramIndex(options.ngram_sizes, options.places)
        self.vocab_limit = vocab_limit  # None: every id can be scored
        self.is_end = is_end or (lambda token: False)
        self.opening: int | None = None  # the context's length in the call's round 1 (the prompt's), once prefilled

    def prefill(self, context: Sequence[int], evaluate: bool = True) -> None:
        self.index.update(context)  # no model pass: taken in whether or not `evaluate`
        self.opening = len(context) + 1  # the engine prefills all of the prompt but the token that opens round 1

    def candidates(self, context: Sequence[int]) -> list[Proposer]:
        """The match in this context, then the one in the memory if it is the longer and at least
        MEMORY_MIN_MATCH long, each named by its class (match_class, memory_class). This call's
        own match outranks an earlier call's: a fixed k takes it, and `auto` (which weighs both on
        what they earned) on a tie. In round 1, where the context is the prompt, a memory match
        shorter than PASSAGE is proposed only with a witness: there it ends in the chat's header,
        and what one earlier call wrote next is how that call's answer opened (the suite's
        prompts, lookup with the memory: call 2's round 1 drafted 12 tokens and kept none), while
        an opening that earlier calls agree on is the workload's frame.
        Example: context [5, 6, 7, 9, 5, 6], a memory holding [1, 7, 9, 5, 6, 8]
        -> [LookupMatch('lookup:2', start 2), MemoryMatch('lookup:memory:once:3-5', [8])]."""
        out: list[Proposer] = []
        start = self.index.match(context)
        here = match_length(context, start, MATCH_CAP) if start is not None else 0
        if start is not None:
            out.append(LookupMatch(match_class(min(here, 8)), self, start))
        recall = self.memory.match(context) if self.memory is not None else None
        if recall is not None and recall.tokens and recall.length > here and recall.length >= MEMORY_MIN_MATCH:
            if len(context) != self.opening or not lone(recall):
                out.append(MemoryMatch(memory_class(recall), self, recall))
        return out

    def copy(self, context: Sequence[int], start: int, k: int, guide: Guide | None = None) -> Proposal:
        """Up to k tokens of context from `start` on, running on into the copy itself."""
        n = len(context)
        out = Proposal()

        def source():
            j = start
            while True:
                yield context[j] if j < n else out.tokens[j - n]
                j += 1

        return self.take(source(), min(k, self.options.max_tokens), out, guide)

    def take(self, tokens, k: int, out: Proposal | None = None, guide: Guide | None = None) -> Proposal:
        """Up to k of `tokens` as a proposal: before any id the verifier cannot score or the
        constraint forbids (or where its guide is full), through an end of generation at the
        latest (nothing after it can be emitted)."""
        out = Proposal() if out is None else out
        for token in tokens:
            if len(out.tokens) >= k or (self.vocab_limit is not None and token >= self.vocab_limit):
                break
            if guide is not None:
                if guide.full() or not guide.allows(token):
                    break
                guide.push(token)
            out.tokens.append(token)
            if self.is_end(token):
                break
        return out

    def sync(self, context: Sequence[int]) -> None:
        pass


@dataclass(frozen=True)
class LookupMatch:
    """A lookup proposal found for one context, ready to copy (what `candidates` hands out)."""

    name: str
    drafter: LookupDrafter
    start: int

    def propose(
        self, context: Sequence[int], k: int, params: SamplingParams, rng: np.random.Generator, p_min: float = 0.0,
        guide: Guide | None = None,
    ) -> Proposal:  # fmt: skip
        return self.drafter.copy(context, self.start, k, guide)


@dataclass(frozen=True)
class MemoryMatch:
    """What followed the context's end in an earlier call (memory.Recall), ready to propose."""

    name: str
    drafter: LookupDrafter
    recall: Recall

    def propose(
        self, context: Sequence[int], k: int, params: SamplingParams, rng: np.random.Generator, p_min: float = 0.0,
        guide: Guide | None = None,
    ) -> Proposal:  # fmt: skip
        return self.drafter.take(self.recall.tokens, min(k, recall_length(self.recall.length, self.drafter.options)), guide=guide)

