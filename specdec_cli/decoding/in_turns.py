"""Two generations decoded in turns on one thread: the target-only baseline beside the speculative run.

`run --baseline` sets the target's own decoding against the speculative run. Decoded one after
the other, the two would meet different machines: a host's speed drifts by tens of percent
within a minute (memory bandwidth, other tenants; docs/benchmarks.md, "The plain baseline").
So the baseline, on a second context of the target's weights
(LlamaModel.sibling), is decoded in turns with the speculative run: after each speculative
round it is advanced until it has made as many tokens, and what is left of it runs when the
speculative run ends. Each engine times its own rounds, between a round's start and its Round
event, so neither is charged for the other's turns, and both meet the same moments of the
machine. (The speculative run's tokens are also rendered within its rounds' time; the
baseline's are not rendered: what that costs falls on the speculative side.)

    beside = Beside(target_only.generate(ids, config))
    outcome = consume(beside.alongside(engine.generate(ids, config, policy)), renderer)
    beside.outcome.stats.tokens_per_second      # the baseline's, measured in turns

Left out: folding events (consume.py), the second context (llama/model.py).
"""

from __future__ import annotations

from typing import Iterator

from ..events import Event, Round, Token
from .consume import Outcome
from .stats import RunStats


class Beside:
    """A generation advanced in turns with another one, folded into `outcome` as it goes."""

    def __init__(self, events: Iterator[Event]) -> None:
        self._events = events
        self._ended = False
        self._between = True  # its last event ended a round (or it has not begun)
        self.outcome = Outcome(RunStats())

    def alongside(self, events: Iterator[Event]) -> Iterator[Event]:
        """`events`, passed on unchanged, with this generation advanced after each of their rounds
        to as many tokens as they have made, and to its end after theirs. Closing it closes both
        (each engine rolls its cache back).

        Example: a speculative run of rounds making 3, 2 and 4 tokens: after its rounds this
        generation has made 3, 5 and 9 tokens (one per round of its own), then the rest it has.
        """
        made = 0
        try:
            for event in events:
                yield event
                if isinstance(event, Token):
                    made += 1
                elif isinstance(event, Round):
                    self._advance(made)
            self._advance(None)
        finally:
            events.close()
            self._events.close()

    def _advance(self, tokens: int | None) -> None:
        """Until this generation has made `tokens` tokens (None: to its end), and on to the end of
        its round: its engine times a round up to its Round event, so it must not wait for its
        next turn in the middle of one."""
        while not self._ended and (tokens is None or len(self.outcome.tokens) < tokens or not self._between):
            event = next(self._events, None)
            if event is None:
                self._ended = True
            else:
                self.outcome.add(event)
                self._between = isinstance(event, Round)
