"""A scripted, pure-numpy stand-in for a llama.cpp model, for fast engine tests.

`MarkovModel` is a toy language model: its logits depend only on the last token
(row `table[last]`), so the exact distribution of any continuation is known in closed
form. It keeps a "KV cache" (the `tokens` list) exactly like llama/model.LlamaModel and
records every decode call, so tests can check batching and rollback. Like LlamaModel it also
holds several sequences for decoding/batch.py (`decode_rows`, `seq_rm`): `kv` keeps each one's
tokens, and a part must start where its sequence ends (a wrong position fails the pass).

    m = MarkovModel(np.log(np.full((4, 4), 0.25)))
    m.decode([0, 1], n_logits=2)   # two rows: table[0], table[1]
"""

from __future__ import annotations

import copy
import threading
import time
from typing import Sequence

import numpy as np


class MarkovModel:
    rpc_probed = ()  # as LlamaModel's: no RPC server probed (a local model)

    def __init__(
        self, logits_table: np.ndarray, *, n_ctx: int = 4096, eos: int | None = None, pieces: Sequence[bytes] | None = None,
        n_batch: int = 512,
    ) -> None:
        self.table = np.asarray(logits_table, dtype=np.float32)
        self.pieces = pieces  # each token's bytes; None: "a".."z", then "<26>", "<27>", ...
        self.n_vocab = self.table.shape[1]
        self.n_ctx = n_ctx
        self.eos = eos
        self.n_batch = n_batch
        self.tokens: list[int] = []
        self.kv: dict[int, list[int]] = {}  # sequence id -> its tokens (decode_rows; `tokens` is sequence 0's)
        self.calls: list[tuple[int, int]] = []  # (batch size, n_logits) per decode
        self.passes: list[list[tuple[int, int, int]]] = []  # per decode_rows: (sequence, tokens, n_logits) of each part
        self.decoded = 0  # tokens evaluated, as llama/model.LlamaModel counts them

    def decode(self, tokens: Sequence[int], n_logits: int = 1) -> np.ndarray | None:
        assert len(tokens) > 0 and 0 <= n_logits <= len(tokens)
        assert len(self.tokens) + len(tokens) <= self.n_ctx
        rows = self.decode_rows([(0, len(self.tokens), tokens, n_logits)])[0]
        self.tokens.extend(int(t) for t in tokens)
        return rows

    def decode_rows(self, parts) -> list[np.ndarray | None]:
        assert 0 < sum(len(p[2]) for p in parts) <= self.n_batch, "a pass beyond n_batch"
        for seq, start, tokens, _ in parts:
            assert start == len(self.kv.setdefault(seq, [])), f"sequence {seq}: a part at {start} after {len(self.kv[seq])} tokens"
            assert len(tokens) > 0 and start + len(tokens) <= self.n_ctx
        self.calls.append((sum(len(p[2]) for p in parts), sum(p[3] for p in parts)))
        self.passes.append([(seq, len(tokens), n) for seq, _, tokens, n in parts])
        out = []
        for seq, _, tokens, n_logits in parts:
            self.kv[seq].extend(int(t) for t in tokens)
            self.decoded += len(tokens)
            out.append(self.table[np.asarray(self.kv[seq][len(self.kv[seq]) - n_logits :])] if n_logits else None)
        return out

    def seq_rm(self, seq: int, n_keep: int) -> None:
        del self.kv.setdefault(seq, [])[n_keep:]

    def sibling(self):
        """A second context over the same table, as LlamaModel.sibling: its own cache and counts;
        `siblings` lists them."""
        twin = copy.copy(self)
        twin.tokens, twin.kv, twin.calls, twin.passes, twin.decoded = [], {}, [], [], 0
        self.siblings = [*getattr(self, "siblings", []), twin]
        return twin

    def close(self) -> None:
        self.closed = True

    def rewind(self, n_keep: int) -> None:
        self.seq_rm(0, n_keep)
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

    def decode_rows(self, parts):
        if self.fail_on_decode is not None and len(self.calls) + 1 >= self.fail_on_decode:
            raise self.error
        self.decoding.set()
        if self.gate is not None:
            assert self.gate.wait(30), "the test never opened the gate"
        if self.seconds_per_decode:
            time.sleep(self.seconds_per_decode)
        return super().decode_rows(parts)

    def tokenize(self, text, *, add_special=True, parse_special=True):
        return [ord(c) - ord("a") for c in text if "a" <= c <= "z"]

    def apply_chat_template(self, messages, tools=None):
        self.messages = list(messages)
        self.tools = tools
        last = messages[-1]
        return (last.get("content") or "") if isinstance(last, dict) else last[1]

    def chat_template(self):
        return "{% for m in messages %}{{ m.content }}{% endfor %}"

    def special_id(self, text):
        return None  # letters only: no special token spells anything

    def token_kind(self, token):
        return "text"

    @property
    def grammar_tokenizer(self):
        """The letters for llguidance, and an end id (26) past the model's rows: a grammar here never ends by itself."""
        if not hasattr(self, "_grammar_tokenizer"):
            self._grammar_tokenizer = grammar_tokenizer([bytes([97 + i]) for i in range(26)] + [b""], 26)
        return self._grammar_tokenizer


def grammar_tokenizer(pieces: Sequence[bytes], eos: int):
    """llguidance's view of a toy vocabulary (what llama/model.LlamaModel.grammar_tokenizer is for a
    real one): token i spells pieces[i], `eos` is special and ends a grammar's output; text is
    tokenised by longest match (bytes no piece covers are skipped). Example: grammar_tokenizer([b"a", b"b", b"ab", b""], 3)."""
    import llguidance

    spelled = [b"\xff<eos>" if i == eos else p for i, p in enumerate(pieces)]

    class Vocabulary:
        tokens = spelled
        eos_token_id = eos
        bos_token_id = None
        special_token_ids = [eos]

        def __call__(self, text):
            data = text.encode() if isinstance(text, str) else text
            out, i = [], 0
            while i < len(data):
                found = [j for j, p in enumerate(spelled) if j != eos and p and data.startswith(p, i)]
                if not found:  # a byte no piece covers is skipped
                    i += 1
                    continue
                best = max(found, key=lambda j: len(spelled[j]))
                out.append(best)
                i += len(spelled[best])
            return out

    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(Vocabulary()))
