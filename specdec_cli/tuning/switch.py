"""Whether the draft model drafts at a batch size: measured tokens per second, drafting against not.

Alone, a sequence's own rounds say what its drafts cost it, and `-k auto` (policy.py) stops
drafting where they do not pay. In a batch they do not: a sequence that drafts makes every other
one wait through its draft steps, each thread's sampling runs while no model computes, and the
lines decoding/batch.py fits to the passes are straight where a CPU's costs are not. So, with
N >= 2 sequences joined, the whole batch is timed instead. Time is cut into epochs of at least
EPOCH_SECONDS at one N, each run in one mode: the draft model drafts (where auto wants it), or
it does not (the server with speculation off, `--drafter none`, but for lookup, which costs only
target rows). An epoch's rate is the tokens its rounds gave over its seconds; each (N, mode) keeps
a decaying mean of them. At each N, both modes run EXPLORE epochs, in turns, then the faster
mode runs, and the other is tried again every PROBE_EVERY-th epoch in case the text or the
machine changed. So at no batch size does speculation stay slower than speculation off.

An epoch starts and ends after a target pass that held every joined sequence: every round chosen
in an epoch ends in that epoch's passes, so each round's tokens are credited to the epoch its
mode was read in (`credit`, with the epoch's id), also when they are counted a moment after the
epoch ended. An epoch in which a sequence joined or left is dropped. What decides (epochs already
timed) is fixed before a round's draws, so the output stays exact (policy.py, "Why the output
stays exact").

An epoch's rate is recorded at the first pass after it, once its last rounds are counted, so
the choice for the next epoch reads the epochs before the last one (the exploring turns count
the last one too: EXPLORE >= 2). An epoch is recorded only when every sequence in it counted
its rounds (a request with a fixed k or no drafter does not). Example: at N = 2, epochs 1 to 4 draft, do not, draft, do not; the drafting
ones gave 100 tokens/s, the others 110. Epochs 5 to 11 do not draft; epoch 12, the 8th after
exploring, drafts again.

Left out: the passes and the joins (decoding/batch.py, which calls `after_pass`), which sources
take the draft model (batch.DRAFT_MODEL_SOURCES).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

EPOCH_SECONDS = 0.3  # an epoch lasts at least this long (at least a few rounds of every sequence)
EXPLORE = 2  # epochs of each mode at a batch size before the faster one is chosen (at least 2: see the module's text)
PROBE_EVERY = 8  # after exploring, every 8th epoch at a batch size runs the slower mode
RATE_DECAY = 0.7  # per epoch of a mode: about its last three epochs count


@dataclass
class Rate:
    """Tokens over seconds, each decaying by RATE_DECAY per epoch added."""

    tokens: float = 0.0
    seconds: float = 0.0
    epochs: int = 0

    def add(self, tokens: float, seconds: float) -> None:
        self.tokens = self.tokens * RATE_DECAY + tokens
        self.seconds = self.seconds * RATE_DECAY + seconds
        self.epochs += 1

    @property
    def value(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Epoch:
    id: int
    n: int  # sequences joined throughout
    drafting: bool
    start: float
    end: float | None = None
    tokens: int = 0
    excluded: float = 0.0  # seconds of catch-ups within it
    credited_by: set = field(default_factory=set)  # the sequences whose rounds gave its tokens

    @property
    def seconds(self) -> float:
        return self.end - self.start - self.excluded


@dataclass
class DraftingSwitch:
    """Per batch size (N >= 2), whether the draft model drafts (see the module's text)."""

    epoch_seconds: float = EPOCH_SECONDS
    explore: int = EXPLORE
    probe_every: int = PROBE_EVERY
    rates: dict[tuple[int, bool], Rate] = field(default_factory=dict)
    epoch: Epoch | None = None
    closed: list[Epoch] = field(default_factory=list)  # ended, waiting for their last rounds' tokens
    tried: collections.Counter = field(default_factory=collections.Counter)  # epochs ended, by (N, mode), recorded or not
    _ids: int = 0
    _chosen: dict[int, int] = field(default_factory=dict)  # epochs run at each N after exploring

    def drafting(self, n: int) -> tuple[bool, int | None]:
        """(whether the draft model drafts, the epoch to credit the round's tokens to) for a round
        chosen now with n sequences joined. A round chosen while the joined sequences differ from
        the epoch's is credited to none."""
        if n < 2:
            return True, None
        if self.epoch is not None and self.epoch.n == n:
            return self.epoch.drafting, self.epoch.id
        return self._next_mode(n, peek=True), None

    def credit(self, epoch_id: int | None, tokens: int, sequence: object) -> None:
        """A round of `sequence` (any key: the policy of one generation) chosen in epoch `epoch_id` gave `tokens`."""
        for epoch in [self.epoch, *self.closed]:
            if epoch is not None and epoch.id == epoch_id:
                epoch.tokens += tokens
                epoch.credited_by.add(sequence)
                return

    def exclude(self, seconds: float) -> None:
        """`seconds` of the current epoch went to the draft model catching up with text it did not
        see while it was not drafting (a prompt, an epoch without drafting): a cost of switching,
        paid once per switch, which the epoch's rate leaves out."""
        if self.epoch is not None:
            self.epoch.excluded += seconds

    def after_pass(self, n: int, held_all: bool, now: float) -> None:
        """A target pass ended at `now` with n sequences joined; held_all: it held all of them.
        Every round of a closed epoch ended by now, and the sequences that made them have since
        chosen again (which waits for their tokens to be counted): their rates are recorded."""
        for epoch in self.closed:
            if len(epoch.credited_by) >= epoch.n:  # else some sequence's rounds are not counted (a fixed k, no drafter)
                self._rate(epoch.n, epoch.drafting).add(epoch.tokens, epoch.seconds)
        self.closed = []
        epoch = self.epoch
        if epoch is not None and epoch.n != n:
            self.epoch = epoch = None  # a sequence joined or left: the epoch measured neither mode
        if not held_all or n < 2:
            return
        if epoch is not None and now - epoch.start < self.epoch_seconds:
            return
        if epoch is not None:
            epoch.end = now
            self.closed.append(epoch)
            self.tried[epoch.n, epoch.drafting] += 1
        self._ids += 1
        self.epoch = Epoch(self._ids, n, self._next_mode(n, peek=False), start=now)

    def _rate(self, n: int, drafting: bool) -> Rate:
        return self.rates.setdefault((n, drafting), Rate())

    def _next_mode(self, n: int, peek: bool) -> bool:
        on, off = self.tried[n, True], self.tried[n, False]
        if on < self.explore or off < self.explore:
            return on <= off  # in turns, drafting first
        best = self._rate(n, True).value >= self._rate(n, False).value  # the epochs recorded so far (all but the last)
        chosen = self._chosen.get(n, 0) + 1
        if not peek:
            self._chosen[n] = chosen
        return (not best) if chosen % self.probe_every == 0 else best
