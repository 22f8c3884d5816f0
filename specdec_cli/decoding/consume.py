"""The driver: one generation (the engine's event stream) run to its end, or to Ctrl-C, and folded into an `Outcome`.

    outcome = consume(engine.generate(ids, config, policy), on_event=renderer)
    outcome.text, outcome.tokens, outcome.stats.tokens_per_second

`on_event` may end the generation where it is by raising `EndEarly(reason)` (the server's
`--request-timeout`): the outcome then holds the tokens so far, with that finish reason.

Left out: the counters themselves (stats.py), showing the events (the front-ends' on_event).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

from ..events import Event, Token
from .stats import RunStats


class EndEarly(Exception):
    """Raised by an `on_event` callback to end the generation now; `reason` becomes its finish reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class Outcome:
    """What one generation left behind, also when Ctrl-C cut it short."""

    stats: RunStats
    tokens: list[int] = field(default_factory=list)  # the ids of the Token events
    pieces: list[str] = field(default_factory=list, repr=False)  # their text
    wall_seconds: float = 0.0  # the whole call, prefill and Python included

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def interrupted(self) -> bool:
        return self.stats.finish_reason == "interrupted"

    def add(self, event: Event) -> None:
        """Fold one event of the generation in."""
        self.stats.add(event)
        if isinstance(event, Token):
            self.tokens.append(event.id)
            self.pieces.append(event.text)


def consume(events: Iterator[Event], on_event: Callable[[Event], None] | None = None) -> Outcome:
    """Run a generation (the engine's event generator) to its end, or to Ctrl-C, and fold it.

    Every event goes to `on_event` too (a renderer). Ctrl-C ends the run with finish reason
    "interrupted"; the generator is closed in a `finally` either way, so the engine rolls its
    caches back now, not at garbage collection.
    """
    outcome = Outcome(RunStats())
    start = time.perf_counter()
    try:
        for event in events:
            outcome.add(event)
            if on_event is not None:
                on_event(event)
    except KeyboardInterrupt:
        outcome.stats.finish_reason = "interrupted"
    except EndEarly as end:
        outcome.stats.finish_reason = end.reason
    finally:
        events.close()
        outcome.wall_seconds = time.perf_counter() - start
    return outcome
