"""Who proposes draft tokens: one small interface, a draft model, prompt lookup, and both.

A drafter is asked for up to k tokens that continue `context` and answers with a
`Proposal`: the token ids and, for a sampling drafter, the processed distribution q it drew
each one from (None for a deterministic drafter, whose q is one-hot). It never verifies;
that is `speculative.verify`'s job.

    drafter = ModelDrafter(LlamaModel("tiny.gguf"))
    proposal = drafter.propose(context=[1, 2, 3], k=4, params=GREEDY, rng=rng)
    proposal.tokens  # e.g. [4, 5, 6, 7]

Three drafters sit behind the interface:

- `ModelDrafter` samples from a small GGUF model. With `p_min > 0` it stops early, before
  drawing a token whose draft confidence (max of q, or of the raw softmax at temperature 0)
  is below p_min (llama.cpp's --draft-p-min).
- `LookupDrafter` needs no model: it finds the most recent earlier occurrence of the
  context's last n-gram (largest n first) and proposes what followed it (prompt-lookup
  decoding). Example, sizes (2, 1): context [5, 6, 7, 9, 5, 6] ends in (5, 6), seen before
  ending at index 2 -> proposal [7, 9, 5, 6, ...]: the copy may run on into the text it is
  producing (as in LZ77), so a repeating pattern is proposed in full. It proposes nothing
  when nothing matches, stops after an end-of-generation token, and before any id the
  verifier cannot score.
- `ModelAndLookup`: lookup when it matches, the draft model otherwise; one drafter per round
  (a round's proposal is either deterministic or sampled, never mixed).
- `CascadeDrafter`: drafting for the draft. Where lookup matches, the draft model scores the
  lookup's guess in one batch and samples its own draft from those rows, exactly; otherwise
  it drafts step by step.

`candidates(context)` lists who can propose for this context, preferred first; the
draft-length policy (policy.py) picks one and its k each round. Lookup names its match by
length ("lookup:1", "lookup:2", "lookup:3-5", "lookup:6+"), so that the policy learns
separately how well short and long matches are accepted.

The draft model's KV cache is matched to the context lazily: `propose` keeps the longest
common prefix of what the cache holds and the context, drops the rest and evaluates only
the tokens after it. `sync` does the same eagerly (the engine calls it in a `finally`).

Left out here: the choice of k and of the drafter (policy.py), verification (speculative.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

import numpy as np

from .errors import BadInput
from .memory import MATCH_CAP, PLACES, RECALL_TOKENS, DraftMemory, Recall, agreement, longest_agreement
from .sampling import Distribution, SamplingParams, argmax, proposal, residual, sample


@dataclass
class Proposal:
    tokens: list[int] = field(default_factory=list)
    q_rows: list[Distribution] | None = None  # the sparse q of each draft; None: deterministic (q one-hot)
    decode_seconds: float = 0.0  # time spent inside the draft model's decode calls
    catch_up_seconds: float = 0.0  # of which bringing its cache up to the context (see policy.draft_step_seconds)


class Proposer(Protocol):
    """One way to propose for the current context; `name` ("model", "lookup:3-5") is the key
    under which the policy keeps its measurements."""

    name: str

    def propose(
        self, context: Sequence[int], k: int, params: SamplingParams, rng: np.random.Generator, p_min: float = 0.0
    ) -> Proposal: ...


class Drafter(Proposer, Protocol):
    def prefill(self, context: Sequence[int]) -> None: ...

    def candidates(self, context: Sequence[int]) -> list[Proposer]:
        """Who can propose for this context, preferred first (empty: a plain target step)."""
        ...

    def sync(self, context: Sequence[int]) -> None: ...


class CausalModel(Protocol):
    """What drafting and verification need from a model (the llama.cpp backend or a fake)."""

    tokens: list[int]
    n_vocab: int
    n_ctx: int

    def decode(self, tokens: Sequence[int], n_logits: int = 1) -> np.ndarray | None: ...

    def rewind(self, n_keep: int) -> None: ...

    def piece(self, token: int) -> bytes: ...

    def is_end_of_generation(self, token: int) -> bool: ...


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token lists. Example: [1,2,3], [1,2,4] -> 2."""
    n = min(len(a), len(b))
    if list(a[:n]) == list(b[:n]):
        return n
    i = 0
    while a[i] == b[i]:
        i += 1
    return i


def catch_up(model: CausalModel, context: Sequence[int], n_logits: int = 1) -> np.ndarray | None:
    """Bring a model's KV cache to `context` and return logits for its last `n_logits` tokens.

    At least `n_logits` tokens are (re)evaluated, so the last row is always fresh; with
    n_logits=0 (a prefill) only what the cache lacks is evaluated, possibly nothing.
    """
    keep = min(common_prefix(model.tokens, context), len(context) - n_logits)
    model.rewind(keep)
    if keep == len(context):
        return None
    return model.decode(context[keep:], n_logits)


def top_probability(logits: np.ndarray) -> float:
    """The largest probability of softmax(logits) at temperature 1. Example: [0, 0] -> 0.5."""
    z = logits - logits.max()
    return float(1.0 / np.exp(z).sum())


class ModelDrafter:
    """Drafts with a small GGUF model, sampling each token from its processed distribution q.

    Two steps are methods so that a drafter of another vocabulary (cross_vocab.py) reuses the
    loop: `own_context` (the draft's tokens for the engine's context; here the same ids) and
    `pick` (the proposed token, the draft id fed back, and the q it was drawn from).
    """

    name = "model"

    def __init__(self, model: CausalModel, vocab_limit: int | None = None) -> None:
        self.model = model
        # Ids at or beyond the shared vocabulary are never proposed (compat.PairReport.shared_vocab, checked by session.check_pair).
        self.vocab_limit = vocab_limit or model.n_vocab

    def own_context(self, context: Sequence[int]) -> list[int]:
        """The draft model's tokens for the engine's context: the same ids."""
        return list(context)

    def pick(
        self, row: np.ndarray, params: SamplingParams, rng: np.random.Generator, p_min: float
    ) -> tuple[int, int, Distribution | None] | None:
        """(proposed id, the id the draft model evaluates next, q or None if deterministic), or
        None to stop here. The early stop looks at q (or the softmax) only, before x is drawn:
        the proposal stays "x ~ q" whenever there is one, which is what verify assumes."""
        row = row[: self.vocab_limit]
        if params.greedy:
            if p_min > 0.0 and top_probability(row) < p_min:
                return None
            x = argmax(row)
            return x, x, None
        q = proposal(row, params)
        if p_min > 0.0 and q.max_prob() < p_min:  # (max_prob of a dense q is a pass over the row)
            return None
        x = sample(q, rng)
        return x, x, q

    def prefill(self, context: Sequence[int]) -> None:
        catch_up(self.model, self.own_context(context), 0)

    def candidates(self, context: Sequence[int]) -> list[Proposer]:
        return [self]

    def propose(
        self, context: Sequence[int], k: int, params: SamplingParams, rng: np.random.Generator, p_min: float = 0.0
    ) -> Proposal:
        out = Proposal(q_rows=None if params.greedy else [])
        t0 = time.perf_counter()
        own = self.own_context(context)
        k = min(k, self.model.n_ctx - len(own))
        if k <= 0 or not own:
            return out
        logits = catch_up(self.model, own)
        out.catch_up_seconds = out.decode_seconds = time.perf_counter() - t0
        self.extend(out, logits[0], k, params, rng, p_min)
        return out

    def extend(self, out: Proposal, row: np.ndarray, k: int, params: SamplingParams, rng: np.random.Generator, p_min: float) -> None:
        """Draft on, one step at a time, from `row` (the draft's logits after its cache) until `out`
        holds k tokens or the early stop; the last draft is never evaluated here (the target does that)."""
        while len(out.tokens) < k:
            picked = self.pick(row, params, rng, p_min)
            if picked is None:
                break
            x, d, q = picked
            if q is not None:
                out.q_rows.append(q)
            out.tokens.append(x)
            if len(out.tokens) < k:
                t0 = time.perf_counter()
                row = self.model.decode([d], 1)[0]
                out.decode_seconds += time.perf_counter() - t0

    def sync(self, context: Sequence[int]) -> None:
        self.model.rewind(common_prefix(self.model.tokens, self.own_context(context)))


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


class NgramIndex:
    """Where each n-gram of a growing token list ended (its newest `places` occurrences), not
    counting the list's own end; a match takes the occurrence that agrees with the context's end
    furthest back, the latest on a tie (memory.longest_agreement, as the drafting memory does).

    Example, sizes (2,): after update([5, 6, 7, 5, 6]) the bigram (5, 6) maps to [2] (its
    occurrence ending at index 2; the one ending at 5 is the list's own suffix), so
    match([5, 6, 7, 5, 6]) == 2: what followed the earlier (5, 6) starts at index 2.
    """

    def __init__(self, sizes: Sequence[int], places: int = PLACES) -> None:
        assert sizes and min(sizes) >= 1, "n-gram sizes are positive"
        self.sizes = tuple(sorted(set(sizes), reverse=True))
        self.places = places
        self.tokens: list[int] = []
        self.ends: dict[tuple[int, ...], list[int]] = {}  # n-gram -> where its newest occurrences end, oldest first

    def update(self, context: Sequence[int]) -> None:
        """Index `context`, incrementally when it extends what was indexed before."""
        n_old = len(self.tokens)
        if len(context) < n_old or list(context[:n_old]) != self.tokens:
            self.tokens, self.ends, n_old = [], {}, 0
        self.tokens.extend(context[n_old:])
        # Ends 1 .. n_old - 1 are indexed; the old suffix (end n_old) and the new ones join them,
        # all but the new suffix (end len), in increasing order.
        for end in range(max(n_old, 1), len(self.tokens)):
            for n in self.sizes:
                if end >= n:
                    found = self.ends.setdefault(tuple(self.tokens[end - n : end]), [])
                    found.append(end)
                    if len(found) > self.places:
                        del found[0]

    def match(self, context: Sequence[int]) -> int | None:
        """Index in `context` where the continuation of its last n-gram's best earlier occurrence starts."""
        self.update(context)
        for n in self.sizes:
            if len(context) > n:
                found = self.ends.get(tuple(context[-n:]))
                if found:
                    return longest_agreement(context, ((end, end, context) for end in found))[1]
        return None


def match_length(context: Sequence[int], start: int, cap: int = 8) -> int:
    """How many tokens before `start` equal the context's last ones (at most cap).
    Example: context [1, 2, 3, 9, 2, 3], start 3 -> 2 (the (2, 3) before index 3)."""
    return agreement(context, start, context, cap)


def match_class(length: int, prefix: str = "lookup") -> str:
    """The policy's key for a lookup match: its acceptance depends much on how long the match is
    (a repeated passage is copied whole, a one-token match mostly fails). 1, 2 -> 'lookup:1',
    'lookup:2'; 3..5 -> 'lookup:3-5'; 6 or more -> 'lookup:6+'; a memory match of 16 or more
    (prefix 'lookup:memory') -> 'lookup:memory:16+'."""
    if length <= 2:
        return f"{prefix}:{length}"
    if length <= 5:
        return f"{prefix}:3-5"
    return f"{prefix}:6+" if length < 16 or prefix == "lookup" else f"{prefix}:16+"


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

    def prefill(self, context: Sequence[int]) -> None:
        self.index.update(context)

    def candidates(self, context: Sequence[int]) -> list[Proposer]:
        """The match in this context and the one in the memory (the longer first), each named by
        its length class (see match_class): a memory match only if it is the longer."""
        out: list[Proposer] = []
        start = self.index.match(context)
        here = match_length(context, start, MATCH_CAP) if start is not None else 0
        if start is not None:
            out.append(LookupMatch(match_class(min(here, 8)), self, start))
        recall = self.memory.match(context) if self.memory is not None else None
        if recall is not None and recall.tokens and recall.length > here:
            out.insert(0, MemoryMatch(match_class(recall.length, "lookup:memory"), self, recall))
        return out

    def propose(
        self, context: Sequence[int], k: int, params: SamplingParams, rng: np.random.Generator, p_min: float = 0.0
    ) -> Proposal:
        """Deterministic, so q_rows is None (q one-hot); `params`, `rng` and `p_min` are not used."""
        found = self.candidates(context)
        return found[0].propose(context, k, params, rng, p_min) if found else Proposal()

    def copy(self, context: Sequence[int], start: int, k: int) -> Proposal:
        """Up to k tokens of context from `start` on, running on into the copy itself."""
        n = len(context)
        out = Proposal()

        def source():
            j = start
            while True:
                yield context[j] if j < n else out.tokens[j - n]
                j += 1

        return self.take(source(), min(k, self.options.max_tokens), out)

    def take(self, tokens, k: int, out: Proposal | None = None) -> Proposal:
        """Up to k of `tokens` as a proposal: before any id the verifier cannot score, through an
        end of generation at the latest (nothing after it can be emitted)."""
        out = Proposal() if out is None else out
        for token in tokens:
            if len(out.tokens) >= k or (self.vocab_limit is not None and token >= self.vocab_limit):
                break
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
        self, context: Sequence[int], k: int, params: SamplingParams, rng: np.random.Generator, p_min: float = 0.0
    ) -> Proposal:
        return self.drafter.copy(context, self.start, k)


@dataclass(frozen=True)
class MemoryMatch:
    """What followed the context's end in an earlier call (memory.Recall), ready to propose."""

    name: str
    drafter: LookupDrafter
    recall: Recall

    def propose(
        self, context: Sequence[int], k: int, params: SamplingParams, rng: np.random.Generator, p_min: float = 0.0
    ) -> Proposal:
        return self.drafter.take(self.recall.tokens, min(k, recall_length(self.recall.length, self.drafter.options)))


def _keep_or_redraw(q: Distribution, guess: int, rng: np.random.Generator) -> int:
    """Speculative sampling of a deterministic guess against q: guess with probability q(guess),
    else a draw from normalise(max(0, q - onehot(guess))); the result is distributed as q."""
    if rng.random() < q.prob(guess):
        return guess
    return sample(residual(q, Distribution(q.n, np.array([guess]), np.array([1.0]))), rng)


@dataclass(frozen=True)
class GuessedDraft:
    """One cascade round: the lookup match that guesses, and the draft model that samples from the guess."""

    name: str
    drafter: CascadeDrafter
    guess: Proposer

    def propose(
        self, context: Sequence[int], k: int, params: SamplingParams, rng: np.random.Generator, p_min: float = 0.0
    ) -> Proposal:
        guessed = self.guess.propose(context, k, params, rng, p_min).tokens
        return self.drafter.sample_with_guess(context, guessed, k, params, rng, p_min)


class ModelAndLookup:
    """Lookup when the context's last n-gram was seen before, the draft model otherwise."""

    name = "model+lookup"

    def __init__(self, model: ModelDrafter, lookup: LookupDrafter) -> None:
        self.model = model
        self.lookup = lookup

    def prefill(self, context: Sequence[int]) -> None:
        self.model.prefill(context)
        self.lookup.prefill(context)

    def candidates(self, context: Sequence[int]) -> list[Proposer]:
        return self.lookup.candidates(context) + self.model.candidates(context)

    def propose(
        self, context: Sequence[int], k: int, params: SamplingParams, rng: np.random.Generator, p_min: float = 0.0
    ) -> Proposal:
        drafter = self.candidates(context)[0]
        return drafter.propose(context, k, params, rng, p_min)

    def sync(self, context: Sequence[int]) -> None:
        self.model.sync(context)


class CascadeDrafter(ModelAndLookup):
    """Drafting for the draft: where lookup (or the memory) has a guess, the draft model scores the
    guess in ONE batch instead of k sequential steps, and its own exact sample comes out of it.

    Staged speculative decoding (Spector & Re 2023) and CS-Drafting (Chen et al., NeurIPS 2024)
    cascade drafters; here the lookup's guess g_1..g_m is verified against the draft model's q
    as the target verifies drafts (a deterministic proposal: keep g_i with probability q_i(g_i),
    else draw from normalise(max(0, q_i - onehot(g_i))) and stop; all kept: one more token from
    q_{m+1}). So the tokens are an exact sample of the draft model, and q_rows are the very rows
    that batch gave, which is all the target's verification needs (speculative.verify: x ~ q).
    Without a guess it drafts as ModelDrafter does. A ModelAndLookup otherwise (its two drafters,
    prefill, sync), whose lookup candidates are turned into guessed rounds. At temperature 0 the sample is the draft's
    greedy continuation. Where the sample leaves the guess (or takes all of it) short of k tokens,
    the draft model drafts on from there step by step, as ModelDrafter does. Example: k = 4, guess
    [7, 8, 9], the draft's greedy choices 7, 8, 5 -> proposal [7, 8, 5] from one draft batch of 4
    rows, then one step from 5 on gives the fourth token (2 of ModelDrafter's 4 steps saved).

    Left out: p_min's early stop in a guessed round (the batch is scored whole); drafts of another
    vocabulary (the guess is in target ids: session uses it for a same-vocabulary pair only).
    """

    name = "cascade"

    def candidates(self, context: Sequence[int]) -> list[Proposer]:
        """A guessed round named by its lookup match ("cascade:3-5", "cascade:memory:6+"), else the draft model."""
        found = self.lookup.candidates(context)
        if found:
            return [GuessedDraft("cascade:" + found[0].name.split(":", 1)[1], self, found[0])]
        return self.model.candidates(context)

    def sample_with_guess(
        self, context: Sequence[int], guess: Sequence[int], k: int, params: SamplingParams, rng: np.random.Generator, p_min: float = 0.0
    ) -> Proposal:
        """Up to k tokens of the draft model's own sample: decided from one batch that scores `guess`
        as far as the sample follows it (and one token more), then step by step as ModelDrafter drafts."""
        drafter = self.model
        model = drafter.model
        own = drafter.own_context(context)
        k = min(k, model.n_ctx - len(own))
        guess = list(guess[: max(0, k - 1)])
        out = Proposal(q_rows=None if params.greedy else [])
        if k <= 0 or not own:
            return out
        t0 = time.perf_counter()
        logits = catch_up(model, own + guess, len(guess) + 1)  # row i: after own + guess[:i]
        kept = 0
        try:
            for i in range(len(guess) + 1):
                row = logits[i, : drafter.vocab_limit]
                q = None if params.greedy else proposal(row, params)
                x = argmax(row) if q is None else sample(q, rng) if i == len(guess) else _keep_or_redraw(q, guess[i], rng)
                out.tokens.append(x)
                if q is not None:
                    out.q_rows.append(q)
                if i == len(guess) or x != guess[i]:
                    break
                kept += 1
        finally:
            model.rewind(len(own) + kept)  # the cache holds the sample but its last token, as ModelDrafter leaves it
        out.decode_seconds = out.catch_up_seconds = time.perf_counter() - t0
        if len(out.tokens) < k:
            t0 = time.perf_counter()
            row = model.decode(out.tokens[-1:], 1)[0]
            out.decode_seconds += time.perf_counter() - t0
            drafter.extend(out, row, k, params, rng, p_min)
        return out
