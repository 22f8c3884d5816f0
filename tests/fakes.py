"""A scripted, pure-numpy stand-in for a llama.cpp model, for fast engine tests.

`MarkovModel` is a toy language model: its logits depend only on the last token
(row `table[last]`), so the exact distribution of any continuation is known in closed
form. It keeps a "KV cache" (the `tokens` list) exactly like llama/model.LlamaModel and
records every decode call, so tests can check batching and rollback.

    m = MarkovModel(np.log(np.full((4, 4), 0.25)))
    m.decode([0, 1], n_logits=2)   # two rows: table[0], table[1]
"""

from __future__ import annotations

import threading
import time
from typing import Sequence

import numpy as np


class MarkovModel:
    def __init__(
        self, logits_table: np.ndarray, *, n_ctx: int = 4096, eos: int | None = None, pieces: Sequence[bytes] | None = None
    ) -> None:
        self.table = np.asarray(logits_table, dtype=np.float32)
        self.pieces = pieces  # each token's bytes; None: "a".."z", then "<26>", "<27>", ...
        self.n_vocab = self.table.shape[1]
        self.n_ctx = n_ctx
        self.eos = eos
        self.tokens: list[int] = []
        self.calls: list[tuple[int, int]] = []  # (batch size, n_logits) per decode
        self.decoded = 0  # tokens evaluated, as llama/model.LlamaModel counts them

    def decode(self, tokens: Sequence[int], n_logits: int = 1) -> np.ndarray | None:
        assert len(tokens) > 0 and 0 <= n_logits <= len(tokens)
        assert len(self.tokens) + len(tokens) <= self.n_ctx
        self.calls.append((len(tokens), n_logits))
        self.decoded += len(tokens)
        self.tokens.extend(int(t) for t in tokens)
        if not n_logits:
            return None
        return self.table[np.asarray(self.tokens[-n_logits:])]

    def rewind(self, n_keep: int) -> None:
        del self.tokens[n_keep:]

    def piece(self, token: int) -> bytes:
        if self.pieces is not None:
            return self.pieces[token]
        return chr(ord("a") + token % 26).encode() if token < 26 else f"<{token}>".encode()

    def is_end_of_generation(self, token: int) -> bool:
        return token == self.eos


def random_markov(n_vocab: int, rng: np.random.Generator, scale: float = 2.0) -> np.ndarray:
    """A random logits table (n_vocab x n_vocab)."""
    return (rng.standard_normal((n_vocab, n_vocab)) * scale).astype(np.float32)


class LongestMatchTokenizer:
    """A toy tokenizer: at each position the longest text piece that matches, else the byte token.

    Example, pieces [b"", b"a", b"ab", b"b"] (id 0 special): b"abab" -> [2, 2], b"ba" -> [3, 1].
    Bytes no piece covers are skipped (like a tokenizer without byte fallback).
    """

    def __init__(self, pieces: Sequence[bytes], kinds: Sequence[str]) -> None:
        self.by_piece = {p: i for i, (p, k) in enumerate(zip(pieces, kinds)) if p and k == "text"}
        for i, (p, k) in enumerate(zip(pieces, kinds)):
            if k == "byte":
                self.by_piece.setdefault(p, i)
        self.longest = max(len(p) for p in self.by_piece)
        self.calls = 0

    def __call__(self, data: bytes) -> list[int]:
        self.calls += 1
        out, i = [], 0
        while i < len(data):
            for n in range(min(self.longest, len(data) - i), 0, -1):
                token = self.by_piece.get(data[i : i + n])
                if token is not None:
                    out.append(token)
                    i += n
                    break
            else:
                i += 1
        return out


# -- a toy pair that reads and writes letters (the CLI's and the server's tests) ----------------


def successor_table(overrides: dict[int, int] | None = None) -> np.ndarray:
    """Logits whose greedy choice after letter i is i + 1 (mod 26), or overrides[i]."""
    table = np.zeros((26, 26), dtype=np.float32)
    for i in range(26):
        table[i, (overrides or {}).get(i, (i + 1) % 26)] = 10.0
    return table


class ToyModel(MarkovModel):
    """A Markov model that also tokenizes letters and has a (trivial) chat template.

    `seconds_per_decode` makes each decode call take that long (a server test's slow model).
    `gate`: each decode sets `decoding`, then waits until the test sets the gate (a server test
    that orders events without sleeping: "a generation is in flight" is `decoding.wait()`).
    """

    def __init__(
        self, table, *, fail_on_decode: int | None = None, error: BaseException | None = None, seconds_per_decode: float = 0.0,
        gate: threading.Event | None = None, **kw,
    ):  # fmt: skip
        super().__init__(table, **kw)
        self.fail_on_decode = fail_on_decode
        self.error = error
        self.seconds_per_decode = seconds_per_decode
        self.gate = gate
        self.decoding = threading.Event()
        self.messages = None

    def decode(self, tokens, n_logits=1):
        if self.fail_on_decode is not None and len(self.calls) + 1 >= self.fail_on_decode:
            raise self.error
        self.decoding.set()
        if self.gate is not None:
            assert self.gate.wait(30), "the test never opened the gate"
        if self.seconds_per_decode:
            time.sleep(self.seconds_per_decode)
        return super().decode(tokens, n_logits)

    def tokenize(self, text, *, add_special=True, parse_special=True):
        return [ord(c) - ord("a") for c in text if "a" <= c <= "z"]

    def apply_chat_template(self, messages):
        self.messages = list(messages)
        return messages[-1][1]
