"""Several generations at once: every sequence's rows in one pass of each model.

Each sequence runs the one engine there is (engine.py's `Engine.generate`, the batch of one)
over `SharedSequence`s: views of a model whose context holds several sequences
(llama/model.LlamaModel with n_seq > 1, or a fake). A view is a CausalModel like any other,
except that its `decode` hands the rows to the `Batcher` and waits for them. The scheduler
(scheduler.py) runs every sequence's generation in one thread, one at a time, each until it
waits on a decode; when every sequence that has joined is waiting, it has a pass run
(`run_pass`): ONE `decode_rows` call of one model that holds the waiting rows of every sequence
for that model, each under its own sequence id, and hands each its own logits. So

  - draft steps: all sequences that draft with the draft model at this moment take one step
    together (the draft model goes first: a target pass waits while anyone is still drafting,
    so that it holds every sequence's rows);
  - the target pass: each sequence's last token and drafts, verified afterwards by its own
    rule, with its own RNG and sampling settings;
  - roll back: each view drops its own sequence's entries (`seq_rm`).

Sequences join and leave between passes (`join`, `leave`), as requests come and go. A long prompt is
prefilled in chunks of at most `prefill_chunk` tokens while others are generating, so that it
does not stall them; alone it takes whole batches. A pass that fails is retried part by part,
so that the error reaches only the sequence whose rows caused it.

What a sequence is charged (clock.py). A pass of R rows over N sequences took T seconds; this
model's passes are fitted by a + b R + c N (tuning/pass_cost.py). Sequence i, with r_i rows, is charged
T (a / N + c + b r_i) / (a + c N + b R): the fixed cost split evenly, its own sequence's cost,
each row at the marginal cost of a row, scaled to what the pass took; and a pass that held only
N of the M joined sequences (a draft step, a catch-up) stalled the other M - N, so its charges
are multiplied by M / N. Alone that is T. So `-k auto` (tuning/adaptive.py), which learns from
the Round figures, weighs the rows a sequence adds at the batch size it is in; it starts from those costs (`cost_curve`), and `BatchedPolicy`
leaves the draft model out of any round where, at the current batch size, its drafts could
not pay even if all were accepted. That model of the costs misses what a CPU's passes do (a
straight line through curved costs) and what the threads do between passes, so with several
sequences joined the batch's tokens per second are also measured, with the draft model drafting
and without it (tuning/switch.py, `DraftingSwitch`), and the faster way is taken. A sequence whose
draft model fell far behind (it sat out rounds, or joined beside others) drafts only where its
tokens left repay the catch-up (`Batcher.draft_model_drafts`). So speculation shrinks or stops
where it does not pay.

    batcher = Batcher([draft, target])             # pass order: the draft's steps first
    seqs = [(batcher.sequence(draft, i), batcher.sequence(target, i)) for i in range(4)]
    # each generation: Engine(seqs[i][1], ModelDrafter(seqs[i][0])).generate(...), run by scheduler.Scheduler

A decode outside a scheduler (a reset, one sequence alone) runs its own passes at once.

Left out: the loop over the generations (scheduler.py), which request gets which sequence
(serve/worker.py); the models' own decode (llama/model.py: `decode_rows`, `seq_rm`).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping, NamedTuple, Protocol, Sequence

import numpy as np

from .. import clock
from ..errors import check_context
from ..events import DraftPolicy, Earned, Round
from ..tuning.cost_curve import CostCurve
from ..tuning.pass_cost import PassCost, aside_seconds, shares
from ..tuning.adaptive import AdaptivePolicy
from ..tuning.proposers import MODEL_KINDS, kind
from ..tuning.switch import DraftingSwitch

log = logging.getLogger("specdec")

PREFILL_CHUNK = 128  # prompt tokens per pass while other sequences are generating
CATCH_UP_FREE = 2  # a draft model this many tokens behind the target's cache is drafting along (a round's last draft, its bonus)


class SharedModel(Protocol):
    """A model whose context holds several sequences (llama/model.LlamaModel, the fakes)."""

    n_vocab: int
    n_ctx: int  # per sequence
    n_batch: int

    def decode_rows(self, parts: Sequence["Part"]) -> list[np.ndarray | None]: ...

    def seq_rm(self, seq: int, n_keep: int) -> None: ...


class Part(NamedTuple):
    """A sequence's rows in one pass: its id, the position of its first token, the tokens, and
    how many of the last rows want logits."""

    seq: int
    start: int
    tokens: Sequence[int]
    n_logits: int


@dataclass(eq=False)
class _Request:
    view: "SharedSequence"
    tokens: list[int]
    n_logits: int
    owner: object = None  # whose generation waits on it (the scheduler's handle)
    done: int = 0  # tokens decoded so far (a prompt goes in chunks)
    finished: bool = False
    result: np.ndarray | None = None
    error: BaseException | None = None
    charged: float = 0.0
    sequences: int = 1  # in the last pass that served it


@dataclass
class PassLog:
    """What the passes held: per model role, how many passes had N sequences, the rows and the
    seconds the passes took; and the time between
    one pass's end and the next one's start while sequences were joined throughout (`spans`, and
    their seconds `between`): the sequences' own rounds (sampling, verification, events) and the
    scheduler's switches, during which no model computes. Example: passes of 30 ms with 1.5 ms between
    them -> busy 95 % of the time."""

    sequences: dict[str, collections.Counter] = field(default_factory=lambda: collections.defaultdict(collections.Counter))
    rows: collections.Counter = field(default_factory=collections.Counter)
    busy: collections.Counter = field(default_factory=collections.Counter)
    spans: int = 0
    between: float = 0.0


class Batcher:
    """Gathers the waiting rows of every joined sequence into one pass per model (see the module's text)."""

    def __init__(self, models: Sequence[SharedModel], names: Sequence[str] | None = None, prefill_chunk: int = PREFILL_CHUNK) -> None:
        self.models = list(models)  # pass order: while a sequence waits on an earlier model, later ones wait
        self.names = list(names or (f"model{i}" for i in range(len(self.models))))
        self.prefill_chunk = prefill_chunk
        self.costs = [PassCost() for _ in self.models]
        self.log = PassLog()
        self._active = 0
        self._waiting: list[_Request] = []
        self.park: Callable[[_Request], None] | None = None  # set by a running scheduler: waits until the request is served
        self.pass_began: float | None = None  # monotonic time the pass in progress began (a watchdog reads it), else None
        self.pass_model: str | None = None  # the name of the model whose pass that is
        self._views: dict[tuple[int, int], SharedSequence] = {}
        self._drafting_together: float | None = None  # sequences per draft pass, a decaying mean
        self._last_end: float | None = None  # when the last pass ended, if sequences stayed joined since (PassLog.spans)
        self.switch = DraftingSwitch()  # with several joined: whether drafting pays, measured (tuning/switch.py)

    def sequence(self, model: SharedModel, seq: int) -> "SharedSequence":
        """The view of sequence `seq` of `model` (one of this batcher's models): the same one each time."""
        assert any(m is model for m in self.models), "the model is not one of this batcher's"
        key = (self.models.index(model), seq)
        if key not in self._views:
            self._views[key] = SharedSequence(self, model, seq)
        return self._views[key]

    def join(self) -> None:
        """One more sequence that every pass waits for (the scheduler's, as a generation starts)."""
        self._active += 1
        self.switch.turn()

    def leave(self) -> None:
        self._active -= 1
        self.switch.turn()
        if self._active == 0:
            self._last_end = None  # idle until the next sequence joins: not time between passes

    @contextlib.contextmanager
    def joined(self) -> Iterator[None]:
        """A sequence joined for the length of the block."""
        self.join()
        try:
            yield
        finally:
            self.leave()

    @property
    def active(self) -> int:
        return self._active

    def cost_curve(self, sequences: int, max_rows: int) -> CostCurve | None:
        """What one sequence among `sequences` is charged, by the lines measured so far: a target pass
        with n of its rows (n = 1..max_rows: a / N + c + b n) and a draft step (of the draft model's
        line, with as many drafting together as the recent draft passes held); None before a target
        pass was timed. `-k auto` starts from it (serve/worker.py), so that a sequence in a batch
        weighs its rows at their cost there from its first round, not at a pass's cost alone."""
        if not self.costs[-1].measured:
            return None
        n = max(sequences, 1)
        a, b, c = self.costs[-1].line()
        return CostCurve(draft_step=self._draft_step(n), target_batch=tuple(a / n + c + b * rows for rows in range(1, max_rows + 1)))

    def _draft_step(self, n: int) -> float:
        """A draft step's cost to each of the sequences drafting together (at most n): a_d / S + c_d + b_d."""
        if len(self.models) < 2 or not self.costs[0].measured:
            return 0.0
        a, b, c = self.costs[0].line()
        together = min(self._drafting_together or n, n)
        return a / together + c + b

    def draft_model_can_pay(self) -> bool:
        """Whether the draft model's drafts can pay at the current batch size even if every one were
        accepted. With N sequences joined, S of which draft together, one draft each: a pass of
        T = a + c N + b (N + S) and a draft step of a_d + (b_d + c_d) S yield N + S tokens, against N
        for a + c N + b N; so drafting can pay only when a / N + c > a_d / S + b_d + c_d. S is the
        mean number of sequences the recent draft passes held (N before any). True until both
        models' passes were timed. On a CPU, where a draft row costs much of a target row, two
        sequences are already too many (docs/serving.md)."""
        if len(self.models) < 2 or not (self.costs[0].measured and self.costs[-1].measured):
            return True
        n = max(self._active, 1)
        a, _, c = self.costs[-1].line()
        return a / n + c > self._draft_step(n)

    def catch_up_seconds(self, lag: int) -> float | None:
        """What a draft pass that evaluates `lag` tokens of one sequence costs, by the draft model's
        line (a draft step, `_draft_step`, plus b_d per token beyond one); None before a draft pass
        was timed. Every joined sequence waits through it. Example: (a_d, b_d, c_d) = (1, 5, 0) ms,
        drafting alone, lag 80 -> 6 + 5 * 79 = 401 ms."""
        if len(self.models) < 2 or not self.costs[0].measured:
            return None
        return self._draft_step(max(self._active, 1)) + self.costs[0].line()[1] * (lag - 1)

    def draft_model_drafts(
        self, lag: int = 0, left: int = 0, own_saving: Callable[[], float | None] = lambda: None
    ) -> tuple[bool, int | None]:
        """(whether a round chosen now may draft with the draft model, the switch's epoch to credit
        its tokens to): where it can pay at all (draft_model_can_pay) and, with several sequences
        joined, where the switch's measurements say that drafting is the faster mode.

        A sequence whose draft model lags more than CATCH_UP_FREE tokens (it sat out rounds beside
        others, or joined beside them: BatchedPolicy.prefill_draft) first pays a catch-up that
        every joined sequence waits through, and it drafts only where its `left` tokens to go save
        more than that: left x the seconds drafting saves per token (the switch's measured rates,
        DraftingSwitch.saving_per_token; alone, or where the switch has paired nothing yet, the
        sequence's own policy's estimate, `own_saving()`) against catch_up_seconds(lag). So as a
        load ends and the batch falls to a size where drafting pays, sequences near their end do
        not catch up with a whole text to draft a few tokens, and where the switch tries drafting
        at a larger batch only those whose catch-up could pay there join in. Where nothing is
        measured yet the choice stands. The switch's drafting way is thus "drafting where the
        catch-up pays": an epoch in which every sequence declined ran plain, and is recorded as the
        drafting way's rate all the same, which pulls the paired gain toward 1 where drafting would
        only pay without the catch-ups."""
        judge = lag > CATCH_UP_FREE
        n = self._active
        mode, epoch = self.switch.drafting(n, time.perf_counter())
        saving = self.switch.saving_per_token(n) if mode and judge and n >= 2 else None
        if mode and judge:
            saving = own_saving() if saving is None else saving
            cost = self.catch_up_seconds(lag)
            if saving is not None and cost is not None and left * saving < cost:
                mode = False
        return mode and self.draft_model_can_pay(), epoch

    def drafting_report(self) -> dict[int, dict]:
        """The switch's measurements per batch size (DraftingSwitch.report)."""
        return self.switch.report()

    def credit(self, epoch: int | None, tokens: int, sequence: object) -> None:
        """A round of `sequence` chosen in the switch's `epoch` gave `tokens` (BatchedPolicy.observe)."""
        self.switch.credit(epoch, tokens, sequence)

    def decode(self, view: "SharedSequence", tokens: Sequence[int], n_logits: int) -> np.ndarray | None:
        """`view`'s tokens through the next passes; its logits rows (a view, valid until this sequence's next decode).

        Under a scheduler the generation waits (`park`) while the other sequences run and the passes
        are run for all; alone (no scheduler: a reset, one sequence) the passes run now."""
        request = _Request(view, [int(t) for t in tokens], n_logits)
        start = time.perf_counter()
        self._waiting.append(request)
        try:
            if self.park is not None:
                self.park(request)
            else:
                with self.joined():
                    while not request.finished:
                        self.run_pass()
        finally:
            if not request.finished:  # the generation was ended while it waited (a cancel): its rows go with it
                self._waiting.remove(request)
        clock.charge(time.perf_counter() - start, request.charged)
        view.last_pass_sequences = request.sequences
        if request.error is not None:
            raise request.error
        return request.result

    @property
    def waiting(self) -> bool:
        return bool(self._waiting)

    # -- a pass ------------------------------------------------------------------------------

    def run_pass(self) -> list[_Request]:
        """One pass of the earliest model (in pass order) that a waiting request is for; the requests it finished."""
        index = min(self.models.index(r.view.model) for r in self._waiting)
        model = self.models[index]
        planned = self._plan(model, [r for r in self._waiting if r.view.model is model])
        parts = [self._part(r, take) for r, take in planned]
        start = time.perf_counter()
        if self._last_end is not None:
            self.log.spans += 1
            self.log.between += start - self._last_end
        self.pass_model, self.pass_began = self.names[index], time.monotonic()
        try:
            results, seconds = self._decode(model, parts)
        finally:
            self.pass_began = None
            self._last_end = time.perf_counter()
            self.log.busy[self.names[index]] += self._last_end - start
        finished = []
        for (r, take), result in zip(planned, results):  # first what the requests wait for, then the bookkeeping
            if isinstance(result, BaseException):
                r.error, r.finished = result, True
            else:
                r.view.tokens.extend(r.tokens[r.done : r.done + take])
                r.done += take
                r.sequences = len(planned)
                if r.done == len(r.tokens):
                    r.result, r.finished = result, True
            if r.finished:
                finished.append(r)
        self._waiting = [r for r in self._waiting if not r.finished]
        try:
            self._account(index, planned, parts, results, seconds)
        except Exception:  # a bug in the figures must not cost the sequences their rows: logged, and the passes go on
            log.error("accounting for a pass failed", exc_info=True)
        return finished

    def _account(self, index: int, planned: list[tuple[_Request, int]], parts: list[Part], results: list, seconds: float | None) -> None:
        """A pass's costs, the sequences' charges, the switch's figures and the log."""
        served = [(r, take) for (r, take), result in zip(planned, results) if not isinstance(result, BaseException)]
        logit_rows = [part.n_logits for part, result in zip(parts, results) if not isinstance(result, BaseException)]
        # With a draft model: a pass of it (its steps, its catch-ups), or the target's that follows.
        draft_pass, target_pass = len(self.models) > 1 and index == 0, index > 0 and index == len(self.models) - 1
        if seconds is not None:
            takes = [take for _, take in served]
            self.costs[index].add(sum(takes), len(served), seconds)
            line = self.costs[index].line()
            # Every joined sequence waited through this pass: one that served only some of them (a
            # draft step, a catch-up) cost the others their progress, so its sequences carry that too.
            stalled = max(self._active, len(served)) / len(served)
            for (r, _), share in zip(served, shares(seconds, takes, line)):
                r.charged += share * stalled
            # What the switch sets aside (tuning/switch.py):
            if draft_pass:  # the draft model's rows beyond a round's last draft and its bonus: a catch-up
                self.switch.catch_up(aside_seconds(seconds, takes, [min(take, CATCH_UP_FREE) for take in takes], line))
            elif target_pass:  # the target's rows that want no logits: a prompt's, alike either way
                self.switch.set_aside(aside_seconds(seconds, takes, logit_rows, line))
        if target_pass:
            self.switch.after_pass(self._active, len(planned) == self._active, time.perf_counter())
        if draft_pass:
            seen = self._drafting_together
            self._drafting_together = len(planned) if seen is None else 0.9 * seen + 0.1 * len(planned)
        name = self.names[index]
        self.log.sequences[name][len(planned)] += 1
        self.log.rows[name] += sum(take for _, take in planned)

    def _plan(self, model: SharedModel, requests: list[_Request]) -> list[tuple[_Request, int]]:
        """How many tokens of each waiting request this pass takes: generation rows whole, prompts
        in chunks (at most prefill_chunk while anyone is generating), within n_batch, rows that
        want logits only in a request's last chunk."""
        budget = model.n_batch

        def prompt(r: _Request) -> bool:
            return len(r.tokens) - r.done > self.prefill_chunk

        generating = not all(prompt(r) for r in requests)
        planned = []
        for r in sorted(requests, key=prompt):  # generation rows first, then prompts, each in arrival order
            rest = len(r.tokens) - r.done
            take = min(rest, budget, self.prefill_chunk if generating else rest)
            if take < rest:
                take = min(take, rest - r.n_logits)  # the rows with logits come in the last chunk
            if take > 0:
                planned.append((r, take))
                budget -= take
        assert planned, "a pass with nothing to do"
        return planned

    def _decode(self, model: SharedModel, parts: list[Part]) -> tuple[list, float | None]:
        """Each part's logits (or the exception its rows raised) and the pass's seconds (None when it failed)."""
        start = time.perf_counter()
        try:
            return model.decode_rows(parts), time.perf_counter() - start
        except Exception as exc:  # handed to the part's own generation, which raises it
            if len(parts) == 1:
                return [exc], None
        # One part's rows failed the pass (the model dropped every part's positions): alone, each
        # part meets only its own fate. (Copies: each decode overwrites the model's logits.)
        results = []
        for part in parts:
            try:
                rows = model.decode_rows([part])[0]
                results.append(None if rows is None else np.array(rows))
            except Exception as exc:  # handed to that part's own generation, which raises it
                results.append(exc)
        return results, None

    @staticmethod
    def _part(r: _Request, take: int) -> Part:
        """The request's next `take` rows; those that want logits are the request's, in its last chunk only."""
        last = r.done + take == len(r.tokens)
        return Part(r.view.seq, len(r.view.tokens), r.tokens[r.done : r.done + take], r.n_logits if last else 0)


class BatchedPolicy:
    """A sequence's `-k auto` policy in a batch (an AdaptivePolicy): `inner`'s choice, with the draft
    model's proposals left out of every round where Batcher.draft_model_drafts says no (they cannot
    pay at the batch size, or the switch measured the batch faster without them), and no probes
    while other sequences share the passes. Each round's tokens go to the switch's epoch it was
    chosen in. What it reads (passes and epochs already timed, the batch size) is fixed before the
    round's draws, so the law is kept (tuning/policy.py, "Why the output stays exact"). Lookup,
    which costs only its rows, stays."""

    def __init__(self, inner: DraftPolicy, batcher: Batcher, lag: Callable[[], int] | None = None) -> None:
        self.inner, self.batcher = inner, batcher
        self.lag = lag  # the draft model's lag behind the target's cache, in tokens (session.LoadedPair.draft_lag)
        self._epoch: int | None = None  # the switch's epoch this round was chosen in

    @property
    def p_min(self) -> float:
        return self.inner.p_min

    @property
    def prefill_draft(self) -> bool:
        """A prompt goes into the draft model up front only alone, where it may draft. Beside others
        it catches up when it first drafts, and only where the tokens left repay that
        (Batcher.draft_model_drafts)."""
        return self.batcher.active <= 1 and self.batcher.draft_model_drafts()[0]

    def resume(self, earned: Mapping[str, Earned]) -> None:
        self.inner.resume(earned)

    def earned(self) -> dict[str, Earned]:
        return self.inner.earned()

    def observe(self, event: Round) -> None:
        self.batcher.credit(self._epoch, event.tokens, self)
        self.inner.observe(event)

    def choose(self, sources: Sequence[str], budget: int) -> tuple[str | None, int]:
        by_model = [name for name in sources if kind(name) in MODEL_KINDS]
        lag = self.lag() if self.lag is not None and by_model and budget > 0 else 0
        own = functools.partial(self.own_saving, by_model, budget)  # asked only where the switch has no figure
        drafts, self._epoch = self.batcher.draft_model_drafts(lag, budget + 1, own)  # budget: the tokens left but one
        if not drafts:
            sources = [name for name in sources if name not in by_model]
        # A probe (a drafter passed over, tried again in case the text changed) stalls every other
        # sequence through its catch-up; while others share the passes their record (the drafting
        # memory's) stands in for it.
        self.inner.probing = self.batcher.active <= 1
        return self.inner.choose(sources, budget)

    def own_saving(self, names: Sequence[str], budget: int) -> float | None:
        """Seconds per token that the best of `names` (draft-model proposers) saves this sequence
        by its policy's own estimates, charged at the batch size it is in (clock.py; alone, whole
        passes): T_batch(1) - 1 / (its plan's tokens per second); None before they exist. In a
        batch those rest on straight lines through the passes, which on a CPU promise drafting
        more than the batch gets (tuning/switch.py): a bound, until the switch has paired the
        ways. Example: T_batch(1) 50 ms, a plan of 40 tokens/s -> 25 ms."""
        curve = self.inner.curve() if isinstance(self.inner, AdaptivePolicy) else []
        if not curve:
            return None
        rate = max(self.inner.plan(name, min(self.inner.max_k, budget), curve)[1] for name in names)
        return curve[0] - 1.0 / rate if rate > 0 else None


class SharedSequence:
    """One sequence of a shared model: a CausalModel (causal_model.py) whose decode goes through the batcher.

    Everything else (piece, tokenize, the chat template, n_vocab) is the model's own.
    """

    def __init__(self, batcher: Batcher, model: SharedModel, seq: int) -> None:
        self.batcher = batcher
        self.model = model
        self.seq = seq
        self.tokens: list[int] = []
        self.n_ctx = model.n_ctx
        self.last_pass_sequences = 1  # sequences in the pass that last served this one

    def decode(self, tokens: Sequence[int], n_logits: int = 1) -> np.ndarray | None:
        assert len(tokens) > 0 and 0 <= n_logits <= len(tokens), f"n_logits={n_logits} for {len(tokens)} tokens"
        check_context(self.n_ctx, len(self.tokens) + len(tokens))
        return self.batcher.decode(self, tokens, n_logits)

    def rewind(self, n_keep: int) -> None:
        if n_keep >= len(self.tokens):
            return
        self.model.seq_rm(self.seq, n_keep)
        del self.tokens[n_keep:]

    def __getattr__(self, name: str):
        return getattr(self.model, name)
