"""The bench's data model: its configuration, the planned runs, their records and results.

Plain dataclasses, filled by bench/run.py (running), bench/stats.py (analysis) and read by
bench/output.py (CSV, JSON) and bench/render.py (tables, plot). A `Setting` is one point of
the sweep, e.g. Setting("story", temperature=0.0, k=4, drafter="model"); a `Step` is one run
of it (repeat r, mode A = TARGET or B = SPECULATIVE, or C = NATIVE, llama.cpp's binary).

Left out: everything that measures, analyses, writes or formats (the modules above); the
defaults of the sweep and option parsing (cli/options.py).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Callable, Iterable, Protocol, Sequence

from ..causal_model import CausalModel
from ..decoding.engine import Engine, GenerationConfig
from ..decoding.stats import RunStats
from ..drafting.lookup import LookupOptions
from ..events import AUTO, DraftTokens
from ..grammar.compile import Grammar
from ..maths.sampling import SamplingParams
from ..options import DEFAULT_VERIFY
from ..prompts import Prompt
from ..tuning.cost_curve import CostCurve
from .native import NativeResult

# The bench's default sweep: 7 prompts x 2 temperatures x 2 drafters x 5 k x (A, B) = 280
# runs a repeat, two repeats. k = 1 is left out: on a CPU, where a round's overhead is paid
# per token, it is rarely the best.
DEFAULT_DRAFT_TOKENS: tuple[DraftTokens, ...] = (2, 4, 8, 12, AUTO)
DEFAULT_DRAFTERS: tuple[str, ...] = ("model", "lookup")
DEFAULT_TEMPERATURES: tuple[float, ...] = (0.0, 0.7)
DEFAULT_REPEATS = 2

TARGET, SPECULATIVE, NATIVE = "target", "speculative", "native"


class Pair(Protocol):
    """What the bench needs from session.LoadedPair (tests pass a pair of fake models)."""

    target: CausalModel
    draft: CausalModel | None

    def prompt_tokens(self, prompt: str, *, chat: bool = True) -> list[int]: ...

    def draft_context(self, context: Sequence[int]) -> list[int]: ...

    def engine(self, speculative: bool = True, drafter: str = "model", lookup: LookupOptions = LookupOptions()) -> Engine: ...


ProgressCallback = Callable[[int, int, str], None]  # (done, total, what just finished)
NativeRunner = Callable[[Prompt, "Setting"], NativeResult]


@dataclass(frozen=True)
class BenchConfig:
    draft_tokens: tuple[DraftTokens, ...] = DEFAULT_DRAFT_TOKENS  # numbers and/or "auto"
    drafters: tuple[str, ...] = DEFAULT_DRAFTERS  # "model", "lookup", "model+lookup"
    temperatures: tuple[float, ...] = DEFAULT_TEMPERATURES
    max_tokens: int = 128
    repeats: int = DEFAULT_REPEATS
    seed: int = 0  # repeat r uses seed + r, the same for A and B
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    chat: bool = True  # wrap prompts in the target's chat template
    cost_repeats: int = 3  # timings per batch size inside one cost-curve measurement
    warmup_tokens: int = 16  # one unrecorded A and B run first (0: none)
    verify: str = DEFAULT_VERIFY  # the rule B keeps drafts by (options.VERIFY_RULES)
    grammar: Grammar | None = None  # a constraint on every run, A and B alike (--json-schema, --grammar)

    @property
    def fixed_k(self) -> tuple[int, ...]:
        return tuple(k for k in self.draft_tokens if k != AUTO)

    @property
    def max_batch(self) -> int:
        """The largest target batch a fixed k scores (k + 1): the cost curve's length."""
        return max(self.fixed_k, default=1) + 1

    @property
    def lookup(self) -> LookupOptions:
        """Lookup proposals as long as the largest fixed k, so that k (not the cap) decides."""
        return LookupOptions(max_tokens=max(self.fixed_k + (LookupOptions().max_tokens,)))

    def generation(self, temperature: float, repeat: int) -> GenerationConfig:
        sampling = SamplingParams(temperature=temperature, top_k=self.top_k, top_p=self.top_p, min_p=self.min_p)
        return GenerationConfig(max_tokens=self.max_tokens, sampling=sampling, seed=self.seed + repeat, verify=self.verify, grammar=self.grammar)


@dataclass(frozen=True)
class Setting:
    prompt: str  # Prompt.name
    temperature: float
    k: DraftTokens  # a number, or "auto"
    drafter: str = "model"  # who drafts on the speculative side


@dataclass(frozen=True)
class Step:
    """One planned run."""

    repeat: int
    setting: Setting
    mode: str  # TARGET, SPECULATIVE or NATIVE


@dataclass
class RunRecord:
    step: Step
    new_tokens: int
    generation_seconds: float  # as RunStats counts it (prefill excluded); llama.cpp's own for NATIVE
    wall_seconds: float  # the whole call, prefill and Python included
    tokens_per_second: float
    stats: RunStats | None = None  # None for NATIVE
    tokens: tuple[int, ...] = ()
    native: NativeResult | None = None
    divergence: int | None = None  # SPECULATIVE at temperature 0: first position differing from A


@dataclass(frozen=True)
class Spread:
    median: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, values: Iterable[float]) -> "Spread | None":
        values = [v for v in values if v is not None and math.isfinite(v)]
        if not values:
            return None
        return cls(statistics.median(values), min(values), max(values), len(values))


@dataclass(frozen=True)
class Divergence:
    """Speculative output that differs from target-only output at temperature 0."""

    setting: Setting
    repeat: int
    position: int  # 0-based index into the generated tokens
    target_token: int | None  # None: target-only output ended here
    speculative_token: int | None
    target_text: str = ""
    speculative_text: str = ""



@dataclass
class SettingResult:
    setting: Setting
    target_tps: Spread
    speculative_tps: Spread
    speedup: Spread  # per repeat: B's tokens/s over A's in the same repeat
    acceptance_rate: float
    alpha: float
    acceptance_by_position: list[float]
    mean_accepted: float
    mean_k: float  # drafted tokens per target pass (plain steps count 0): the length auto chose
    python_share: float  # median over B runs (decoding/stats.RunStats.python_share)
    draft_step: float  # seconds, from the prompt's cost curve: the inputs of the prediction
    target_step: float  # T(1)
    verify_batch: float  # T(k + 1); NaN when k is auto
    predicted_speedup: float  # NaN unless the model drafter at a fixed k (see the module docstring)
    native_tps: Spread | None = None
    native_acceptance: float | None = None
    divergences: list[Divergence] = field(default_factory=list)

    @property
    def measured_over_predicted(self) -> float:
        return self.speedup.median / self.predicted_speedup if self.predicted_speedup else float("nan")


@dataclass
class SummaryRow:
    """One (temperature, drafter, k) over all prompts."""

    temperature: float
    drafter: str
    k: DraftTokens
    speedup: float  # geometric mean of the per-prompt median speed-ups
    speedup_low: float  # the lowest and highest per-prompt median
    speedup_high: float
    predicted_speedup: float  # geometric mean of the per-prompt predictions
    target_tps: float  # median of the per-prompt medians
    speculative_tps: float
    acceptance_rate: float  # pooled over prompts and repeats
    alpha: float
    acceptance_by_position: list[float]
    mean_accepted: float
    mean_k: float = float("nan")
    native_tps: float | None = None
    divergences: int = 0


@dataclass(frozen=True)
class Recommendation:
    drafter: str
    k: DraftTokens
    worthwhile: bool  # the best (drafter, k) beats target-only decoding
    speedups: dict[float, float]  # temperature -> measured speed-up at k
    predicted: dict[float, float]  # (bench.render.recommendation_line says it in words)


@dataclass
class BenchReport:
    config: BenchConfig
    prompts: list[Prompt]
    models: dict
    runs: list[RunRecord]
    cost_curves: dict[str, CostCurve]  # prompt name -> medians over repeats
    results: list[SettingResult]
    summary: list[SummaryRow]
    recommendation: Recommendation
    seconds: float = 0.0

    @property
    def divergences(self) -> list[Divergence]:
        return [d for r in self.results for d in r.divergences]
