"""The one owner of the loaded pair: `slots` generations at once, in one batch, from a FIFO.

HTTP handlers never touch a model: they `submit` a Job and read its items (Started, the engine's
events, Done or Failed) on the job's asyncio queue, as jobs.py describes.

A request crosses two threads: the HTTP handler's event loop, and the worker's, which runs the
one scheduling loop (decoding/scheduler.py) over both models and every slot. Each iteration it
admits waiting jobs into free slots and reads every running job's flags (a client that left, a
deadline), then runs the slots' rounds and ONE pass for all of them, and hands each job its
events. Slots are data: each model's context holds `slots` sequences (LoadOptions.slots), and a
slot is one sequence in both models, with the job it serves. Jobs are admitted in arrival
order, one whenever a slot is free, so no request starves behind later ones; each takes the
free slot whose cached tokens share the longest prefix with its prompt, where that is half the
prompt or half the slot's tokens at least (`_choose`: a chat's next turn evaluates only what is
new, in both models, while others are served: engine.prefill via causal_model.catch_up;
`cached_tokens` says how much was reused), else an empty slot, else the one used least recently.

The queue holds at most `queue_size` waiting jobs (QueueFull beyond: the handler answers 503
with Retry-After). A job whose client went away is `cancel()`ed: a waiting one leaves the queue
at once; a running one is ended at the loop's next iteration, during its prefill too, and its
engine's `finally` rolls its sequence back to the accepted prefix in both models, as Ctrl-C does
in `specdec run`; the slot is free for the next pass. A drafting memory (drafting/memory.py)
keeps every finished request's prompt and answer, which lookup drafts from for the requests
after it, and what each proposer (the draft model among them) earned, which the next
request's policy starts from (tuning/carried.py).

Tenants (a job's `tenant`: its API key, guard.py) never see each other's text. Each has its
own drafting memory, and a job reuses a slot's cache only when the slot's last job was its own
tenant's: otherwise the slot's sequence is emptied first, so `cached_tokens` (and the time a
prefill takes) tells a client only about its own key's requests.

A failure costs one request. Any exception while serving a job fails that job alone
(Failed(InternalError), the stack logged once); its slot's sequence, whose state the failure
may have left unknown, is emptied, and the other slots go on exactly. If it cannot be, or the
load failed, `gone` holds the reason: /health answers 503 with it and every request gets 503 at
once. `request_timeout` ends a generation that runs longer, with its tokens so far (finish
reason "time_limit", OpenAI's "length"): in its prefill at once, later where the next round
would begin, so an answer that the crossing round ends keeps its own finish reason. A watchdog
thread times every pass: one that has not returned after `pass_timeout` (a remote server that
stopped answering) makes the worker `gone`, fails every waiting and running job with 503, and
calls `on_gone`, with which the command exits non-zero for a supervisor to restart it. With RPC
servers its reason names the one the pass waits for (llama/rpc.py's `blame`): "the target
model's pass has not returned in 60 s: the RPC server at 10.0.0.2:50052 does not answer
(10.0.0.3:50052 does); check that it is running and reachable, then restart specdec serve".

Example (what the tests do, with a scripted pair):

    worker = Worker(lambda stack: pair, queue_size=4, slots=2); worker.start()
    job = worker.submit(Job(messages=[{"role": "user", "content": "Hi"}], settings=settings, tenant="key-1"), loop)
    first = await job.items.get()   # Started(prompt_tokens=9, cached_tokens=0)

Left out: the job and its items (jobs.py), HTTP (app.py, completions.py), what a request may hold
(types.py), the JSON shapes (wire.py).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Callable

from ..causal_model import common_prefix
from ..decoding.batch import Batcher, BatchedPolicy
from ..decoding.consume import EndEarly, consume
from ..decoding.engine import context_room
from ..decoding.scheduler import Ended, Scheduler
from ..drafting.lookup import LookupOptions
from ..drafting.memory import DraftMemory
from ..errors import BadInput, SpecdecError
from ..llama import rpc
from ..options import PASS_TIMEOUT
from ..events import AUTO, DraftPolicy, Event, Prefill, Rejected, Round, Token
from ..session import LoadedPair
from ..tuning.adaptive import AUTO_MAX_K
from ..tuning.policy import draft_policy
from .jobs import Done, Failed, InternalError, Job, Mailbox, QueueFull, ShuttingDown, Started, Unavailable
from .types import Settings

log = logging.getLogger("specdec")

SIMILAR = 0.5  # a slot's cache is reused where the shared prefix is this share of the prompt or of the slot's tokens (as llama-server's --slot-prompt-similarity)


class _Cancelled(Exception):
    """Raised inside the worker when a job's client went away (never leaves this module)."""


@dataclass(eq=False)
class Running:
    """A job in a slot, as the loop follows it (made afresh for each job)."""

    job: Job
    ids: list[int]  # its prompt's tokens
    memory: DraftMemory | None = None  # its tenant's
    deadline: float | None = None
    prefilled: bool = False  # its Prefill event came: past the deadline it ends at a round's end, not at once
    ending: bool = False  # an end was raised in it (cancel, time limit); it leaves at the loop's next step
    round_events: list[Event] = field(default_factory=list)  # a round's Rejected and Tokens, handed over with its Round
    held: bool = False  # a whole answer's rounds after its first token wait for the end
    cut_at: int | None = None  # once past the deadline: the round whose end ends the generation
    failure: Failed | None = None  # an error of ours while handling its events (`_broken`): its answer


@dataclass(eq=False)
class Slot:
    """One sequence in both models (`pair`: views, LoadedPair.shared), and the job it serves."""

    index: int
    pair: LoadedPair
    tenant: str | None = None  # whose tokens its sequence holds (None: nobody's)
    run: Running | None = None
    used: int = 0  # when it last took a job (a counter): the least recently used is given away first
    rounds: int = 0  # the last job's rounds and tokens, for the page
    tokens: int = 0

    @property
    def job(self) -> Job | None:
        return self.run.job if self.run is not None else None


class Worker:
    """Loads the pair in its own thread, then serves queued jobs in `slots` slots until `stop`."""

    def __init__(
        self,
        load: Callable[[contextlib.ExitStack], LoadedPair],
        queue_size: int,
        lookup: LookupOptions = LookupOptions(),
        request_timeout: float | None = None,
        slots: int = 1,
        pass_timeout: float = PASS_TIMEOUT,
        on_gone: Callable[[str], None] = lambda reason: None,
        rpc: tuple[str, ...] = (),
    ) -> None:
        assert queue_size >= 1, "the queue holds at least one job (cli/serve.py checks --queue)"
        assert slots >= 1, "cli/serve.py checks --slots"
        self._load = load
        self._lookup = lookup
        self._request_timeout = request_timeout
        self._pass_timeout = pass_timeout
        self._on_gone = on_gone
        self._rpc = rpc
        self.n_slots = slots
        self._mailboxes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # event loop -> its Mailbox
        self.memories: dict[str, DraftMemory] = {}  # each tenant's earlier prompts and answers, for lookup (drafting/memory.py)
        self._queue: collections.deque[Job] = collections.deque()
        self._queue_size = queue_size
        self._changed = threading.Condition()  # a job came, or the worker is stopping
        self._thread = threading.Thread(target=self._main, name="specdec-worker", daemon=True)
        self._served = 0
        self.slots: list[Slot] = []
        self.batcher: Batcher | None = None
        self._scheduler: Scheduler | None = None
        self._stopping = threading.Event()
        self.ready = threading.Event()
        self.load_error: SpecdecError | None = None
        self.gone: str | None = None  # why the models cannot serve (a failed load, caches that could not be reset, a stalled pass)
        self.pair: LoadedPair | None = None  # read by the app only for facts fixed at load (n_ctx, names)

    # -- the handlers' side --------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    @property
    def waiting(self) -> int:
        return len(self._queue)

    @property
    def running(self) -> int:
        return sum(slot.job is not None for slot in self.slots)

    def submit(self, job: Job, loop: asyncio.AbstractEventLoop) -> Job:
        if self._stopping.is_set():
            raise ShuttingDown("the server is shutting down")
        if self.gone is not None:
            raise Unavailable(self.gone)
        job._mailbox = self._mailboxes.get(loop)
        if job._mailbox is None:
            job._mailbox = self._mailboxes[loop] = Mailbox(loop)
        with self._changed:
            if len(self._queue) >= self._queue_size:
                raise QueueFull(f"all {self._queue_size} places in the queue are taken; retry shortly")
            job._withdraw = self._withdraw
            self._queue.append(job)
            self._changed.notify_all()
        return job

    def _withdraw(self, job: Job) -> None:
        """A cancelled job gives its place in the queue back at once (if it still waits there)."""
        with self._changed:
            with contextlib.suppress(ValueError):
                self._queue.remove(job)

    def stop(self, timeout: float = 30.0) -> None:
        """Cancel the generations in flight and every waiting job, then end the thread."""
        self._stopping.set()
        self._fail_waiting(ShuttingDown("the server is shutting down"))
        with self._changed:
            self._changed.notify_all()
        if self._thread.is_alive():
            self._thread.join(0 if self.gone is not None and self.batcher is not None and self.batcher.pass_began is not None else timeout)

    def _fail_waiting(self, error: SpecdecError) -> None:
        with self._changed:
            jobs, self._queue = list(self._queue), collections.deque()
        for job in jobs:
            job._put(Failed(error))

    # Facts of the loaded target that the handlers read to check and plan a request (fixed at load):

    def grammar_tokenizer(self):
        """The target's vocabulary as llguidance reads it (built at load)."""
        return self.pair.target.grammar_tokenizer

    def chat_template(self) -> str | None:
        return self.pair.target.chat_template()

    def special_id(self, text: str) -> int | None:
        """The id of a special token spelled `text` in the target's vocabulary (grammar/tools.plan's openers), or None."""
        return self.pair.target.special_id(text)

    def special_text(self, token: int) -> str:
        """A special token's own text ("<tool_call>"), which its piece leaves out; "" for any other token."""
        target = self.pair.target
        return target.token_text(token) if target.token_kind(token) == "special" else ""

    def slot_report(self, tenant: str | None = None) -> dict:
        """For the page: each slot's state, and for the asking tenant's own slots (every slot's for
        None: the admin, or a server without keys) their cached tokens and this job's tokens per
        pass; how many sequences the target passes held, and their rows; each model's seconds in
        passes and the time between passes (decoding/batch.PassLog); per batch size, the whole
        server's tokens per second with the draft model drafting and without (tuning/switch.py)."""
        log = self.batcher.log if self.batcher is not None else None
        slots = []
        for s in self.slots:
            own = tenant is None or s.tenant == tenant
            slots.append({"slot": s.index, "own": own, "busy": s.job is not None, "cached": len(s.pair.target.tokens) if own else None,
                          "rounds": s.rounds if own else None, "tokens": s.tokens if own else None})  # fmt: skip
        return {
            "slots": slots,
            "target_passes": dict(sorted(log.sequences["target"].items())) if log is not None else {},
            "target_rows": log.rows["target"] if log is not None else 0,
            "busy_seconds": dict(log.busy) if log is not None else {},  # per model, its passes' seconds
            "between_passes": {"spans": log.spans, "seconds": log.between} if log is not None else {"spans": 0, "seconds": 0.0},
            "drafting": self.batcher.drafting_report() if self.batcher is not None else {},
        }

    # -- the loop (the worker's thread) ----------------------------------------------------

    def _main(self) -> None:
        with contextlib.ExitStack() as stack:
            try:
                self.pair = self._load(stack)
                self.grammar_tokenizer()  # built now (0.2 s at 49,152 tokens, 1.6 s at 262,144), not on the first constrained request
                self.batcher, pairs = self.pair.shared(self.n_slots)
            except Exception as exc:
                if not isinstance(exc, SpecdecError):
                    log.error("loading the models failed", exc_info=True)
                    exc = SpecdecError(f"loading the models failed: {type(exc).__name__}: {exc}")
                self.load_error = exc
                self.gone = str(exc)
                self.ready.set()
                return
            self.slots = [Slot(i, p) for i, p in enumerate(pairs)]
            self._scheduler = Scheduler(self.batcher)
            threading.Thread(target=self._watch, name="specdec-watchdog", daemon=True).start()
            self.ready.set()
            try:
                for slot, item in self._scheduler.run(self._admit):
                    try:
                        self._handle(slot, item)
                    except Exception as exc:  # a bug of ours in one request's handling: it fails alone, the loop goes on
                        self._broken(slot, item, exc)
            except Exception as exc:  # a bug in the loop itself: nothing can be served any more
                log.error("the scheduling loop failed", exc_info=True)
                self._lose(f"the server failed ({type(exc).__name__}: {exc}); restart it")
            if self.gone is not None:
                self._fail_waiting(Unavailable(self.gone))

    def _admit(self, idle: bool) -> bool:
        """Before every pass (scheduler.Scheduler.run): end the jobs whose client left or whose time
        is up, then give free slots to waiting jobs in arrival order. Idle, wait for a job. False
        once stopping: the jobs in flight are cancelled and the loop ends when they have."""
        with self._changed:
            while idle and not self._queue and not self._stopping.is_set() and self.gone is None:
                self._changed.wait()
        stopping = self._stopping.is_set() or self.gone is not None
        now = time.monotonic()
        for slot in self.slots:
            run = slot.run
            if run is None or run.ending:
                continue
            if run.job.cancelled or stopping:
                self._end(slot, _Cancelled())
            elif run.deadline is not None and now > run.deadline and not run.prefilled:
                self._end(slot, EndEarly("time_limit"))  # in its prefill: no answer yet whose end could be kept
        if stopping:
            return False
        while any(s.job is None for s in self.slots):
            with self._changed:
                if not self._queue:
                    break
                job = self._queue.popleft()
            self._start(job)
        return True

    def _start(self, job: Job) -> None:
        """The job into a slot and the loop, or its Failed."""
        try:
            ids = self.pair.chat_tokens(job.messages, job.tools) if job.messages is not None else self.pair.prompt_tokens(job.prompt, chat=False)
        except SpecdecError as exc:
            job._put(Failed(exc))
            return
        except Exception as exc:
            job._put(self._internal(exc))
            return
        slot = self._choose(ids, job.tenant)
        self._served += 1
        slot.run, slot.used = Running(job, ids), self._served
        slot.rounds = slot.tokens = 0
        pair, s, run = slot.pair, job.settings, slot.run
        try:
            config = self._fit(ids, s)
            run.memory = self.memories.setdefault(job.tenant, DraftMemory())
            engine = pair.engine(drafter=s.drafter, lookup=self._lookup, memory=run.memory)
            if slot.tenant != job.tenant:
                self._reset(slot)  # another tenant's prefix is never reused, nor reported
                if self.gone is not None:
                    raise Unavailable(self.gone)
                slot.tenant = job.tenant
            policy = self._policy(s, pair)
        except SpecdecError as exc:
            self._finish(slot, Failed(exc))
            return
        except Exception as exc:  # a bug of ours: this request fails, the server goes on
            self._finish(slot, self._internal(exc))
            return
        job._put(Started(prompt_tokens=len(ids), cached_tokens=common_prefix(pair.target.tokens, ids[:-1])))
        run.deadline = None if self._request_timeout is None else time.monotonic() + self._request_timeout
        self._scheduler.add(slot, lambda emit: consume(engine.generate(ids, config, policy), emit))

    def _end(self, slot: Slot, error: BaseException) -> None:
        slot.run.ending = True
        self._scheduler.end(slot, error)

    def _handle(self, slot: Slot, item: object) -> None:
        """One item of a slot's job from the loop: an engine event, or its end."""
        run = slot.run
        job = run.job
        if isinstance(item, Ended):
            self._finish(slot, self._last(slot, item))
            return
        event = item
        if job.cancelled:
            if not run.ending:
                self._end(slot, _Cancelled())
            return
        if isinstance(event, Round):
            slot.rounds += 1
            slot.tokens += event.tokens
        elif isinstance(event, Prefill):
            run.prefilled = True
        run.round_events.append(event)
        # A round is whole (or the prefill, the end): one wake-up of the handler's loop. A
        # streamed answer goes out round by round; a whole one (stream false) is read at its end,
        # so once its first token went out (time to first token) its rounds go with the last.
        if not isinstance(event, (Token, Rejected)) and not run.held:
            job._put(*run.round_events)
            run.held = not job.settings.stream and any(isinstance(e, Token) for e in run.round_events)
            run.round_events = []
        # Past the deadline the generation ends where the next round would begin, not inside the
        # round that crossed it: that round may end the answer itself (an end, a stop string),
        # which then keeps its own finish reason and the text held back for the stop strings.
        if run.cut_at is None and run.deadline is not None and time.monotonic() > run.deadline:
            run.cut_at = slot.rounds + (1 if isinstance(event, Round) else 2)
        if run.cut_at is not None and not run.ending and (isinstance(event, Rejected) or (isinstance(event, Round) and slot.rounds >= run.cut_at)):
            self._end(slot, EndEarly("time_limit"))

    def _broken(self, slot: Slot, item: object, exc: Exception) -> None:
        """`_handle` failed on one of a slot's items: the request ends with InternalError, its sequence emptied."""
        if slot.job is None:
            return
        failure = self._internal(exc)
        if isinstance(item, Ended):  # the generation is over: answer now
            self._finish(slot, failure)
            self._reset(slot)
        else:  # end it where it waits; its Ended then answers with the failure
            slot.run.failure = failure
            self._end(slot, _Cancelled())

    def _last(self, slot: Slot, ended: Ended) -> Done | Failed | None:
        """The job's last item (None: it was cancelled and nobody listens)."""
        run, error = slot.run, ended.error
        if run.failure is not None:  # `_broken`: the generation was ended by our own failure
            self._reset(slot)
            return run.failure
        if run.round_events and not run.job.cancelled:  # a whole answer's held rounds; a round the time limit or an error cut
            run.job._put(*run.round_events)
        if isinstance(error, _Cancelled):  # the engine rolled both caches back
            if self._stopping.is_set():
                return Failed(ShuttingDown("the server is shutting down; the generation was cancelled"))
            return None
        if isinstance(error, SpecdecError):
            return Failed(error)
        if error is not None:  # a bug of ours: this request fails, the server goes on
            failed = self._internal(error)
            self._reset(slot)
            return failed
        run.memory.add(run.ids + ended.result.tokens)
        return Done(ended.result)

    def _finish(self, slot: Slot, last: Done | Failed | None) -> None:
        job, slot.run = slot.job, None
        if last is not None:  # after the slot is free: a client that has its answer sees it idle in GET /slots
            job._put(last)

    def _choose(self, ids: list[int], tenant: str) -> Slot:
        """The free slot whose sequence shares the longest prefix with the prompt (its own tenant's
        only), where that is at least SIMILAR of the prompt or of what the slot holds (a chat's next
        turn keeps its history's slot however long the new part); else an empty one, else the least
        recently used. (Without the bar, a prompt that shares only the chat template's first tokens
        with a slot would take it, and a long prefix there, such as a tools prompt, would be lost
        while other slots stood empty.)"""

        def merit(slot: Slot) -> tuple[int, bool, int]:
            held = slot.pair.target.tokens
            shared = common_prefix(held, ids[:-1]) if slot.tenant == tenant else 0
            return (shared if shared >= SIMILAR * min(len(ids), len(held)) else 0), not held, -slot.used

        return max((s for s in self.slots if s.job is None), key=merit)

    def _internal(self, exc: BaseException) -> Failed:
        log.error("internal error while serving a request", exc_info=(type(exc), exc, exc.__traceback__))
        return Failed(InternalError(f"internal error: {type(exc).__name__}: {exc}"))

    def _reset(self, slot: Slot) -> None:
        """Empty a slot's sequence in both models, whose state a failure may have left unknown; `gone` if it cannot be."""
        slot.tenant = None
        try:
            for model in (slot.pair.target, slot.pair.draft):
                if model is not None:
                    model.rewind(0)
        except Exception as exc:
            log.error("the KV caches could not be reset", exc_info=True)
            self._lose(f"the models cannot serve after an internal error ({type(exc).__name__}: {exc}); restart the server")

    def _lose(self, reason: str) -> None:
        """Nothing can be served any more: say why (/health), and wake the loop, which ends."""
        self.gone = reason
        with self._changed:
            self._changed.notify_all()

    # -- the watchdog (a thread of its own) ---------------------------------------------------

    def _watch(self) -> None:
        """Every pass is timed: one that has not returned after pass_timeout ends the server."""
        every = min(1.0, self._pass_timeout / 4)
        while not self._stopping.wait(every) and self.gone is None:
            began = self.batcher.pass_began
            if began is not None and time.monotonic() - began > self._pass_timeout:
                self._stalled(self.batcher.pass_model or "a")
                return

    def _stalled(self, model: str) -> None:
        stalled = f"the {model} model's pass has not returned in {self._pass_timeout:g} s"
        blamed, found = rpc.blame(self._rpc)
        if blamed:
            reason = f"{stalled}: {found}, then restart specdec serve"
        elif found:
            reason = f"{stalled}, though {found}: the stall is on this machine, which may be out of memory or overloaded; restart specdec serve"
        else:
            reason = f"{stalled} on this machine: it may be out of memory or overloaded; restart specdec serve"
        log.error(reason)
        self._lose(reason)
        error = Unavailable(reason)
        for slot in self.slots:  # the loop is stuck in the pass: the running jobs are answered from here
            job = slot.job
            if job is not None:
                job.cancel()
                job._put(Failed(error))
        self._fail_waiting(error)
        self._on_gone(reason)

    def _policy(self, settings: Settings, pair: LoadedPair) -> DraftPolicy:
        """The job's draft-length policy: a fixed k, or `auto` starting from the costs this server's
        passes measured for a sequence at the batch size it joins (Batcher.cost_curve), which
        its own rounds then refine, with the draft model left out where it cannot pay, or where
        the slot's draft model lags too far behind for the tokens left (BatchedPolicy). (The
        engine starts it from what the tenant's memory holds: Engine's `earned`.)"""
        if settings.draft_tokens != AUTO:
            return draft_policy(settings.draft_tokens, settings.p_min)
        curve = self.batcher.cost_curve(self.batcher.active, AUTO_MAX_K + 1)
        return BatchedPolicy(draft_policy(AUTO, settings.p_min, curve), self.batcher, lag=pair.draft_lag)

    def _fit(self, ids: list[int], settings: Settings):
        """The request's config with its token budget checked against the context (the numbers
        and what to do), or the context's room up to the server's default if it gave none."""
        n_ctx = self.pair.target.n_ctx
        room = context_room(len(ids), n_ctx, "shorten it, or start the server with a larger --ctx")
        config = settings.config
        if settings.max_tokens is not None and settings.max_tokens > room:
            raise BadInput(
                f"max_tokens is {settings.max_tokens} but the context holds {n_ctx} tokens and the prompt takes {len(ids)}, "
                f"leaving {room}; ask for at most {room}"
            )
        if settings.max_tokens is None and config.max_tokens > room:
            config = dataclasses.replace(config, max_tokens=room)
        return config
