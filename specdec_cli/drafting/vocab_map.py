"""Which tokens two different vocabularies share: the intersection that cross-vocabulary drafting proposes from.

A draft id d and a target id t are matched when both stand for text (not a control,
unknown or unused token) and decode to the same bytes. Bytes, not the vocabulary strings:
GPT-2-style "Ġworld" and SentencePiece "▁world" both decode to b" world" and meet.

Each side is first indexed by bytes (`index_by_bytes`). Several ids of one side may decode
to the same bytes; the rule is:

- a text token (llama.cpp's normal or user-defined) beats a byte-fallback token with the
  same bytes: SentencePiece's <0x0A> and a user-defined "\\n" token both decode to b"\\n",
  and the tokenizer writes the text token, falling back to <0xNN> only for bytes no text
  token covers;
- two or more text tokens with the same bytes are ambiguous: those bytes are left out of
  the intersection (and counted in `ambiguous`), so every shared id has one partner;
- a byte-fallback token with no text token of the same bytes stands for its byte;
- special tokens and tokens that decode to nothing never match.

Example (kinds: s special, t text, b byte):

    draft  pieces [b"", b"a", b"b", b"ab"]           kinds [s, t, t, t]
    target pieces [b"", b"ab", b"a", b"c", b"a"]     kinds [s, t, t, t, b]
    build(...).draft_to_target -> [-1, 2, -1, 1]     (draft "a" -> target 2, "ab" -> 1)
    .shared_target -> [1, 2], .shared_draft -> [3, 1]   (ordered by target id)

`VocabMap.restrict(q)` turns a draft distribution (maths/distribution.Distribution over draft ids)
into the distribution the draft proposes from over TARGET ids: q restricted to the shared
ids and renormalised, ids mapped and sorted. Example, with the map above: draft q = {1: 0.2,
2: 0.5, 3: 0.3} -> target {1: 0.6, 2: 0.4} (0.3 / 0.5 and 0.2 / 0.5; draft id 2 is not shared).

Left out: reading the vocabularies (llama/model.LlamaModel.vocab_table), the text translation
and the drafting itself (cross_vocab.py), llama.cpp's same-vocabulary rule (compat.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..maths.distribution import Distribution

TEXT, BYTE, SPECIAL = "text", "byte", "special"  # the kinds llama/model.LlamaModel.token_kind reports


def index_by_bytes(pieces: Sequence[bytes], kinds: Sequence[str]) -> tuple[dict[bytes, int], int]:
    """bytes -> the one id that stands for them on this side, and how many byte strings were ambiguous.

    Example: pieces [b"", b"x", b"x", b"y", b"y"], kinds [s, t, t, b, t] -> ({b"y": 4}, 1):
    two text tokens spell "x" (ambiguous), the text "y" beats the byte-fallback "y".
    """
    assert len(pieces) == len(kinds), "one kind per piece"
    text: dict[bytes, int] = {}
    byte: dict[bytes, int] = {}
    clashes: set[bytes] = set()
    for i, (piece, kind) in enumerate(zip(pieces, kinds)):
        if not piece or kind == SPECIAL:
            continue
        if kind == TEXT:
            if piece in text:
                clashes.add(piece)
            text[piece] = i
        elif kind == BYTE:
            byte.setdefault(piece, i)
    for piece in clashes:
        del text[piece]
    out = {piece: i for piece, i in byte.items() if piece not in text and piece not in clashes}
    out.update(text)
    return out, len(clashes)


def byte_tokens(pieces: Sequence[bytes], kinds: Sequence[str]) -> dict[int, int]:
    """byte value -> the id that stands for that byte alone (a one-byte text or byte-fallback token).

    Example: pieces [b"", b"a", b"ab", b"\\xc3"], kinds [s, t, t, b] -> {97: 1, 195: 3}.
    """
    index, _ = index_by_bytes(pieces, kinds)
    return {piece[0]: i for piece, i in index.items() if len(piece) == 1}


@dataclass(frozen=True)
class VocabMap:
    """The shared tokens of a draft and a target vocabulary (see the module docstring)."""

    draft_to_target: np.ndarray  # int64, one entry per draft id: its target partner, or -1
    target_to_draft: np.ndarray  # int64, one entry per target id: its draft partner, or -1
    shared_target: np.ndarray  # the shared target ids, ascending
    shared_draft: np.ndarray  # their draft partners, in the same order
    ambiguous: tuple[int, int] = (0, 0)  # byte strings left out for several text ids: (draft, target)

    @property
    def size(self) -> int:
        return len(self.shared_target)

    @property
    def n_target(self) -> int:
        return len(self.target_to_draft)

    def restrict(self, q: Distribution) -> tuple[Distribution | None, float]:
        """q (over draft ids) restricted to the shared ids, renormalised, over target ids.

        Returns (the distribution, or None when no shared id has mass; the largest
        probability q itself gives a shared id, before renormalising: the draft's
        confidence in what it can propose). Example in the module docstring.
        """
        if q.ids is None:
            weights = q.weights[self.shared_draft].astype(np.float64)  # a proposal's q may be float32
            ids = self.shared_target
        else:
            partner = self.draft_to_target[q.ids]
            keep = partner >= 0
            ids, weights = partner[keep], q.weights[keep]
            order = np.argsort(ids, kind="stable")
            ids, weights = ids[order], weights[order]
        mass = float(weights.sum())
        if not mass > 0.0:
            return None, 0.0
        live = weights > 0.0
        if not live.all():
            ids, weights = ids[live], weights[live]
        return Distribution(self.n_target, ids, weights / mass), float(weights.max()) / q.total

    def restrict_logits(self, row: np.ndarray) -> int:
        """Greedy over the shared ids: the draft id of the largest logit among them (ties: the lowest target id)."""
        return int(self.shared_draft[int(np.argmax(row[self.shared_draft]))])


def of_models(draft, target) -> VocabMap:
    """The map of two loaded models (anything with llama/model.LlamaModel's `vocab_table`)."""
    return build(*draft.vocab_table, *target.vocab_table)


def build(
    draft_pieces: Sequence[bytes], draft_kinds: Sequence[str], target_pieces: Sequence[bytes], target_kinds: Sequence[str]
) -> VocabMap:
    """The intersection of two vocabularies given each token's bytes and kind. Example above."""
    draft_index, draft_ambiguous = index_by_bytes(draft_pieces, draft_kinds)
    target_index, target_ambiguous = index_by_bytes(target_pieces, target_kinds)
    pairs = sorted((t, draft_index[piece]) for piece, t in target_index.items() if piece in draft_index)
    shared_target = np.array([t for t, _ in pairs], dtype=np.int64)
    shared_draft = np.array([d for _, d in pairs], dtype=np.int64)
    draft_to_target = np.full(len(draft_pieces), -1, dtype=np.int64)
    target_to_draft = np.full(len(target_pieces), -1, dtype=np.int64)
    draft_to_target[shared_draft] = shared_target
    target_to_draft[shared_target] = shared_draft
    return VocabMap(draft_to_target, target_to_draft, shared_target, shared_draft, (draft_ambiguous, target_ambiguous))
