"""A generation's counters and timings (`RunStats`): what a user asks about a run.

Tokens per target pass, acceptance overall and by draft position, where the time went.
`run` and `bench` both fold generations into it (consume.py); `RunStats.merge` pools several runs:

    stats = RunStats(); stats.add(event) for each event  ->  stats.tokens_per_pass, stats.alpha

Left out: running the generation (consume.py), the speed-up model (tuning/speedup.py), printing
(cli/render.py).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from ..events import Event, Finished, Prefill, Rejected, Round, Source, Token


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
    forced: int = 0  # tokens a constraint forced (Token events of Source.FORCED): free drafts, never in drafted
    grammar_seconds: float = 0.0  # computing the constraint's masks
    finish_reason: str = ""

    def add(self, event: Event) -> None:
        if isinstance(event, Prefill):
            self.prompt_tokens = event.prompt_tokens
            self.prefill_seconds = event.seconds
        elif isinstance(event, Token):
            self.new_tokens += 1
            self.forced += event.source is Source.FORCED
        elif isinstance(event, Round):
            self.target_passes += 1
            self.generation_seconds += event.seconds
            self.draft_seconds += event.draft_seconds
            self.draft_decode_seconds += event.draft_decode_seconds
            self.verify_seconds += event.target_seconds
            self.grammar_seconds += event.grammar_seconds
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
        for name in ("new_tokens", "target_passes", "rounds_with_draft", "drafted", "accepted", "rejections", "forced"):
            setattr(out, name, getattr(self, name) + getattr(other, name))
        for name in ("draft_seconds", "draft_decode_seconds", "verify_seconds", "generation_seconds", "grammar_seconds"):
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
