"""Drafting with a model whose vocabulary differs from the target's (Token-Level Intersection).

The engine works in TARGET ids throughout: its context, the proposal and every q row are
target ids. This drafter keeps the draft model's own context as the draft's tokenisation of
the same text, and proposes only tokens in both vocabularies (vocab_map.VocabMap):

    q = normalise(q_draft restricted to the shared ids), mapped to target ids

(Timor et al., ICML 2025, "Accelerating LLM Inference with Lossless Speculative Decoding
Algorithms for Heterogeneous Vocabularies", Token-Level Intersection). Verification is the
same-vocabulary rule (speculative.verify: accept min(1, p/q), residual max(0, p - q)), which
keeps the output exactly the target's for any q, so long as x is drawn from the q handed
over. q_draft is maths/filters.proposal (the processed distribution, as the law x is drawn from)
with the run's SamplingParams; at temperature 0 the draft proposes the argmax of its logits
over the shared ids.

Text translation (`TextMirror`), target ids -> draft ids:

- the target context's text is the concatenation of its tokens' pieces (bytes);
- special tokens render as nothing (backend.piece): a chat template's turn markers and the
  target's BOS are dropped, so "<bos><start_of_turn>user\\nHi" reads as "user\\nHi"; the
  draft's own BOS is put first when the draft's tokenizer adds one (`prefix`);
- the text is tokenised by the draft's tokenizer with special-token parsing off, so a
  literal "<|im_start|>" in the text stays text;
- bytes that are not valid UTF-8 (a character split across target byte tokens, the end of
  the text in the middle of a character) become the draft's single-byte tokens when it has
  them (GPT-2's byte-level tokens, SentencePiece's <0xNN>), and are skipped otherwise;
- only the tail that changed is tokenised again: from the start of a draft token a few
  tokens before the first changed byte, moved back further to a token that starts with
  whitespace (a pre-tokenizer boundary), since a merge can reach across the change.
  Example, word-sized tokens: "The big black cat" + " sat" keeps the draft token of "The"
  and tokenises " big black cat sat" again (three tokens back from the change).
  A tokenizer whose pieces do not spell its input (SentencePiece with a dummy space prefix)
  gets no reuse: its whole text is tokenised again each round (still correct, slower).

While drafting, each drafted token is appended to the draft's cache as its draft id (the
draft conditions on its own tokens); the next round translates the true text again and the
KV cache keeps the longest common prefix (causal_model.catch_up).

Under a constraint the mask is over TARGET ids (the grammar reads the target's tokens); the
draft's row is masked in its own ids through the map: a draft id stays only where its target
partner is allowed (`masked_draft_row`), so q' is the draft's processed distribution over the
shared, allowed tokens. A forced target token with no draft partner ends the draft model's
part of the round (the engine still adds the forced tokens themselves).

Left out: the vocabulary intersection (vocab_map.py), verification (maths/speculative.py), the choice
of k (tuning/policy.py), loading and checking the pair (session.py).
"""

from __future__ import annotations

import bisect
from typing import Callable, Sequence

import numpy as np

from ..causal_model import CausalModel, common_prefix
from ..maths.masking import Mask
from ..maths.distribution import Distribution
from ..maths.draw import sample
from ..maths.filters import proposal, softmax_at
from ..maths.sampling import SamplingParams
from .model import ModelDrafter
from .vocab_map import VocabMap, byte_tokens

BACK_TOKENS = 3  # draft tokens retokenised before the first changed byte
MAX_EXTRA_BACK = 8  # further tokens searched back for one that starts with whitespace


def utf8_runs(data: bytes) -> list[tuple[bytes, bool]]:
    """Split bytes into valid UTF-8 runs (True) and single stray bytes (False).

    Example: b"a\\xe2\\x82" -> [(b"a", True), (b"\\xe2", False), (b"\\x82", False)].
    """
    out: list[tuple[bytes, bool]] = []
    while data:
        try:
            data.decode("utf-8")
            out.append((data, True))
            break
        except UnicodeDecodeError as exc:
            if exc.start:
                out.append((data[: exc.start], True))
            out.append((data[exc.start : exc.start + 1], False))
            data = data[exc.start + 1 :]
    return out


class TextMirror:
    """The draft's tokens for the text of a target context, kept up to date incrementally.

    tokenize(bytes) -> draft ids (no BOS, no special-token parsing); draft_piece and
    target_piece give each token's bytes; byte_ids maps a byte value to the draft token that
    stands for it alone. `update(context)` returns prefix + the draft tokens of the text.
    """

    def __init__(
        self,
        target_piece: Callable[[int], bytes],
        draft_piece: Callable[[int], bytes],
        tokenize: Callable[[bytes], list[int]],
        byte_ids: dict[int, int],
        prefix: Sequence[int] = (),
    ) -> None:
        self.target_piece = target_piece
        self.draft_piece = draft_piece
        self.tokenize = tokenize
        self.byte_ids = byte_ids
        self.prefix = list(prefix)
        self.source: list[int] = []  # the target ids translated
        self.source_ends: list[int] = []  # byte offset where each one's piece ends
        self.text = bytearray()
        self.tokens: list[int] = []  # the draft's tokens for self.text (without the prefix)
        self.ends: list[int] = []  # byte offset where each draft token ends (non-decreasing)
        self.retokenised = 0  # bytes tokenised so far (for tests of incrementality)

    def update(self, context: Sequence[int]) -> list[int]:
        n = common_prefix(self.source, context)
        del self.source[n:], self.source_ends[n:]
        stable = self.source_ends[-1] if n else 0  # text bytes known unchanged
        del self.text[stable:]
        for t in context[n:]:
            self.text += self.target_piece(t)
            self.source.append(t)
            self.source_ends.append(len(self.text))
        keep = self._safe_start(stable)
        start = self.ends[keep - 1] if keep else 0
        del self.tokens[keep:], self.ends[keep:]
        self._append(bytes(self.text[start:]), start)
        return self.prefix + self.tokens

    def _safe_start(self, stable: int) -> int:
        """How many draft tokens to keep: those ending by `stable`, less BACK_TOKENS, back to a whitespace start."""
        keep = max(0, bisect.bisect_right(self.ends, stable) - BACK_TOKENS)
        for _ in range(MAX_EXTRA_BACK):
            if keep == 0 or self.draft_piece(self.tokens[keep])[:1].isspace():
                break
            keep -= 1
        return keep

    def _append(self, data: bytes, offset: int) -> None:
        self.retokenised += len(data)
        for run, valid in utf8_runs(data):
            if valid:
                ids = self.tokenize(run)
                ends = np.cumsum([len(self.draft_piece(t)) for t in ids]) + offset if ids else []
                if ids and ends[-1] != offset + len(run):
                    # The pieces do not spell the run (a tokenizer that normalises text): keep
                    # the tokens, but end every one at the run's end, so none is reused next time.
                    ends = [offset + len(run)] * len(ids)
                self.tokens += ids
                self.ends += [int(e) for e in ends]
            elif run[0] in self.byte_ids:
                self.tokens.append(self.byte_ids[run[0]])
                self.ends.append(offset + 1)
            offset += len(run)


class CrossVocabDrafter(ModelDrafter):
    """Drafts target ids with a model of another vocabulary, over the shared tokens: the
    ModelDrafter loop, with the context translated by a TextMirror and q restricted."""

    def __init__(self, model: CausalModel, vocab: VocabMap, mirror: TextMirror, is_end: Callable[[int], bool] | None = None) -> None:
        super().__init__(model, is_end=is_end)
        self.vocab = vocab
        self.mirror = mirror

    @classmethod
    def for_models(cls, draft, target, vocab: VocabMap) -> "CrossVocabDrafter":
        """The drafter for two loaded models (llama/model.LlamaModel): the draft's tokenizer without
        special-token parsing, its byte tokens, and its BOS first when it adds one."""
        mirror = TextMirror(
            target.piece,
            draft.piece,
            lambda data: draft.tokenize(data, add_special=False, parse_special=False),
            byte_tokens(*draft.vocab_table),
            prefix=[draft.vocab.bos] if draft.vocab.add_bos else [],
        )
        return cls(draft, vocab, mirror, is_end=target.is_end_of_generation)

    def own_context(self, context: Sequence[int]) -> list[int]:
        """The draft's tokens for the same text (TextMirror)."""
        return self.mirror.update(context)

    def own_id(self, token: int) -> int | None:
        """The draft id of a (forced) target token: its partner, or None where it has none."""
        d = int(self.vocab.target_to_draft[token]) if 0 <= token < self.vocab.n_target else -1
        return d if d >= 0 else None

    @property
    def q_size(self) -> int:
        return self.vocab.n_target

    def masked_draft_row(self, row: np.ndarray, mask: Mask) -> np.ndarray:
        """The draft's row with -inf wherever the draft id has no target partner the mask allows.
        Example: target ids 1, 2 allowed, partners draft 3 and 1 -> only draft ids 1 and 3 keep their logits."""
        allowed = mask.among(mask.allowed if mask.allowed is not None else self.vocab.shared_target)
        partners = self.vocab.target_to_draft[allowed[allowed < self.vocab.n_target]]
        partners = partners[partners >= 0]
        out = np.full(row.shape[-1], -np.inf, dtype=np.float32)
        out[partners] = row[partners]
        return out

    def pick(
        self, row: np.ndarray, params: SamplingParams, rng: np.random.Generator, p_min: float, mask: Mask | None = None
    ) -> tuple[int, int, Distribution | None] | None:
        """A shared token: at T = 0 the argmax over the shared ids, else x ~ q restricted to them
        (VocabMap.restrict). Stops, from q or the logits alone, when no shared token survives
        the filters (or the constraint's mask) or the draft is unsure (p_min)."""
        if mask is not None:
            row = self.masked_draft_row(row, mask)
            if not np.isfinite(row).any():
                return None
        if params.greedy:
            d = self.vocab.restrict_logits(row)
            if not np.isfinite(row[d]):
                return None
            if p_min > 0.0 and softmax_at(row, d) < p_min:
                return None
            return int(self.vocab.draft_to_target[d]), d, None
        q, confidence = self.vocab.restrict(proposal(row, params))
        if q is None or confidence < p_min:
            return None
        x = sample(q, rng)
        return x, int(self.vocab.target_to_draft[x]), q
