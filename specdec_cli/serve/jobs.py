"""What a request hands the worker, and what the worker hands back: the job, its items, its errors.

HTTP handlers never touch a model. They `submit` a Job to the worker (worker.py): what to
generate (chat messages, with the tools to show the template, or a raw prompt) and the request's
Settings, and whose request it is. They read what the worker hands back on the job's asyncio
queue, in this order:

    Started(prompt_tokens, cached_tokens)   the prompt fits: the answer can begin
    Prefill, Token, Rejected, Round, ...    the engine's own events (events.py), a round's
                                            Rejected and Tokens handed over with its Round
                                            (one wake-up of the handler's loop per round; for
                                            a whole answer, stream false, only until its first
                                            token, then the rest at the end)
    Done(outcome)                           stats.Outcome: text, counters, timings
  or, at any point before Done:
    Failed(error)                           a SpecdecError (BadInput: the client's fault;
                                            InternalError: a bug of ours, its stack logged once)

The worker's thread puts items through the handler loop's `Mailbox`, one wake-up for all that
arrive before the loop runs them. A client that went away `cancel()`s its job: the worker reads
the flag at its loop's next iteration (a waiting job leaves the queue at once).

Example (a job's items, as a handler reads them):

    job = worker.submit(Job(messages=[{"role": "user", "content": "Hi"}], settings=settings, tenant="key-1"), loop)
    first = await job.items.get()   # Started(prompt_tokens=9, cached_tokens=0)

Left out: the loop that serves jobs (worker.py), HTTP (completions.py), the error shape (errors.py).
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Callable

from ..decoding.consume import Outcome
from ..errors import SpecdecError
from .types import Settings


class QueueFull(SpecdecError):
    """Every place in the queue is taken."""


class ShuttingDown(SpecdecError):
    """The server is stopping and takes no more work."""


class InternalError(SpecdecError):
    """A bug of ours met while serving one request (the client gets 500 server_error)."""


class Unavailable(SpecdecError):
    """The models are not there: they failed to load, or a failure left them unusable."""


@dataclass(frozen=True)
class Started:
    prompt_tokens: int
    cached_tokens: int


@dataclass(frozen=True)
class Done:
    outcome: Outcome


@dataclass(frozen=True)
class Failed:
    error: SpecdecError


class Mailbox:
    """Hands calls from the worker's threads to one event loop, in order, with one wake-up for all
    that arrive before the loop runs them: `call_soon_threadsafe` writes to the loop's self-pipe
    each time, and with every slot handing over a round per pass that was a system call and a
    wake-up of the loop per sequence per pass. Example: post(f, 1), post(g, 2) before the loop
    runs -> one call_soon_threadsafe; the loop then runs f(1), g(2)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._lock = threading.Lock()
        self._calls: list[tuple[Callable, object]] = []

    def post(self, call: Callable, arg: object) -> None:
        with self._lock:
            self._calls.append((call, arg))
            if len(self._calls) > 1:
                return  # a wake-up is on its way; it will run this too
        try:
            self.loop.call_soon_threadsafe(self._run)
        except RuntimeError:  # the loop is closed: nothing will ever run these
            with self._lock:
                self._calls.clear()
            raise

    def _run(self) -> None:
        with self._lock:
            calls, self._calls = self._calls, []
        for call, arg in calls:
            call(arg)


@dataclass
class Job:
    settings: Settings
    messages: list[dict] | None = None  # chat: Hugging Face's form, rendered with the target's template
    tools: list[dict] | None = None  # chat: the tools the template shows the model (grammar/tools.ToolPlan.tools)
    prompt: str | None = None  # completions: the text as it is (run --raw)
    tenant: str = ""  # whose request: guard.Access.tenant ("" without keys)
    items: asyncio.Queue = field(default_factory=asyncio.Queue)
    _mailbox: Mailbox | None = None  # the handler's event loop's (Worker.submit)
    _cancelled: threading.Event = field(default_factory=threading.Event)
    _withdraw: Callable[["Job"], None] | None = None  # takes it out of the queue (Worker.submit)

    def cancel(self) -> None:
        self._cancelled.set()
        if self._withdraw is not None:
            self._withdraw(self)

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def _put(self, *items) -> None:
        """From the worker thread: hand items to the handler's event loop, in order."""
        self._mailbox.post(self._enqueue, items)

    def _enqueue(self, items: tuple) -> None:
        for item in items:
            self.items.put_nowait(item)
