"""The speculative loop: draft, score in one target batch, verify, roll back, yield events.

One round, with the context c (prompt plus output so far) and the target's KV cache
holding all of c except its last token:

    0. plan      the draft-length policy picks who drafts and the cap k (k = 0: a plain
                 target step), from earlier rounds only (see policy.py)
    1. draft     the drafter proposes d1..dk (and the q it drew each from)
    2. score     the target evaluates [c[-1], d1..dk] in ONE batch: k + 1 rows of logits
    3. verify    speculative sampling keeps d1..dn and adds one target token t
                 (a correction after a rejection, or the bonus after n == k)
    4. roll back both KV caches to c + d1..dn (in a `finally`), append d1..dn, t to c

Every round emits at least one token (the target's t), so generation always advances.
`generate` yields typed events and never prints: `run`, `bench`, tests and library users
read the same stream. Target-only decoding (the baseline of every speed claim) is the same
loop with no drafter, so both use the same backend, sampling and stopping code.

    engine = Engine(target, ModelDrafter(draft))
    for event in engine.generate(prompt_ids, GenerationConfig(max_tokens=64)):
        ...

Left out: printing (render.py), statistics (stats.py), how k is chosen (policy.py: a
fixed k, or `auto`) and who proposes (drafters.py).
"""

from __future__ import annotations

import codecs
import dataclasses
import enum
import time
from dataclasses import dataclass, field
from typing import Generator, Iterator, Sequence, Union

import numpy as np

from .drafters import CausalModel, Drafter, Proposal, Proposer, catch_up, common_prefix
from .errors import ContextOverflow, IncompatiblePair
from .policy import DraftPolicy, DraftTokens, draft_policy
from .sampling import SamplingParams, argmax, distribution, sample, verify


class Source(str, enum.Enum):
    """Where an emitted token came from."""

    DRAFT = "draft"  # a draft token the target accepted
    CORRECTION = "correction"  # the target's token after it rejected a draft
    BONUS = "bonus"  # the target's extra token after every draft was accepted
    TARGET = "target"  # a plain target step (target-only decoding, or nothing was drafted)


@dataclass(frozen=True)
class Prefill:
    prompt_tokens: int
    seconds: float


@dataclass(frozen=True)
class Token:
    id: int
    text: str  # the text this token releases (may be "" mid UTF-8 sequence, or cut by a stop string)
    source: Source
    position: int  # 1..k for draft tokens, k_accepted + 1 for the target's token


@dataclass(frozen=True)
class Rejected:
    """A draft token the target turned down (shown by --show-rejected)."""

    id: int
    text: str
    position: int


@dataclass(frozen=True)
class Round:
    drafted: int
    accepted: int
    draft_seconds: float  # the drafter's propose call
    draft_decode_seconds: float  # of which inside the draft model's decode calls
    verify_seconds: float  # the target's batch decode
    seconds: float  # the whole round
    source: str = ""  # who drafted ("model", "lookup:3-5", see drafters.py); "" for a plain target step
    draft_catch_up_seconds: float = 0.0  # of draft_seconds, the draft model catching up with the context
    k: int = 0  # the most tokens the policy allowed this round (a drafter may propose fewer)


@dataclass(frozen=True)
class Finished:
    reason: str  # "eog", "max_tokens", "stop", "context_full"
    tokens: tuple[int, ...]
    text: str


Event = Union[Prefill, Token, Rejected, Round, Finished]


@dataclass(frozen=True)
class GenerationConfig:
    max_tokens: int = 256
    draft_tokens: DraftTokens = 8  # k, or "auto" (policy.AdaptivePolicy)
    p_min: float | None = None  # the draft model's early-stop threshold; None: policy.DEFAULT_P_MIN (off)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int = 0
    stop: tuple[str, ...] = ()


class TextStream:
    """Turns token bytes into text, holding back what might still become a stop string.

    Tokens are queued with their text until no stop string can start inside it; then they
    are released. A stop string found anywhere (also across tokens or rounds) cuts the
    output exactly before it. Example with stop="\\n\\n": pieces "a", "\\n", "\\nb" release
    "a", then stop with the text "a\\n" cut to "a".
    """

    def __init__(self, stop: Sequence[str]) -> None:
        self.stop = [s for s in stop if s]
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.text = ""  # all text decoded so far
        self.released = 0  # characters of `text` already handed out
        self._pending: list[tuple[int, Source, int, int]] = []  # (id, source, position, end offset in text)
        self.tokens: list[int] = []  # ids released so far
        self.stopped = False

    def push(self, token: int, piece: bytes, source: Source, position: int) -> list[Token]:
        self.text += self._decoder.decode(piece)
        self._pending.append((token, source, position, len(self.text)))
        return self._release(final=False)

    def flush(self) -> list[Token]:
        self.text += self._decoder.decode(b"", final=True)
        if self._pending:
            tok, src, pos, _ = self._pending[-1]
            self._pending[-1] = (tok, src, pos, len(self.text))
        return self._release(final=True)

    def _release(self, final: bool) -> list[Token]:
        limit = len(self.text)
        if self.stop:
            window_start = max(0, self.released - max(map(len, self.stop)))
            hits = [i for i in (self.text.find(s, window_start) for s in self.stop) if i >= 0]
            if hits:
                limit = min(hits)
                self.stopped = True
            elif not final:
                limit -= self._held_back()
        # The newest token waits while the decoder holds its unfinished UTF-8 bytes: if the
        # text ends there, flush() gives it the replacement character those bytes decode to.
        unfinished = not final and not self.stopped and self._decoder.getstate()[0] != b""
        out: list[Token] = []
        while self._pending:
            tok, src, pos, end = self._pending[0]
            if unfinished and len(self._pending) == 1:
                break
            if end > limit and not self.stopped:
                break
            if self.stopped and self.released >= limit and end > limit:
                break  # nothing of this token lies before the stop string
            piece = self.text[self.released : min(end, limit)]
            self.released = min(end, limit)
            self._pending.pop(0)
            self.tokens.append(tok)
            out.append(Token(tok, piece, src, pos))
        if self.stopped:
            self._pending.clear()
            self.text = self.text[:limit]
        return out

    def _held_back(self) -> int:
        """Length of the longest suffix of the text that is a proper prefix of a stop string."""
        best = 0
        for s in self.stop:
            for n in range(min(len(s) - 1, len(self.text)), best, -1):
                if self.text.endswith(s[:n]):
                    best = n
                    break
        return best


def shared_vocab(target: CausalModel, draft: CausalModel, margin: int = 128) -> int:
    """Number of token ids both models know; drafts and outputs stay below it."""
    if abs(target.n_vocab - draft.n_vocab) > margin:
        raise IncompatiblePair(
            f"draft vocabulary has {draft.n_vocab} tokens and the target's {target.n_vocab}; "
            f"llama.cpp allows a difference of at most {margin}"
        )
    return min(target.n_vocab, draft.n_vocab)


class Engine:
    """Speculative decoding of one target model with one drafter (or none: target-only)."""

    def __init__(
        self,
        target: CausalModel,
        drafter: Drafter | None = None,
        *,
        piece=None,
        is_end=None,
        vocab_limit: int | None = None,
    ) -> None:
        self.target = target
        self.drafter = drafter
        self.piece = piece or getattr(target, "piece")
        self.is_end = is_end or getattr(target, "is_end_of_generation")
        self.vocab_limit = vocab_limit or target.n_vocab

    # -- stages -----------------------------------------------------------------------

    def prefill(self, prompt: Sequence[int], max_tokens: int = 0) -> Prefill:
        """Evaluate all of the prompt but its last token in both models (the last one opens round 1).

        A prompt that does not fit raises ContextOverflow suggesting a --ctx with room for the
        prompt and `max_tokens` more.
        """
        if len(prompt) >= self.target.n_ctx:
            raise ContextOverflow(
                f"prompt is {len(prompt)} tokens but the context holds {self.target.n_ctx}; "
                f"pass --ctx {_next_ctx(len(prompt) + max(max_tokens, 1))}"
            )
        start = time.perf_counter()
        head = list(prompt[:-1])
        catch_up(self.target, head, 0)
        if self.drafter is not None:
            self.drafter.prefill(head)
        return Prefill(prompt_tokens=len(prompt), seconds=time.perf_counter() - start)

    def target_step(self, context: list[int], params: SamplingParams, rng: np.random.Generator) -> int:
        """One plain decoding step of the target: the baseline's whole loop body."""
        logits = catch_up(self.target, context)
        row = logits[0, : self.vocab_limit]
        return argmax(row) if params.greedy else sample(distribution(row, params), rng)

    def plan(self, context: list[int], budget: int, policy: DraftPolicy) -> tuple[Proposer | None, int]:
        """Who drafts this round and at most how many tokens; (None, 0) is a plain target step."""
        candidates = self.drafter.candidates(context) if self.drafter is not None else []
        name, k = policy.choose([d.name for d in candidates], budget)
        chosen = next((d for d in candidates if d.name == name), None)
        return (chosen, k) if chosen is not None and k > 0 else (None, 0)

    def speculative_round(
        self, context: list[int], drafter: Proposer, k: int, p_min: float, params: SamplingParams, rng: np.random.Generator
    ) -> tuple[Proposal, int, int, float, float]:
        """Draft up to k tokens, score them in one target batch, verify.

        Returns (proposal, accepted, next token, draft seconds, verify seconds). On return
        the target's cache holds context + accepted drafts, whatever happened inside.
        """
        t0 = time.perf_counter()
        proposal = drafter.propose(context, k, params, rng, p_min)
        t1 = time.perf_counter()
        drafts = proposal.tokens
        accepted = 0  # what survives in the target's cache if anything below raises
        try:
            logits = catch_up(self.target, list(context) + drafts, len(drafts) + 1)
            t2 = time.perf_counter()
            verdict = verify(logits[:, : self.vocab_limit], drafts, proposal.q_rows, params, rng)
            accepted = verdict.accepted
        finally:
            self.target.rewind(len(context) + accepted)
        return proposal, verdict.accepted, verdict.token, t1 - t0, t2 - t1

    def decode_round(
        self, context: list[int], budget: int, policy: DraftPolicy, params: SamplingParams, rng: np.random.Generator
    ) -> tuple[list[tuple[int, Source, int]], Rejected | None, Round]:
        """Plan, then draft and verify (or take one plain target step).

        Returns the tokens to emit as (id, source, position), the rejected draft if any, and
        the round's figures (its `seconds` cover planning to verification).
        """
        start = time.perf_counter()
        drafter, k = self.plan(context, budget, policy)
        if drafter is None:
            t0 = time.perf_counter()
            token = self.target_step(context, params, rng)
            proposal, accepted, draft_s, verify_s = Proposal(), 0, 0.0, time.perf_counter() - t0
        else:
            proposal, accepted, token, draft_s, verify_s = self.speculative_round(context, drafter, k, policy.p_min, params, rng)
        drafts = proposal.tokens
        emitted = [(d, Source.DRAFT, i + 1) for i, d in enumerate(drafts[:accepted])]
        last = Source.CORRECTION if accepted < len(drafts) else Source.BONUS if drafts else Source.TARGET
        emitted.append((token, last, accepted + 1))
        rejected = None
        if accepted < len(drafts):
            x = drafts[accepted]
            rejected = Rejected(x, self.piece(x).decode("utf-8", "replace"), accepted + 1)
        figures = Round(
            drafted=len(drafts),
            accepted=accepted,
            draft_seconds=draft_s,
            draft_decode_seconds=proposal.decode_seconds,
            verify_seconds=verify_s,
            seconds=time.perf_counter() - start,
            source=drafter.name if drafter is not None else "",
            draft_catch_up_seconds=proposal.catch_up_seconds,
            k=k,
        )
        return emitted, rejected, figures

    def emit(
        self, emitted: list[tuple[int, Source, int]], context: list[int], stream: TextStream, room: int
    ) -> Generator[Token, None, str | None]:
        """Append a round's tokens to the context and stream them, stopping exactly at an
        end-of-generation token, a stop string or the token budget (`room` tokens left).
        Returns why generation ends here, or None to go on."""
        for tok, source, position in emitted[:room]:
            if self.is_end(tok):
                return "eog"
            context.append(tok)
            yield from stream.push(tok, self.piece(tok), source, position)
            if stream.stopped:
                return "stop"
        return None

    # -- the loop ---------------------------------------------------------------------

    def generate(self, prompt: Sequence[int], config: GenerationConfig, policy: DraftPolicy | None = None) -> Iterator[Event]:
        """Yield Prefill, then Token/Rejected/Round events, then Finished.

        `policy` overrides config.draft_tokens (a policy learns from the rounds it observes;
        by default each generation gets a fresh one).
        """
        assert len(prompt) > 0, "the prompt must hold at least one token"
        policy = policy or draft_policy(config.draft_tokens, config.p_min)
        rng = np.random.default_rng(config.seed)
        context = list(prompt)
        stream = TextStream(config.stop)
        reason = None
        yield self.prefill(prompt, config.max_tokens)
        try:
            while reason is None:
                left = config.max_tokens - (len(context) - len(prompt))
                room = self.target.n_ctx - len(context)
                if left <= 0 or room <= 0:
                    reason = "max_tokens" if left <= 0 else "context_full"
                    break
                # Never draft past the token budget or the context: a round makes up to k + 1 tokens.
                emitted, rejected, figures = self.decode_round(context, min(left, room) - 1, policy, config.sampling, rng)
                if rejected is not None:
                    yield rejected
                emitting = time.perf_counter()
                reason = yield from self.emit(emitted, context, stream, left)
                figures = dataclasses.replace(figures, seconds=figures.seconds + time.perf_counter() - emitting)
                policy.observe(figures)
                yield figures
            if not stream.stopped:
                yield from stream.flush()
        finally:
            # Both caches end at the output's accepted prefix, also after EOS, a stop string or Ctrl-C.
            self.target.rewind(common_prefix(self.target.tokens, context))
            if self.drafter is not None:
                self.drafter.sync(context)
        yield Finished(reason=reason, tokens=tuple(stream.tokens), text=stream.text[: stream.released])


def _next_ctx(n: int) -> int:
    """The smallest power of two of at least n tokens, as a --ctx suggestion."""
    size = 512
    while size < n:
        size *= 2
    return size


@dataclass(frozen=True)
class CostCurve:
    """Measured costs in seconds: one draft step, and one target batch of n tokens (n = 1..)."""

    draft_step: float
    target_batch: tuple[float, ...]  # target_batch[n - 1] = time of a batch of n tokens

    @property
    def target_step(self) -> float:
        return self.target_batch[0]


def measure_cost_curve(
    target: CausalModel, draft: CausalModel | None, context: Sequence[int], max_batch: int, repeats: int = 3
) -> CostCurve:
    """Time target batches of 1..max_batch tokens (and a draft step) at the end of `context`.

    Both caches are rewound to `context` afterwards, whatever happens; medians of `repeats`.
    """
    filler = list(context[-1:]) * max_batch

    def timed(model: CausalModel, n: int) -> float:
        keep = len(context)
        catch_up(model, context)
        samples = []
        try:
            for _ in range(repeats):
                t0 = time.perf_counter()
                model.decode(filler[:n], n)
                samples.append(time.perf_counter() - t0)
                model.rewind(keep)
        finally:
            model.rewind(keep)
        return float(np.median(samples))

    curve = tuple(timed(target, n) for n in range(1, max_batch + 1))
    draft_step = timed(draft, 1) if draft is not None else 0.0
    return CostCurve(draft_step=draft_step, target_batch=curve)
