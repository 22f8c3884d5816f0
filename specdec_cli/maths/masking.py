"""A grammar's token mask applied to logits, before any sampling filter: p' = normalise(p · mask).

A constraint (a JSON schema, a grammar: grammar/) allows a set of tokens at each position. It
arrives as a bitmask, one bit per token id in 32-bit words (llguidance's layout: bit i of word
w is token 32 w + i). Applied here to a logits row, every token the mask forbids gets logit
-inf, so that sampling.py's processing (top-k, top-p, min-p, temperature) chooses among the
allowed tokens only, and p and q both become the masked laws p' and q'. This is vLLM's order;
llama.cpp samples first and resamples when the grammar rejects the token, which is another law.

    words = np.array([0b0101], dtype=np.int32)        # tokens 0 and 2 allowed, of 4
    masked_row(np.array([1, 5, 3, 4], np.float32), words)  -> [1, -inf, 3, -inf]
    single_allowed(np.array([0b0100], dtype=np.int32))     -> 2   (the grammar forces token 2)

Two ways to apply a mask, one result: where few tokens are allowed (a JSON key, a brace) the
allowed ids are found from the words and copied into a row of -inf; otherwise each byte of the
mask looks up eight 0 / -inf biases that are added to the row (a branch-free pass).

Left out: computing masks (grammar/guide.py), and everything after the mask (sampling.py).
"""

from __future__ import annotations

import numpy as np

# Bias for each byte value: eight entries, 0 where the byte's bit is set, -inf where not (bit order little).
_BYTE_BIAS = np.where((np.arange(256)[:, None] >> np.arange(8)) & 1 == 1, np.float32(0.0), np.float32(-np.inf)).astype(np.float32)
# Masks allowing at most this share of the row take the sparse way (ids found, copied into -inf).
_SPARSE_SHARE = 1.0 / 64.0


def words_for(n_vocab: int) -> int:
    """32-bit words of a mask over n_vocab tokens. Example: 49152 -> 1536, 33 -> 2."""
    return (n_vocab + 31) // 32


def allowed_ids(words: np.ndarray, n: int) -> np.ndarray:
    """The ids below n whose bit is set, ascending. Example: [0b0101] -> [0, 2]."""
    bits = np.unpackbits(words.view(np.uint8), bitorder="little")
    return np.flatnonzero(bits[:n])


def allowed_count(words: np.ndarray) -> int:
    """How many tokens the mask allows (all its bits). Example: [0b0101, 1] -> 3."""
    return int(np.unpackbits(words.view(np.uint8)).sum())


def single_allowed(words: np.ndarray) -> int | None:
    """The one token the mask allows, where it allows exactly one; else None. Example: [0, 0b1000] -> 35."""
    nonzero = np.flatnonzero(words)
    if len(nonzero) != 1:
        return None
    word = int(words[nonzero[0]]) & 0xFFFFFFFF
    if word & (word - 1):
        return None
    return 32 * int(nonzero[0]) + word.bit_length() - 1


def masked_row(row: np.ndarray, words: np.ndarray) -> np.ndarray:
    """A new float32 row: `row` where the mask allows the token, -inf where it does not (ids past
    the mask's words are forbidden). Example: [1, 5, 3, 4] with [0b0101] -> [1, -inf, 3, -inf]."""
    n = row.shape[-1]
    nbytes = min(words.nbytes, (n + 7) // 8)
    data = words.view(np.uint8)[:nbytes]
    ids = np.flatnonzero(data)
    if len(ids) * 8 <= n * _SPARSE_SHARE:  # few allowed: only their bytes are looked at
        out = np.full(n, -np.inf, dtype=np.float32)
        bits = np.unpackbits(data[ids], bitorder="little").reshape(-1, 8)
        found = (ids[:, None] * 8 + np.arange(8))[bits.view(bool)]
        found = found[found < n]
        out[found] = row[found]
        return out
    bias = _BYTE_BIAS.take(data, axis=0).reshape(-1)
    if len(bias) < n:
        bias = np.concatenate([bias, np.full(n - len(bias), -np.inf, dtype=np.float32)])
    return np.add(bias[:n], row, dtype=np.float32)


def masked_rows(rows: np.ndarray, masks: list[np.ndarray]) -> np.ndarray:
    """Each row masked by its own mask (rows[i] by masks[i]), as a new (len(masks), n) float32 array."""
    out = np.empty((len(masks), rows.shape[-1]), dtype=np.float32)
    for i, words in enumerate(masks):
        out[i] = masked_row(rows[i], words)
    return out
