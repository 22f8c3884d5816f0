"""A loaded model's vocabulary: text to token ids and back, what each token is, and the views others need.

`Vocabulary` reads llama.cpp's vocabulary of a loaded model (`llama_model_get_vocab`). It is
`LlamaModel`'s base class (model.py), so each of these is a method of the model, and the
vocabulary lives exactly as long as the model that owns it:

    model.tokenize("Hello world")           -> [19556, 905]   (SmolLM2; BOS first only where add_bos says so)
    model.piece(905)                        -> b" world"
    model.detokenize([19556, 905])          -> "Hello world"
    model.token_kind(905)                   -> "text"; <|im_end|> (id 2) -> "special"; a byte-fallback
                                               token such as <0x0A> -> "byte"
    model.special_id("<|im_end|>")          -> 2
    model.vocab                             -> VocabInfo(n_vocab=49152, vocab_type="bpe", bos=1, eos=2,
                                                         eot=0, add_bos=False, add_eos=False)

`vocab` is what llama.cpp's compatibility rule compares between a draft and a target
(compat.py); `vocab_table` is every token's piece and kind (drafting/vocab_map.py maps two
vocabularies with it); `grammar_tokenizer` is the vocabulary as llguidance reads it (grammar/).

Left out: loading the model (model.py), the chat template (chat_template.py), what a shared
token means between two models (compat.py).
"""

from __future__ import annotations

import ctypes
import functools
import warnings
from dataclasses import dataclass
from typing import Sequence

import llama_cpp as lc  # before numpy: see specdec_cli/__init__.py

VOCAB_TYPES = {0: "none", 1: "spm", 2: "bpe", 3: "wpm", 4: "ugm", 5: "rwkv", 6: "plamo2"}


@dataclass(frozen=True)
class VocabInfo:
    """What llama.cpp's compatibility rule compares between a draft and a target."""

    n_vocab: int
    vocab_type: str
    bos: int
    eos: int
    eot: int
    add_bos: bool
    add_eos: bool


class Vocabulary:
    """The vocabulary of a loaded model: `vocab` is llama.cpp's `llama_vocab *`, valid while the model is."""

    def __init__(self, vocab) -> None:
        self._vocab = vocab
        self.n_vocab = int(lc.llama_vocab_n_tokens(vocab))
        self._pieces: dict[int, bytes] = {}

    @functools.cached_property
    def vocab(self) -> VocabInfo:
        v = self._vocab
        return VocabInfo(
            n_vocab=self.n_vocab,
            vocab_type=VOCAB_TYPES.get(int(lc.llama_vocab_type(v)), "unknown"),
            bos=int(lc.llama_vocab_bos(v)),
            eos=int(lc.llama_vocab_eos(v)),
            eot=int(lc.llama_vocab_eot(v)),
            add_bos=bool(lc.llama_vocab_get_add_bos(v)),
            add_eos=bool(lc.llama_vocab_get_add_eos(v)),
        )

    def token_text(self, token: int) -> str:
        """The vocabulary's stored text for a token (not its rendered piece)."""
        raw = lc.llama_vocab_get_text(self._vocab, token)
        return raw.decode("utf-8", errors="replace") if raw else ""

    def is_end_of_generation(self, token: int) -> bool:
        return bool(lc.llama_vocab_is_eog(self._vocab, token))

    def tokenize(self, text: str | bytes, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Text (str, or UTF-8 bytes) to token ids. `add_special` adds BOS only if the model asks for it."""
        data = text if isinstance(text, bytes) else text.encode("utf-8")
        size = len(data) + 8
        buf = (lc.llama_token * size)()
        n = lc.llama_tokenize(self._vocab, data, len(data), buf, size, add_special, parse_special)
        if n < 0:
            size = -n
            buf = (lc.llama_token * size)()
            n = lc.llama_tokenize(self._vocab, data, len(data), buf, size, add_special, parse_special)
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        """The bytes a token renders as (special tokens render as nothing). Cached."""
        cached = self._pieces.get(token)
        if cached is not None:
            return cached
        buf = ctypes.create_string_buffer(64)
        n = lc.llama_token_to_piece(self._vocab, token, buf, 64, 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = lc.llama_token_to_piece(self._vocab, token, buf, -n, 0, False)
        out = buf.raw[:n]
        self._pieces[token] = out
        return out

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", errors="replace")

    def token_kind(self, token: int) -> str:
        """"text" (normal or user-defined: it stands for its piece), "byte" (byte fallback,
        <0x0A> -> b"\\n") or "special" (control, unknown, unused: renders as nothing)."""
        attr = int(lc.llama_vocab_get_attr(self._vocab, token))
        if attr & lc.LLAMA_TOKEN_ATTR_BYTE:
            return "byte"
        if attr & (lc.LLAMA_TOKEN_ATTR_CONTROL | lc.LLAMA_TOKEN_ATTR_UNKNOWN | lc.LLAMA_TOKEN_ATTR_UNUSED):
            return "special"
        if attr & (lc.LLAMA_TOKEN_ATTR_NORMAL | lc.LLAMA_TOKEN_ATTR_USER_DEFINED):
            return "text"
        return "special"  # undefined

    def special_id(self, text: str) -> int | None:
        """The id of the one token that spells `text` and that llguidance reads as special (a control
        token, or a user-defined one in angle brackets: llguidance.llamacpp's rule), or None.
        Example: Qwen 2.5's "<tool_call>" -> its id; "hello" -> None."""
        ids = self.tokenize(text, add_special=False, parse_special=True)
        if len(ids) != 1:
            return None
        attr = int(lc.llama_vocab_get_attr(self._vocab, ids[0]))
        spelled = self.token_text(ids[0])
        if attr & lc.LLAMA_TOKEN_ATTR_CONTROL or (attr & lc.LLAMA_TOKEN_ATTR_USER_DEFINED and spelled.startswith("<") and spelled.endswith(">")):
            return ids[0]
        return None

    @functools.cached_property
    def vocab_table(self) -> tuple[list[bytes], list[str]]:
        """Every token's piece and kind (see `token_kind`), for vocab_map.build. Read once (a second for 262k tokens)."""
        return [self.piece(t) for t in range(self.n_vocab)], [self.token_kind(t) for t in range(self.n_vocab)]

    @functools.cached_property
    def grammar_tokenizer(self):
        """The vocabulary as llguidance reads it, for constraints (grammar/): every token's bytes,
        control tokens marked special (a grammar never emits them), the end-of-generation tokens
        as what ends a grammar's output. Built once: about 0.2 s at 49,152 tokens, 1.6 s at 262,144."""
        from llguidance.llamacpp import lltokenizer_from_vocab  # imports llama_cpp: it belongs here

        ends = [t for t in range(self.n_vocab) if lc.llama_vocab_is_eog(self._vocab, t)]
        with warnings.catch_warnings():  # it reads each token's attributes by a name llama-cpp-python deprecates: a warning per token
            warnings.simplefilter("ignore", DeprecationWarning)
            return lltokenizer_from_vocab(self._vocab, eos_token=ends or None)
