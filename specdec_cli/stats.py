"""Consuming a generation into counters and timings, and the speed-up model that explains them.

`consume` runs one generation (the engine's event stream) and folds it into an `Outcome`:
its `RunStats`, the numbers a user asks about (tokens per target pass, acceptance overall
and by draft position, where the time went), and the tokens and text. `run` and `bench`
both consume generations through it; `RunStats.merge` pools several runs.

The model is Leviathan et al. 2022, Theorem 3.8, with the verify cost measured instead of
assumed equal to one target step. With per-token acceptance alpha and k drafts a round
yields E = (1 - alpha^(k+1)) / (1 - alpha) tokens on average (k + 1 when alpha = 1), and

    speedup = E * T_target(1) / (k * T_draft + T_target(k + 1))

where T_target(n) is the time of one target batch of n tokens and T_draft one draft step.
Example: alpha = 0.8, k = 4, T_draft = 5 ms, T_target(1) = 12 ms, T_target(5) = 18 ms
-> E = 3.36, speedup = 3.36 * 12 / 38 = 1.06.

Left out: printing (cli/render.py) and measuring the cost curve (cost_curve.measure_cost_curve).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterator

from .cost_curve import CostCurve
from .events import Event, Finished, Prefill, Rejected, Round, Token


def expected_tokens_per_round(alpha: float, k: int) -> float:
    """E[tokens per round] under i.i.d. acceptance alpha (Leviathan et al. 2022, eq. 1)."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def predicted_speedup(alpha: float, k: int, draft_step: float, target_step: float, verify_batch: float) -> float:
    """Theorem 3.8 with a measured verify cost: time per token target-only / speculative."""
    if k == 0:
        return 1.0
    return expected_tokens_per_round(alpha, k) * target_step / (k * draft_step + verify_batch)


def predict(alpha: float, k: int, cost: CostCurve) -> float:
    """predicted_speedup from a measured cost curve, whose verify cost is T_target(k + 1)."""
    return predicted_speedup(alpha, k, cost.draft_step, cost.target_step, cost.target_batch[k])


def measured_speedup(run: "RunStats", baseline: "RunStats") -> float:
    """Speculative tokens/s over target-only tokens/s (0 when the baseline made no tokens)."""
    return run.tokens_per_second / baseline.tokens_per_second if baseline.tokens_per_second else 0.0


@dataclass
class RunStats:
    prompt_tokens: int = 0
    prefill_seconds: float = 0.0
    new_tokens: int = 0
    target_passes: int = 0
    rounds_with_draft: int = 0
    drafted: int = 0
    accepted: int = 0
    rejections: int = 0
    drafted_by_position: list[int] = field(default_factory=list)
    accepted_by_position: list[int] = field(default_factory=list)
    rounds_by_rule: dict[str, int] = field(default_factory=dict)  # drafting rounds by the rule that verified them (Round.rule)
    draft_seconds: float = 0.0
    draft_decode_seconds: float = 0.0
    verify_seconds: float = 0.0
    generation_seconds: float = 0.0
    finish_reason: str = ""

    def add(self, event: Event) -> None:
        if isinstance(event, Prefill):
            self.prompt_tokens = event.prompt_tokens
            self.prefill_seconds = event.seconds
        elif isinstance(event, Token):
            self.new_tokens += 1
        elif isinstance(event, Round):
            self.target_passes += 1
            self.generation_seconds += event.seconds
            self.draft_seconds += event.draft_seconds
            self.draft_decode_seconds += event.draft_decode_seconds
            self.verify_seconds += event.verify_seconds
            if event.drafted:
                self.rounds_with_draft += 1
                self.drafted += event.drafted
                self.accepted += event.accepted
                self.rejections += event.accepted < event.drafted
                self.rounds_by_rule[event.rule] = self.rounds_by_rule.get(event.rule, 0) + 1
                self._grow(event.drafted)
                for i in range(event.drafted):
                    self.drafted_by_position[i] += i <= event.accepted  # position i+1 was tried
                    self.accepted_by_position[i] += i < event.accepted
        elif isinstance(event, Finished):
            self.finish_reason = event.reason
        elif isinstance(event, Rejected):
            pass

    def _grow(self, k: int) -> None:
        while len(self.drafted_by_position) < k:
            self.drafted_by_position.append(0)
            self.accepted_by_position.append(0)

    def merge(self, other: "RunStats") -> "RunStats":
        """Both runs' counters and timings summed, as if they were one run (prompt and finish
        reason are per run, and stay out). Example: 10 + 12 new tokens -> 22."""
        out = RunStats()
        for name in ("new_tokens", "target_passes", "rounds_with_draft", "drafted", "accepted", "rejections"):
            setattr(out, name, getattr(self, name) + getattr(other, name))
        for name in ("draft_seconds", "draft_decode_seconds", "verify_seconds", "generation_seconds"):
            setattr(out, name, getattr(self, name) + getattr(other, name))
        for s in (self, other):
            for rule, rounds in s.rounds_by_rule.items():
                out.rounds_by_rule[rule] = out.rounds_by_rule.get(rule, 0) + rounds
            out._grow(len(s.drafted_by_position))
            for i, (d, a) in enumerate(zip(s.drafted_by_position, s.accepted_by_position)):
                out.drafted_by_position[i] += d
                out.accepted_by_position[i] += a
        return out

    # -- derived ----------------------------------------------------------------------

    @property
    def acceptance_rate(self) -> float:
        """Accepted draft tokens over drafted ones (drafts after a rejection count as drafted)."""
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def alpha(self) -> float:
        """Per-token acceptance as Leviathan et al. define it: each draft is a trial until the first rejection."""
        trials = self.accepted + self.rejections
        return self.accepted / trials if trials else 0.0

    @property
    def acceptance_by_position(self) -> list[float]:
        """P(draft i accepted | drafts 1..i-1 accepted), for i = 1..k."""
        return [a / d if d else 0.0 for a, d in zip(self.accepted_by_position, self.drafted_by_position)]

    @property
    def mean_accepted(self) -> float:
        return self.accepted / self.rounds_with_draft if self.rounds_with_draft else 0.0

    @property
    def mean_k(self) -> float:
        """Drafted tokens per target pass, plain steps counting 0 (NaN before any pass).
        Example: 3 rounds drafting 4, 4, 0 -> 2.67."""
        return self.drafted / self.target_passes if self.target_passes else math.nan

    @property
    def tokens_per_pass(self) -> float:
        return self.new_tokens / self.target_passes if self.target_passes else 0.0

    @property
    def tokens_per_second(self) -> float:
        """Generation speed, prefill excluded (as llama.cpp reports eval speed)."""
        return self.new_tokens / self.generation_seconds if self.generation_seconds else 0.0

    @property
    def other_seconds(self) -> float:
        return max(self.generation_seconds - self.draft_seconds - self.verify_seconds, 0.0)

    @property
    def python_share(self) -> float:
        """Share of generation time spent outside llama.cpp's decode calls (sampling, Python)."""
        if not self.generation_seconds:
            return 0.0
        inside = self.draft_decode_seconds + self.verify_seconds
        return max(self.generation_seconds - inside, 0.0) / self.generation_seconds

    def to_dict(self) -> dict:
        out = asdict(self)
        for name in ("acceptance_rate", "alpha", "acceptance_by_position", "mean_accepted", "tokens_per_pass", "tokens_per_second", "python_share"):
            out[name] = getattr(self, name)
        return out


@dataclass
class Outcome:
    """What one generation left behind, also when Ctrl-C cut it short."""

    stats: RunStats
    tokens: list[int] = field(default_factory=list)  # the ids of the Token events
    text: str = ""  # their text, joined
    wall_seconds: float = 0.0  # the whole call, prefill and Python included

    @property
    def interrupted(self) -> bool:
        return self.stats.finish_reason == "interrupted"


def consume(events: Iterator[Event], on_event: Callable[[Event], None] | None = None) -> Outcome:
    """Run a generation (the engine's event generator) to its end, or to Ctrl-C, and fold it.

    Every event goes to `on_event` too (a renderer). Ctrl-C ends the run with finish reason
    "interrupted"; the generator is closed in a `finally` either way, so the engine rolls its
    caches back now, not at garbage collection.
    """
    outcome = Outcome(RunStats())
    pieces = []
    start = time.perf_counter()
    try:
        for event in events:
            outcome.stats.add(event)
            if isinstance(event, Token):
                outcome.tokens.append(event.id)
                pieces.append(event.text)
            if on_event is not None:
                on_event(event)
    except KeyboardInterrupt:
        outcome.stats.finish_reason = "interrupted"
    finally:
        events.close()
        outcome.text = "".join(pieces)
        outcome.wall_seconds = time.perf_counter() - start
    return outcome
