"""Whether the draft model drafts at a batch size: measured tokens per second, drafting against not.

Alone, a sequence's own rounds say what its drafts cost it, and `-k auto` (adaptive.py) stops
drafting where they do not pay. In a batch they do not: a sequence that drafts makes every other
one wait through its draft steps, each thread's sampling runs while no model computes, and the
lines decoding/batch.py fits to the passes are straight where a CPU's costs are not. So, with
N >= 2 sequences joined, the whole batch is timed instead. Time is cut into epochs of at least
EPOCH_SECONDS at one N, each run in one way: the draft model drafts (where auto wants it), or it
does not (as the server with speculation off, `--drafter none`, but for lookup, which costs only
target rows). An epoch's rate is the tokens its rounds gave over its seconds.

The machine's own speed drifts by tens of percent within seconds (a shared host's other
tenants), more than the two ways may differ. So the ways are compared in pairs of adjacent
epochs at the same N, one of each way: each pair gives log(drafting rate / plain rate), and
`gain` is a decaying mean of those logs. At each N the ways take turns for EXPLORE epochs each
(one: a single pair, since on a CPU each exploring epoch that drafts first catches the draft
model up with all the text it missed, and the probes go on measuring); then the draft model
drafts while gain > MARGIN (below), and the other way runs every PROBE_EVERY-th epoch (two more
pairs: the probe and each of its neighbours), in case the text or the load changed.
Each probe costs what the losing way loses for an epoch (and, into drafting, the draft model's
catch-up), so where a probe left the choice as it was and the ways differ clearly (by
CLEAR_GAIN, 10 %, or more), the next one waits twice as long, up to MAX_PROBE_EVERY epochs (19 s
of epochs of 0.3 s); one that turned it starts the count afresh. Where drafting is ahead but
close the probes stay every PROBE_EVERY-th epoch: a choice made on a pair or two (drafting ahead
by 4 % at four sequences, in one served run) must not hold for long (it then lost by half). Where
not drafting is ahead, close or not, each probe that leaves it so doubles the wait as well: a
probe into drafting first pays the catch-up, which on a CPU outweighs the few percent a close
choice could be wrong by (at four sequences, T = 0, with the ways within 5 % and a probe every
8th epoch, loads with probes served 0.90-0.92 of speculation off, in one served run), and the
server with speculation must not serve less than without it.
What the trying costs is also measured and capped: an epoch that ran a way to try it (exploring,
a probe) and was the slower of a pair lost its seconds times (1 - its rate / the other's), plus
what it spent catching the draft model up, and a probe begins only while those losses, at every
N together, are at most PROBE_SHARE (3 %) of the seconds of epochs so far. On a CPU a probe into
drafting at four sequences first catches the draft model up with some hundred tokens (0.5 s in
one served run): where it then loses, the next probe waits some 15 s of batched time, not 8
epochs.
Where drafting lost at a smaller batch, a larger one starts without it and learns only from
the probes: another sequence in the batch makes a draft step dearer against the pass it saves
(vLLM's speculation by batch size rests on the same rule), and every turn spent exploring a way
that loses costs throughput.
So at no batch size does speculation stay slower than speculation off for long: what remains is
the cost of finding out (docs/serving.md measures it).

An epoch starts and ends after a target pass that held every joined sequence: every round chosen
in an epoch ends in that epoch's passes, so each round's tokens are credited to the epoch its
way was read in (`credit`, with the epoch's id), also when they are counted a moment after the
epoch ended. An epoch's rate is recorded at the first pass after it, once those last rounds
are counted, so the choice of the next epoch reads the epochs before the last one.

An epoch measures one way's steady generating, nothing else:
- A sequence that joins or leaves ends the epoch at the next pass (`turn`), also where one leaves
  as another joins and N stays, and that epoch is dropped. Answers end, and the next requests'
  prompts begin, at moments that have nothing to do with the way (at four clients sending
  answers of equal length they end within a pass or two): an epoch holding such a moment read
  0.7-0.8 of its neighbours, and its pairs log ratios of 0.18-0.32 (a served run at four
  sequences, T = 0.8). Servers with speculation off, both ways alike, paired "drafting"
  0.92-1.07x ahead of itself while these epochs counted, 0.95-1.02x once they were dropped.
- What its target passes spent on prompts (pass_cost.aside_seconds: the same either way), and
  what the draft model spent catching up with text it did not see (`catch_up`: a prompt that
  joined beside others, batch.BatchedPolicy.prefill_draft, or the rounds of an epoch without
  drafting) are set aside: an epoch is EPOCH_SECONDS of generating. A catch-up is paid once per
  sequence and switch, not per epoch: in the first epoch of drafting after plain ones it is
  the most of what the epoch spent (on a deepened pair at four sequences, T = 0, pairs with it
  counted read drafting 0.45-0.96x of not drafting, while a server drafting at every epoch served
  1.05x and 1.08x of speculation off in two runs; with it set aside they read 0.92-1.09x, and
  what else holds them below the steady way there is not found). Whether a catch-up pays is
  decided per sequence instead: one whose catch-up would cost more than drafting saves over its
  tokens left (`saving_per_token`) does not draft even in an epoch of drafting
  (batch.Batcher.draft_model_drafts), so the drafting way is drafting where it pays. What a
  probe into drafting spent catching up counts against the probes' share (PROBE_SHARE) where
  the probe lost.
- A pair is two epochs at one N that follow each other within an epoch's length, a moment at
  another N between them or not. An epoch is also dropped when some sequence in it credited
  nothing (a request with a fixed k or no drafter), or when no target pass ran for IDLE_SECONDS
  (the last requests of a load ended together).

Drafting is chosen only where paired MARGIN (5 %) ahead: that is about what the pairs read
where both ways are the same, and a wrong choice of drafting costs more than a wrong choice of
not drafting (catch-ups, and draft steps that give nothing back). What decides (epochs already
timed) is fixed before a round's draws, so the output stays exact (policy.py, "Why the output
stays exact").

Example, at N = 2 with EXPLORE = 2 (tests/core/test_switch.py): epochs 1 to 4 draft, do not,
draft, do not, at 100, 120, 100 and 120 tokens/s: three pairs, each log(100 / 120) = -0.18, so
gain < 0. Epochs 5 to 11 do not draft; epoch 12, the 8th after exploring, does.

Left out: the passes and the joins (decoding/batch.py, which calls `after_pass`), which sources
take the draft model (proposers.MODEL_KINDS).
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass, field

from .estimates import WeightedMean

EPOCH_SECONDS = 0.3  # an epoch lasts at least this long (at least a few rounds of every sequence)
EXPLORE = 1  # epochs of each way at a batch size before gain chooses (a pair; the probes go on measuring)
PROBE_EVERY = 8  # after exploring, every 8th epoch at a batch size runs the other way,
MAX_PROBE_EVERY = 64  # then every 16th, 32nd, .. while the probes leave a clear choice as it was
MARGIN = math.log(1.05)  # drafting is chosen where paired 5 % or more ahead
CLEAR_GAIN = math.log(1.1)  # a clear choice: one way 10 % ahead of the other, paired
PROBE_SHARE = 0.03  # trying the other way (exploring, probes) may lose at most this share of the batched time
IDLE_SECONDS = 2.0  # no target pass for this long: the server was idle (or stalled), and the open epoch measured nothing
DECAY = 0.8  # per pair (and per epoch of a way, for the rates shown): about the last five count


def _mean() -> WeightedMean:
    return WeightedMean(DECAY)


@dataclass
class Epoch:
    id: int
    n: int  # sequences joined throughout
    drafting: bool
    start: float
    end: float = 0.0
    tokens: int = 0
    credited_by: set = field(default_factory=set)  # the sequences whose rounds gave its tokens
    trying: bool = False  # it ran its way to try it (exploring, a probe), not as the choice
    prompts: float = 0.0  # seconds its target passes spent on prompts (the same either way): not counted
    catch_up: float = 0.0  # seconds the draft model spent catching up (paid once per switch): not counted
    turns: int = 0  # joins and leaves before it began (DraftingSwitch.turns)

    def seconds(self, now: float | None = None) -> float:
        """Its time up to `now` (or its end) less what was set aside (prompts, catch-ups)."""
        return (self.end if now is None else now) - self.start - self.prompts - self.catch_up

    @property
    def rate(self) -> float:
        return self.tokens / max(self.seconds(), 1e-9)


@dataclass
class DraftingSwitch:
    """Per batch size (N >= 2), whether the draft model drafts (see the module's text)."""

    epoch_seconds: float = EPOCH_SECONDS
    explore: int = EXPLORE
    probe_every: int = PROBE_EVERY
    gain: dict[int, WeightedMean] = field(default_factory=lambda: collections.defaultdict(_mean))  # log(drafting / plain), in pairs
    rates: dict[tuple[int, bool], WeightedMean] = field(default_factory=lambda: collections.defaultdict(_mean))  # tokens/s by (N, way): shown
    tried: collections.Counter = field(default_factory=collections.Counter)  # epochs ended, by (N, way), recorded or not
    epoch: Epoch | None = None
    closed: list[Epoch] = field(default_factory=list)  # ended, waiting for their last rounds' tokens
    _last: dict[int, Epoch] = field(default_factory=dict)  # the last epoch recorded at each N
    _ids: int = 0
    _shared_until: float = -math.inf  # when the last pass with several sequences joined ended
    _chosen: collections.Counter = field(default_factory=collections.Counter)  # epochs begun at each N since its last probe
    _probe_every: dict[int, int] = field(default_factory=dict)  # at each N: epochs from one probe to the next
    _probed_for: dict[int, bool] = field(default_factory=dict)  # at each N: the better way when it was last probed
    _seconds: float = 0.0  # of the epochs ended so far, at every N
    _tried_cost: float = 0.0  # seconds lost by the epochs that tried a way, against their pairs' other epoch
    _last_pass: float = -math.inf  # when the last target pass ended
    turns: int = 0  # sequences that joined or left so far (`turn`)

    def turn(self) -> None:
        """A sequence joined or left. One that leaves as another joins keeps N, but the time between
        (the answer's end, the next prompt) is no way's: the epoch ends at the next pass."""
        self.turns += 1

    def drafting(self, n: int, now: float = math.inf) -> tuple[bool, int | None]:
        """(whether the draft model drafts, the epoch to credit the round's tokens to) for a round
        chosen at `now` with n sequences joined. A round chosen while the joined sequences differ
        from the epoch's is credited to none. Alone, a sequence drafts as its own policy says, once
        it has been alone for an epoch's length: between one request and the next the others are
        alone for a moment, and a draft model that did not draft beside them would first have to
        catch up with their whole text, stalling the next request's first pass."""
        if n < 2:
            return now - self._shared_until >= self.epoch_seconds, None
        if self.epoch is not None and self.epoch.n == n:
            return self.epoch.drafting, self.epoch.id
        return self._next_way(n, begin=False)[0], None

    def saving_per_token(self, n: int) -> float | None:
        """Batch seconds per token that drafting saves at n >= 2 sequences: (1 / plain rate) (1 -
        plain rate / drafting rate), as paired and measured at n. In an epoch that tries drafting
        (exploring, a probe), or before drafting was paired at n, the most it saved at any smaller
        batch size instead, where that is more: another sequence only makes a draft dearer against
        the pass it saves, so the bound leaves room to find drafting ahead, while a catch-up that
        could not pay even then is not tried. None where nothing was paired.
        Example: 30 tokens/s plain, drafting paired 1.6x ahead -> (1 - 1 / 1.6) / 30 = 12.5 ms."""
        own = self._saving(n)
        trying = self.epoch is not None and self.epoch.n == n and self.epoch.trying
        if own is not None and not trying:
            return own
        savings = [own, *(self._saving(m) for m in list(self.gain) if m < n)]
        return max((saving for saving in savings if saving is not None), default=None)

    def _saving(self, n: int) -> float | None:
        plain, gain = self.rates[n, False].value, self.gain[n].value
        if plain is None or gain is None or plain <= 0:
            return None
        return (1.0 - math.exp(-gain)) / plain

    def credit(self, epoch_id: int | None, tokens: int, sequence: object) -> None:
        """A round of `sequence` (any key: the policy of one generation) chosen in epoch `epoch_id` gave `tokens`."""
        for epoch in [self.epoch, *self.closed]:
            if epoch is not None and epoch.id == epoch_id:
                epoch.tokens += tokens
                epoch.credited_by.add(sequence)
                return

    def set_aside(self, seconds: float) -> None:
        """The pass about to end (after_pass) spent `seconds` on prompts (pass_cost.aside_seconds): no way's time."""
        if self.epoch is not None:
            self.epoch.prompts += seconds

    def catch_up(self, seconds: float) -> None:
        """A draft pass spent `seconds` catching the draft model up with text it did not see."""
        if self.epoch is not None:
            self.epoch.catch_up += seconds

    def after_pass(self, n: int, held_all: bool, now: float) -> None:
        """A target pass ended at `now` with n sequences joined; held_all: it held all of them
        (what it spent on prompts was told first: `set_aside`). Every round of a closed
        epoch ended by now, and the sequences that made them have since chosen again (which waits
        for their tokens to be counted): their rates are recorded."""
        for epoch in self.closed:
            self._record(epoch)
        self.closed = []
        if n >= 2:
            self._shared_until = now
        if now - self._last_pass > IDLE_SECONDS:
            self.epoch = None  # open across a time without passes (the last requests ended together): it measured nothing
        self._last_pass = now
        epoch = self.epoch
        if epoch is not None and (epoch.n != n or epoch.turns != self.turns):  # a sequence joined or left: dropped
            self.epoch = epoch = None
        if not held_all or n < 2:
            return
        if epoch is not None and epoch.seconds(now) < self.epoch_seconds:
            return
        if epoch is not None:
            self._close(epoch, now)
        self._ids += 1
        way, trying = self._next_way(n, begin=True)
        self.epoch = Epoch(self._ids, n, way, start=now, trying=trying, turns=self.turns)

    def report(self) -> dict[int, dict]:
        """Per batch size seen: the measured tokens per second drafting and not (None before an
        epoch was recorded), the epochs tried each way, the paired gain of drafting (a ratio), and
        whether the next epoch would draft."""
        out = {}
        for n in sorted({n for n, _ in self.tried}):
            on, off, gain = self.rates[n, True].value, self.rates[n, False].value, self.gain[n].value
            out[n] = {
                "drafting_tokens_per_s": None if on is None else round(on, 1),
                "plain_tokens_per_s": None if off is None else round(off, 1),
                "drafting_over_plain": None if gain is None else round(math.exp(gain), 3),
                "epochs": {"drafting": self.tried[n, True], "plain": self.tried[n, False]},
                "drafts_now": self.drafting(n)[0],
            }
        return out

    def _close(self, epoch: Epoch, now: float) -> None:
        epoch.end = now
        self.closed.append(epoch)
        self.tried[epoch.n, epoch.drafting] += 1
        self._seconds += epoch.seconds()

    def _record(self, epoch: Epoch) -> None:
        if len(epoch.credited_by) < epoch.n or epoch.tokens == 0:
            return  # some sequence's rounds are not counted (a fixed k, no drafter)
        self.rates[epoch.n, epoch.drafting].add(epoch.rate)
        last = self._last.get(epoch.n)
        if last is not None and epoch.start - last.end <= self.epoch_seconds and last.drafting != epoch.drafting:  # adjacent at this N
            on, off = (epoch, last) if epoch.drafting else (last, epoch)
            self.gain[epoch.n].add(math.log(on.rate / off.rate))
            slower, faster = (on, off) if on.rate < off.rate else (off, on)
            if slower.trying:
                self._tried_cost += slower.seconds() * (1.0 - slower.rate / faster.rate) + slower.catch_up
                slower.trying = False  # counted once, also where it pairs with both neighbours
        self._last[epoch.n] = epoch

    def _next_way(self, n: int, begin: bool) -> tuple[bool, bool]:
        """The way of an epoch that begins now at n (begin: it does; else only asked), and whether
        it tries that way (exploring, a probe) rather than runs it as the choice."""
        on, off = self.tried[n, True], self.tried[n, False]
        gain = self.gain[n].value
        loses_below = any(m < n and (g.value or 0.0) < 0 for m, g in self.gain.items())
        if (on < self.explore or off < self.explore) and not (loses_below and gain is None):
            return on <= off, True  # in turns, drafting first
        if gain is not None:
            best = gain > MARGIN
        elif loses_below:  # more sequences only make a draft dearer against a pass: start where a smaller batch ended
            best = False
        else:  # no two adjacent epochs recorded yet (joins between them): the ways' own rates
            best = (self.rates[n, True].value or 0.0) >= (self.rates[n, False].value or 0.0)
        if begin and self._probed_for.get(n, best) != best:  # the last probe turned the choice: probe often again
            self._probe_every[n], self._probed_for[n] = self.probe_every, best
        every = self._probe_every.get(n, self.probe_every)
        probe = self._chosen[n] + 1 >= every and self._tried_cost <= PROBE_SHARE * self._seconds
        if begin:
            self._chosen[n] = 0 if probe else self._chosen[n] + 1
            if probe:  # from the second probe on, each one that finds a clear choice as it was doubles the wait
                clear = n in self._probed_for and gain is not None and (abs(gain) >= CLEAR_GAIN or not best)
                self._probe_every[n] = min(2 * every, MAX_PROBE_EVERY) if clear else self.probe_every
                self._probed_for[n] = best
        return ((not best), True) if probe else (best, False)
