"""The n-gram table that lookup (in the context) and the drafting memory (across calls) both search.

A table maps each n-gram to where its newest `places` occurrences end, oldest first; a search
takes the context's longest indexed n-gram (largest n first) and, of its occurrences, the one
whose earlier tokens agree with the context's end furthest back (the newest on a tie), as a
suffix index takes the longest match.

    table = NgramTable(sizes=(2,), places=4)
    table.add([5, 6, 7, 5, 6], ends=range(1, 5))      # not the list's own end: nothing follows it
    table.best([5, 6, 7, 5, 6], lambda key: [5, 6, 7, 5, 6])  # -> (2, 0, 2): agreement 2, key 0, end 2

Left out: what a match proposes (lookup.py), the memory's sequences and file (memory.py).
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

from ..events import MAX_DRAFT_TOKENS

MATCH_CAP = 32  # how far back a match is measured
PLACES = 4  # the newest occurrences of each n-gram kept: a match takes the one that agrees longest
RECALL_TOKENS = MAX_DRAFT_TOKENS  # the most a memory recall hands out


def agreement(seq: Sequence[int], end: int, context: Sequence[int], cap: int = MATCH_CAP) -> int:
    """How many tokens of `seq` before `end` equal the context's last ones (at most cap).
    Example: seq [4, 2, 3, 9], end 3, context [1, 2, 3] -> 2 (the (2, 3) before index 3)."""
    m, n = 0, len(context)
    while m < cap and m < end and m < n and seq[end - 1 - m] == context[n - 1 - m]:
        m += 1
    return m


def agreements(context: Sequence[int], places) -> list[tuple[int, object, int]]:
    """(agreement, key, end) of each of the (key, end, seq) places (given oldest first), newest
    first. Example: context [1, 2, 3], places [("a", 3, [1, 2, 3, 7]), ("b", 2, [5, 3, 8])]
    -> [(1, "b", 2), (3, "a", 3)]."""
    return [(agreement(seq, end, context), key, end) for key, end, seq in reversed(list(places))]


def longest(measured: Sequence[tuple[int, object, int]]) -> tuple[int, object, int]:
    """The (agreement, key, end) of `agreements`' list that agrees longest, the first (newest) on a
    tie. Example: agreements [(1, "b", 2), (3, "a", 3)] -> (3, "a", 3)."""
    return max(measured, key=lambda found: found[0])


class NgramTable:
    """n-gram -> the newest `places` (key, end) occurrences, oldest first; `key` names the sequence
    an occurrence is in (the memory's sequence number; 0 for a single list)."""

    def __init__(self, sizes: Sequence[int], places: int = PLACES) -> None:
        assert sizes and min(sizes) >= 1, "n-gram sizes are positive"
        self.sizes = tuple(sorted(set(sizes), reverse=True))
        self.places = places
        self.ends: dict[tuple[int, ...], list[tuple[int, int]]] = {}

    def add(self, tokens: Sequence[int], ends: Iterable[int], key: int = 0) -> None:
        """Record the n-grams of `tokens` that end at each of `ends` (in increasing order)."""
        for end in ends:
            for n in self.sizes:
                if end >= n:
                    found = self.ends.setdefault(tuple(tokens[end - n : end]), [])
                    found.append((key, end))
                    if len(found) > self.places:
                        del found[0]

    def keep(self, wanted: Callable[[int], bool]) -> None:
        """Forget the occurrences whose key is not wanted (the memory's evicted sequences)."""
        kept = ((ngram, [place for place in found if wanted(place[0])]) for ngram, found in self.ends.items())
        self.ends = {ngram: found for ngram, found in kept if found}

    def occurrences(self, context: Sequence[int], sequence: Callable[[int], Sequence[int]]) -> list[tuple[int, int, int]]:
        """(agreement, key, end) of each occurrence of the context's longest indexed n-gram, newest
        first (`agreements`); empty when none is indexed."""
        for n in self.sizes:
            if len(context) >= n:
                found = self.ends.get(tuple(context[-n:]))
                if found:
                    return agreements(context, ((key, end, sequence(key)) for key, end in found))
        return []

    def best(self, context: Sequence[int], sequence: Callable[[int], Sequence[int]]) -> tuple[int, int, int] | None:
        """(agreement, key, end) of the best occurrence of the context's longest indexed n-gram, or None."""
        found = self.occurrences(context, sequence)
        return longest(found) if found else None


class NgramIndex:
    """Where each n-gram of a growing token list ended (an NgramTable), not counting the list's own
    end; a match takes the occurrence that agrees with the context's end furthest back, the latest
    on a tie (as the drafting memory does).

    Example, sizes (2,): after update([5, 6, 7, 5, 6]) the bigram (5, 6) maps to end 2 (its
    occurrence ending at index 2; the one ending at 5 is the list's own suffix), so
    match([5, 6, 7, 5, 6]) == 2: what followed the earlier (5, 6) starts at index 2.
    """

    def __init__(self, sizes: Sequence[int], places: int = PLACES) -> None:
        self.table = NgramTable(sizes, places)
        self.tokens: list[int] = []

    def update(self, context: Sequence[int]) -> None:
        """Index `context`, incrementally when it extends what was indexed before."""
        n_old = len(self.tokens)
        if len(context) < n_old or list(context[:n_old]) != self.tokens:
            self.tokens, self.table.ends, n_old = [], {}, 0
        self.tokens.extend(context[n_old:])
        # Ends 1 .. n_old - 1 are indexed; the old suffix (end n_old) and the new ones join them,
        # all but the new suffix (end len), in increasing order.
        self.table.add(self.tokens, range(max(n_old, 1), len(self.tokens)))

    def match(self, context: Sequence[int]) -> int | None:
        """Index in `context` where the continuation of its last n-gram's best earlier occurrence starts."""
        self.update(context)
        found = self.table.best(context, lambda key: context)
        return None if found is None else found[2]
