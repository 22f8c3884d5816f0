"""One loop over many generations in one batch: requests join while it runs, their events come out tagged.

Each request is a piece of work, `work(emit)`: typically a generation folded by consume(), its
events handed to `emit` (`lambda emit: consume(engine.generate(ids, config, policy), emit)`, the
engine over a sequence's views, batch.SharedSequence). The scheduler runs every request's work
on its own thread, as a greenlet (a coroutine with a stack of its own: the engine, its drafters
and their decodes stay plain calls, so `Engine.generate` remains the one implementation of a
round, the batch of one). Each iteration of the loop:

  1. `admit` (the caller's hook) adds waiting requests, and may end running ones (`end`: a
     client that left, a deadline), before every pass, so also while a prompt is prefilled;
  2. every request that can run does, until it waits on a decode or ends: it plans, drafts
     (its draft steps wait for the draft model's pass), verifies the rows it got, and emits
     its events, each of which `run` yields to the caller as (tag, event);
  3. when every joined request waits, ONE pass of one model runs with all their rows
     (batch.Batcher.run_pass: the draft model's first), and the requests it served go on.

A request's end comes out as (tag, Ended(result=work's return value)) or (tag, Ended(error=the
exception)). `end(tag, error)` raises `error` inside that request where it waits (a decode, or
the event just yielded), so its generation's `finally` rolls its caches back as Ctrl-C does.

    scheduler = Scheduler(batcher)
    for i, ids in enumerate(prompts):  # sequence i of both models
        scheduler.add(i, lambda emit, i=i, ids=ids: consume(engines[i].generate(ids, config), emit))
    for tag, event in scheduler.run():
        ...                            # Token, Round, ... of request `tag`; Ended(...) once each

No threads are needed from the caller, and the loop itself starts none: the passes and every
request's Python run on the thread that iterates `run`, one at a time.

Left out: which request gets which sequence (serve/worker.py), the passes (batch.py).
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from typing import Callable, Hashable, Iterator

import greenlet

from ..events import Event
from .batch import Batcher, _Request

_WAITING = object()  # what a request's greenlet hands the loop when it waits on a decode


@dataclass(frozen=True)
class Ended:
    """A request's work is over: its return value, or the exception that ended it."""

    result: object = None
    error: BaseException | None = None


class Scheduler:
    """Runs the requests' work in one loop over one Batcher (see the module's text)."""

    def __init__(self, batcher: Batcher) -> None:
        self.batcher = batcher
        self._new: list[tuple[Hashable, greenlet.greenlet]] = []
        self._live: dict[Hashable, greenlet.greenlet] = {}  # started and not ended
        self._tags: dict[greenlet.greenlet, Hashable] = {}
        self._ends: dict[Hashable, BaseException] = {}  # raised inside the request at its next step
        self._loop: greenlet.greenlet | None = None

    def add(self, tag: Hashable, work: Callable[[Callable[[Event], None]], object]) -> None:
        """A request: `work(emit)` runs from the next iteration on (from the loop's thread only)."""
        assert tag not in self._live and all(t != tag for t, _ in self._new), f"request {tag!r} is already in the loop"
        run = greenlet.greenlet(lambda: self._run(work))
        run.gr_context = contextvars.Context()  # its own clock (clock.py) and context variables
        self._new.append((tag, run))

    def end(self, tag: Hashable, error: BaseException) -> None:
        """Raise `error` inside request `tag` where it waits (from the loop's thread: `admit`, or between events)."""
        if tag in self._live or any(t == tag for t, _ in self._new):
            self._ends[tag] = error

    @property
    def running(self) -> int:
        return len(self._live) + len(self._new)

    def run(self, admit: Callable[[bool], bool] | None = None) -> Iterator[tuple[Hashable, object]]:
        """The requests' events, each as (tag, event), and (tag, Ended) once each. `admit(idle)` is
        called before every pass and whenever nothing runs (idle=True: it may block until there is
        work); it returns False to stop taking requests (the loop then ends when those running end).
        Without `admit` the loop ends when the requests added so far have ended."""
        assert self._loop is None, "one loop at a time"
        self._loop = greenlet.getcurrent()
        self.batcher.park = self._park
        try:
            taking = True
            while True:
                if taking and admit is not None:
                    taking = admit(not self._live and not self._new)
                if not self._live and not self._new and not (taking and admit is not None):
                    return
                for tag, run in self._new:
                    self._live[tag], self._tags[run] = run, tag
                    self.batcher.join()
                new, self._new = self._new, []
                for tag, run in new:
                    yield from self._step(tag, run)
                for tag in [t for t in self._ends if t in self._live]:
                    yield from self._step(tag, self._live[tag], self._ends.pop(tag))
                if self.batcher.waiting:
                    for request in self.batcher.run_pass():
                        yield from self._step(request.owner, self._live[request.owner])
        finally:
            self.batcher.park = None
            self._loop = None
            for tag, run in list(self._live.items()) + self._new:  # the caller stopped iterating: each request ends where it waits
                if not run.dead:
                    run.throw(greenlet.GreenletExit)
                if tag in self._live:
                    self.batcher.leave()
            self._live.clear()
            self._tags.clear()
            self._new.clear()
            self._ends.clear()

    # -- inside -------------------------------------------------------------------------------

    def _run(self, work: Callable) -> Ended:
        try:
            return Ended(result=work(self._emit))
        except greenlet.GreenletExit:
            raise
        except BaseException as exc:  # noqa: BLE001  the request's own end, handed to the caller
            return Ended(error=exc)

    def _emit(self, event: Event) -> None:
        self._loop.switch(event)

    def _park(self, request: _Request) -> None:
        assert greenlet.getcurrent() in self._tags, "a decode of a shared sequence from outside the scheduler's requests (another thread, or the loop itself)"
        request.owner = self._tags[greenlet.getcurrent()]
        self._loop.switch(_WAITING)  # back when the passes served it (or with an `end` raised here)

    def _step(self, tag: Hashable, run: greenlet.greenlet, error: BaseException | None = None) -> Iterator[tuple[Hashable, object]]:
        """Run request `tag` until it waits on a decode or ends, yielding what it emits."""
        while True:
            out = run.throw(error) if error is not None else run.switch()
            if run.dead:
                del self._live[tag], self._tags[run]
                self._ends.pop(tag, None)
                self.batcher.leave()
                yield tag, out
                return
            if out is _WAITING:
                return
            yield tag, out
            error = self._ends.pop(tag, None)  # the caller may have ended it on seeing the event
