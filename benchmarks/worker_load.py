"""The server's worker driven without HTTP, for benchmarks: a request's Settings, one answer, a load of clients.

    with running(worker) as loop:
        tokens, seconds = loop.run_until_complete(load(worker, 4, 2, settings("model", AUTO, 64), story))

`load`: every one of `clients` clients sends `requests` prompts in turn (client i's r-th is
prompt(i + r)); it returns the tokens generated and the load's wall time. specdec_cli comes
from whatever sys.path finds first (benchmarks/served_overhead.py's child: the version it measures).

Used by benchmarks/gpu_batch.py and benchmarks/served_overhead.py.

Left out: HTTP (serve/app.py; benchmarks/serving_batch.py serves through it), what a load measures.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Callable, Iterator

from specdec_cli.decoding.consume import Outcome
from specdec_cli.decoding.engine import GenerationConfig
from specdec_cli.maths.sampling import GREEDY
from specdec_cli.serve.types import Settings
from specdec_cli.serve.jobs import Done, Failed, Job
from specdec_cli.serve.worker import Worker


def settings(drafter: str, k, max_tokens: int) -> Settings:
    """A greedy request of `max_tokens` tokens drafted by `drafter` with `k` (a number or AUTO)."""
    return Settings(config=GenerationConfig(max_tokens=max_tokens, sampling=GREEDY), max_tokens=max_tokens, draft_tokens=k, drafter=drafter,
                    p_min=None, top_logprobs=None, stream=False, include_usage=False, events=False)  # fmt: skip


async def answer(worker: Worker, prompt: str, s: Settings) -> Outcome:
    """One request's outcome (its error raised, where it failed)."""
    job = worker.submit(Job(settings=s, prompt=prompt), asyncio.get_running_loop())
    while True:
        item = await job.items.get()
        if isinstance(item, Done):
            return item.outcome
        if isinstance(item, Failed):
            raise item.error


async def load(worker: Worker, clients: int, requests: int, s: Settings, prompt: Callable[[int], str]) -> tuple[int, float]:
    """Every client sends `requests` prompts in turn; the tokens generated and the wall time."""

    async def client(i: int) -> int:
        outs = [await answer(worker, prompt(i + r), s) for r in range(requests)]
        return sum(len(o.tokens) for o in outs)

    start = time.perf_counter()
    tokens = await asyncio.gather(*(client(i) for i in range(clients)))
    return sum(tokens), time.perf_counter() - start


@contextlib.contextmanager
def running(worker: Worker, ready_seconds: float = 120.0) -> Iterator[asyncio.AbstractEventLoop]:
    """The worker started and loaded, and an event loop to run loads on; both ended after."""
    worker.start()
    assert worker.ready.wait(ready_seconds), "the worker never finished loading"
    loop = asyncio.new_event_loop()
    try:
        yield loop
    finally:
        worker.stop()
        loop.close()
