"""A grammar's token mask applied to logits, before any sampling filter: p' = normalise(p · mask).

A constraint (a JSON schema, a grammar: grammar/) allows a set of tokens at each position. It
arrives as a bitmask, one bit per token id in 32-bit words (llguidance's layout: bit i of word
w is token 32 w + i). Applied to a logits row, every token the mask forbids gets logit -inf, so
that filters.py's processing (top-k, top-p, min-p, temperature) chooses among the allowed
tokens only, and p and q both become the masked laws p' and q'. This is vLLM's order;
llama.cpp samples first and resamples when the grammar rejects the token, which is another law.

    mask = Mask.of(np.array([0b0101], dtype=np.int32), 4)   # tokens 0 and 2 allowed, of 4
    masked_row(np.array([1, 5, 3, 4], np.float32), mask)     -> [1, -inf, 3, -inf]
    Mask.of(np.array([0b0100], dtype=np.int32), 4).single    -> 2   (the grammar forces token 2)

A mask is read once (`Mask.of`: how many of its words allow anything) and applied by the
cheapest way: where few words allow anything (a JSON key, a brace, a digit) the allowed ids'
logits are kept and the rest of the row filled with -inf, where few words forbid anything
(inside a string: quotes and control characters) -inf is copied where the bits are 0, otherwise
each byte of the mask looks up its eight 0 / -inf biases, added over the row (no pass branches
per id). `apply` masks a row in place (the engine's rows are views of llama.cpp's
output buffer, read once per round: no copy of a 262,144-token row). docs/structured.md gives
the cost per row.

Left out: computing masks (grammar/guide.py), and everything after the mask (filters.py).
"""

from __future__ import annotations

import numpy as np

# Bias for each byte value: eight entries, 0 where the byte's bit is set, -inf where not (bit order little).
_BYTE_BIAS = np.where((np.arange(256)[:, None] >> np.arange(8)) & 1 == 1, np.float32(0.0), np.float32(-np.inf)).astype(np.float32)
# How a mask is applied, the cheapest way on 49,152 and 262,144 ids (docs/structured.md): one whose
# allowed tokens lie in at most _FEW of its words by their ids (the rest of the row filled); one
# whose forbidden tokens lie in at most _SOME of its words by a copy of -inf where its bits are 0
# (long runs of allowed ids: the branches are predicted); any other by the bytes' biases.
_FEW = 1.0 / 8.0
_SOME = 1.0 / 4.0


def words_for(n_vocab: int) -> int:
    """32-bit words of a mask over n_vocab tokens. Example: 49152 -> 1536, 33 -> 2."""
    return (n_vocab + 31) // 32


def _bits(words: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The ids of the set bits of words[at] (at ascending), ascending."""
    bits = np.unpackbits(words[at].view(np.uint8), bitorder="little").nonzero()[0]
    return at[bits >> 5] * 32 + (bits & 31)


def allowed_ids(words: np.ndarray, n: int) -> np.ndarray:
    """The ids below n whose bit is set, ascending. Example: [0b0101] -> [0, 2]."""
    found = _bits(words, (words != 0).nonzero()[0])  # (a bool array's nonzero: several times faster than on the int words)
    return found[: np.searchsorted(found, n)]


def allowed_count(words: np.ndarray) -> int:
    """How many tokens the mask allows (all its bits). Example: [0b0101, 1] -> 3."""
    return int(np.unpackbits(words.view(np.uint8)).sum())


class Mask:
    """A mask over the first n ids: llguidance's words, read once into what applying it needs.

    Where few words have an allowed token (a JSON key, a brace, a digit), `apply` keeps the
    allowed ids' logits and fills the rest with -inf; where few words have a forbidden token
    (inside a string: quotes and control characters), it copies -inf where the bits are 0;
    otherwise it adds each byte's eight 0 / -inf biases over the whole row. Example: Mask.of([0b0101], 4)
    .allowed -> [0, 2]; .single -> None.
    """

    __slots__ = ("words", "n", "count", "_allowed")

    def __init__(self, words: np.ndarray, n: int) -> None:
        self.words = words
        self.n = n
        self.count = int(np.count_nonzero(words))  # words with an allowed token
        self._allowed: np.ndarray | None = None

    @classmethod
    def of(cls, words: np.ndarray, n: int) -> "Mask":
        return cls(words, n)

    @property
    def allowed(self) -> np.ndarray:
        """The allowed ids below n, ascending (computed once, when asked for)."""
        if self._allowed is None:
            self._allowed = allowed_ids(self.words, self.n)
        return self._allowed

    @property
    def single(self) -> int | None:
        """The one token the mask allows, where it allows exactly one; else None."""
        if self.count != 1:
            return None
        at = int((self.words != 0).argmax())
        word = int(self.words[at]) & 0xFFFFFFFF
        return None if word & (word - 1) else 32 * at + word.bit_length() - 1

    def allows(self, token: int) -> bool:
        return 0 <= token < self.n and bool((int(self.words[token >> 5]) >> (token & 31)) & 1)

    def among(self, ids: np.ndarray) -> np.ndarray:
        """Those of `ids` that the mask allows. Example: Mask.of([0b0101], 4).among([1, 2, 3]) -> [2]."""
        ids = np.asarray(ids)
        ids = ids[(ids >= 0) & (ids < self.n)]
        return ids[(self.words[ids >> 5] >> (ids & 31)) & 1 == 1]

    def apply(self, row: np.ndarray) -> np.ndarray:
        """Mask `row` (float32, at most n long) in place: -inf at every forbidden id. Returns it."""
        n = row.shape[-1]
        few = max(1, int(len(self.words) * _FEW))
        if self.count <= few:
            keep = self.allowed[: np.searchsorted(self.allowed, n)]
            values = row[keep]
            row.fill(-np.inf)
            row[keep] = values
            return row
        if np.count_nonzero(self.words != -1) <= len(self.words) * _SOME:
            bits = np.unpackbits(self.words.view(np.uint8), bitorder="little")[:n]
            np.copyto(row, -np.inf, where=~bits.view(bool))
            return row
        bias = _BYTE_BIAS.take(self.words.view(np.uint8)[: (n + 7) // 8], axis=0).reshape(-1)
        if len(bias) < n:
            bias = np.concatenate([bias, np.full(n - len(bias), -np.inf, dtype=np.float32)])
        return np.add(row, bias[:n], out=row)


def single_allowed(words: np.ndarray) -> int | None:
    """The one token the mask allows, where it allows exactly one; else None. Example: [0, 0b1000] -> 35."""
    nonzero = np.flatnonzero(words)
    if len(nonzero) != 1:
        return None
    word = int(words[nonzero[0]]) & 0xFFFFFFFF
    if word & (word - 1):
        return None
    return 32 * int(nonzero[0]) + word.bit_length() - 1


def masked_row(row: np.ndarray, mask: Mask | np.ndarray) -> np.ndarray:
    """A masked float32 copy of `row` (a Mask, or raw words). Example: [1, 5, 3, 4] with [0b0101] -> [1, -inf, 3, -inf]."""
    mask = mask if isinstance(mask, Mask) else Mask.of(mask, row.shape[-1])
    return mask.apply(np.array(row, dtype=np.float32))


def mask_rows(rows: np.ndarray, masks: list[Mask]) -> np.ndarray:
    """Each row masked in place by its own mask (rows[i] by masks[i]); returns the rows."""
    for i, mask in enumerate(masks):
        mask.apply(rows[i])
    return rows
