"""The honest A/B: target-only against speculative decoding on the same loaded models.

For every setting (prompt, temperature, k) the bench decodes the prompt target-only (A) and
speculatively (B) with the same sampling settings, seed and token budget, one right after
the other, and repeats the whole sweep `repeats` times: A B A B ..., so that drift on a
noisy machine (thermal limits, another process) hits both sides and every k alike. Each
run is folded into a `stats.RunStats`; the bench reports per setting:

- tokens/s both ways (median, min, max) and the speed-up, taken per A/B pair, then the median;
- acceptance overall and by draft position, alpha, and the mean accepted length (pooled);
- the target's measured cost curve (one batch of n = 1..k+1 tokens) and a draft step
  (cost_curve.measure_cost_curve, once per prompt and repeat, medians), and from it the speed-up
  that Leviathan et al. 2022, Theorem 3.8, predicts with the run's own alpha
  (stats.predicted_speedup), to be read next to the measured one;
- at temperature 0, the position of any token where B's output differs from A's (exactness).

k is a number or "auto" (policy.AdaptivePolicy chooses each round's length); B drafts with
each of `drafters`: "model" (the draft GGUF), "lookup" (prompt lookup, no draft model) or
"model+lookup". Every (drafter, k) is a setting like any other, with its own A right
before its B. Theorem 3.8 assumes k drafts every round, so the prediction is given only for
the model drafter at a fixed k; `auto` (k varies per round) and lookup (drafts only when the
context repeats itself) show NaN there, and `mean_k`, the drafts per target pass actually
made, says how long their drafts were.

Across prompts it summarises each (temperature, drafter, k) by the geometric mean of the
per-prompt speed-ups and recommends the (drafter, k) with the best mean over temperatures. Worked example: at
k = 4, repeats give A = 40, 42, 41 tokens/s and B = 60, 58, 66 tokens/s; the paired speed-ups
are 1.50, 1.38, 1.61, so the setting reports 1.50x (1.38-1.61). With alpha = 0.8, a draft step
of 5 ms and target batches of 12 ms (n = 1) and 18 ms (n = 5) the prediction is
3.36 * 12 / (4 * 5 + 18) = 1.06x.

    report = run_bench(pair, builtin_prompts(), BenchConfig(draft_tokens=(2, 4)), progress=cb)
    report.recommendation.line   # "best: --drafter model --draft-tokens 4: 1.50x at T=0 (predicted 1.06x)"

Nothing here prints: progress goes to the `progress` callback, results to the caller.
Left out: tables and plots (render_bench.py), options (cli.py), llama.cpp's own binary
(native.py, reached through the `native` callback).
"""

from __future__ import annotations

import csv
import functools
import math
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable, Protocol, Sequence, TextIO

from .drafters import CausalModel
from .cost_curve import CostCurve, measure_cost_curve
from .engine import Engine, GenerationConfig
from .events import AUTO, DraftTokens
from .drafters import LookupOptions
from .errors import BadInput
from .native import NativeResult
from .prompts import Prompt
from .sampling import SamplingParams
from .policy import draft_policy
from .stats import Outcome, RunStats, consume, predict

TARGET, SPECULATIVE, NATIVE = "target", "speculative", "native"
SCHEMA = "specdec-bench/2"  # 2: settings carry a drafter, and k may be "auto"
MAX_DRAFT_TOKENS = 64
# The default sweep: 7 prompts x 2 temperatures x 2 drafters x 5 k x (A, B) = 280 runs a repeat,
# about 1.5 s each at 128 tokens on the 2-core machine with the built-in pair (7 min). Three
# repeats would take 21 min, so the default is two (14 min), and k = 1 (never the best on CPU,
# where a round's overhead is paid per token) is left out.
DEFAULT_DRAFT_TOKENS: tuple[DraftTokens, ...] = (2, 4, 8, 12, AUTO)
DEFAULT_DRAFTERS: tuple[str, ...] = ("model", "lookup")
DEFAULT_REPEATS = 2
BENCH_DRAFTERS = ("model", "lookup", "model+lookup")


class Pair(Protocol):
    """What the bench needs from session.LoadedPair (tests pass a pair of fake models)."""

    target: CausalModel
    draft: CausalModel | None

    def prompt_tokens(self, prompt: str, *, chat: bool = True) -> list[int]: ...

    def engine(self, speculative: bool = True, drafter: str = "model", lookup: LookupOptions = LookupOptions()) -> Engine: ...


ProgressCallback = Callable[[int, int, str], None]  # (done, total, what just finished)
NativeRunner = Callable[[Prompt, "Setting"], NativeResult]


@dataclass(frozen=True)
class BenchConfig:
    draft_tokens: tuple[DraftTokens, ...] = DEFAULT_DRAFT_TOKENS  # numbers and/or "auto"
    drafters: tuple[str, ...] = DEFAULT_DRAFTERS  # "model", "lookup", "model+lookup"
    temperatures: tuple[float, ...] = (0.0, 0.7)
    max_tokens: int = 128
    repeats: int = DEFAULT_REPEATS
    seed: int = 0  # repeat r uses seed + r, the same for A and B
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    chat: bool = True  # wrap prompts in the target's chat template
    cost_repeats: int = 3  # timings per batch size inside one cost-curve measurement
    warmup_tokens: int = 16  # one unrecorded A and B run first (0: none)

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
        return GenerationConfig(max_tokens=self.max_tokens, sampling=sampling, seed=self.seed + repeat)


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

    def message(self) -> str:
        s = self.setting
        return (
            f"prompt {s.prompt!r}, drafter {s.drafter}, k={s.k}, repeat {self.repeat + 1}: speculative output differs from "
            f"target-only at generated token {self.position} (0-based): "
            f"target {_describe(self.target_token, self.target_text)}, "
            f"speculative {_describe(self.speculative_token, self.speculative_text)}"
        )


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
    python_share: float  # median over B runs (stats.RunStats.python_share)
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
    predicted: dict[float, float]
    line: str


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

    def to_dict(self) -> dict:
        return _finite(
            {
                "schema": SCHEMA,
                "config": asdict(self.config),
                "models": self.models,
                "prompts": [asdict(p) for p in self.prompts],
                "seconds": self.seconds,
                "exact": not self.divergences,
                "recommendation": asdict(self.recommendation),
                "summary": [asdict(row) for row in self.summary],
                "results": [_result_dict(r) for r in self.results],
                "cost_curves": {
                    name: {"draft_step": c.draft_step, "target_batch": list(c.target_batch)} for name, c in self.cost_curves.items()
                },
                "divergences": [asdict(d) for d in self.divergences],
                "runs": [_run_dict(run) for run in self.runs],
            }
        )


# -- options ----------------------------------------------------------------------------


def parse_draft_tokens(text: str) -> tuple[DraftTokens, ...]:
    """'auto,4,1,2' -> (1, 2, 4, 'auto'): numbers sorted, then auto; without repeats, each in 1..64."""
    items = [v.lower() for v in _items(text)]
    try:
        values: list[DraftTokens] = sorted({int(v) for v in items if v != AUTO})
    except ValueError:
        raise BadInput(f"--draft-tokens takes a comma-separated list of whole numbers and/or auto, such as 1,2,4,8,auto, got {text!r}") from None
    if not items or not all(1 <= v <= MAX_DRAFT_TOKENS for v in values):
        raise BadInput(f"--draft-tokens values must be between 1 and {MAX_DRAFT_TOKENS} (or auto), got {text!r}")
    return tuple(values) + ((AUTO,) if AUTO in items else ())


def parse_drafters(text: str) -> tuple[str, ...]:
    """'lookup,model' -> ('lookup', 'model'): in the order given, without repeats."""
    values = list(dict.fromkeys(v.lower() for v in _items(text)))
    unknown = [v for v in values if v not in BENCH_DRAFTERS]
    if not values or unknown:
        raise BadInput(f"--drafter takes a comma-separated list of {', '.join(BENCH_DRAFTERS)}, got {text!r}")
    return tuple(values)


def parse_temperatures(text: str) -> tuple[float, ...]:
    """'0,0.7' -> (0.0, 0.7): in the order given, without repeats, each 0 or more."""
    try:
        values = list(dict.fromkeys(float(v) for v in _items(text)))
    except ValueError:
        raise BadInput(f"--temperature takes a comma-separated list of numbers such as 0,0.7, got {text!r}") from None
    if not values or not all(math.isfinite(v) and v >= 0 for v in values):
        raise BadInput(f"--temperature values must be 0 (greedy) or more, got {text!r}")
    return tuple(values)


def _items(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


# -- the measurement ----------------------------------------------------------------------


def plan(prompts: Sequence[str], config: BenchConfig, native: bool = False) -> list[Step]:
    """Every run in the order it happens: repeats outermost, then prompt, temperature, drafter, k, and A B (C).

    llama.cpp's binary (C) only runs the model drafter at a fixed k, the only thing it can do.
    """
    return [
        Step(repeat, Setting(prompt, temperature, k, drafter), mode)
        for repeat in range(config.repeats)
        for prompt in prompts
        for temperature in config.temperatures
        for drafter in config.drafters
        for k in config.draft_tokens
        for mode in (TARGET, SPECULATIVE) + ((NATIVE,) if native and drafter == "model" and k != AUTO else ())
    ]


def decode_once(engine: Engine, prompt_ids: Sequence[int], config: GenerationConfig, k: DraftTokens) -> Outcome:
    """One generation at draft length k (a number or AUTO), folded by stats.consume; Ctrl-C ends the bench."""
    outcome = consume(engine.generate(prompt_ids, config, draft_policy(k)))
    if outcome.interrupted:
        raise KeyboardInterrupt
    return outcome


def run_bench(
    pair: Pair,
    prompts: Sequence[Prompt],
    config: BenchConfig,
    *,
    progress: ProgressCallback | None = None,
    native: NativeRunner | None = None,
    models: dict | None = None,
) -> BenchReport:
    """Measure every planned run on `pair` (models loaded once) and analyse them."""
    assert pair.draft is not None or config.drafters == ("lookup",), "the model drafters need a draft model"
    assert config.repeats >= 1 and config.draft_tokens and config.temperatures and config.drafters
    started = time.perf_counter()
    by_name = {p.name: p for p in prompts}
    assert len(by_name) == len(prompts), "prompt names must be unique"
    ids = {p.name: pair.prompt_tokens(p.text, chat=config.chat) for p in prompts}
    engines = {TARGET: pair.engine(speculative=False)}
    for drafter in config.drafters:
        engines[drafter] = pair.engine(speculative=True, drafter=drafter, lookup=config.lookup)
    steps = plan(list(by_name), config, native=native is not None)
    max_batch = config.max_batch
    warmup = 2 if config.warmup_tokens > 0 else 0
    total = warmup + config.repeats * len(prompts) + len(steps)
    done = 0

    def advance(label: str) -> None:
        nonlocal done
        done += 1
        if progress:
            progress(done, total, label)

    if warmup:
        first = prompts[0].name
        warm = GenerationConfig(
            max_tokens=min(config.warmup_tokens, config.max_tokens),
            sampling=config.generation(config.temperatures[0], 0).sampling,
            seed=config.seed,
        )
        for mode, engine in ((TARGET, engines[TARGET]), (SPECULATIVE, engines[config.drafters[0]])):
            decode_once(engine, ids[first], warm, max(config.fixed_k, default=AUTO))
            advance(f"warm-up ({mode})")

    curves: dict[str, list[CostCurve]] = {p.name: [] for p in prompts}
    runs: list[RunRecord] = []
    last_a: dict[tuple[int, Setting], RunRecord] = {}
    measured: set[tuple[int, str]] = set()
    for step in steps:
        name = step.setting.prompt
        if (step.repeat, name) not in measured:
            measured.add((step.repeat, name))
            curves[name].append(measure_cost_curve(pair.target, pair.draft, ids[name], max_batch, config.cost_repeats))
            advance(f"cost curve, {name} (repeat {step.repeat + 1}/{config.repeats})")
        record = _run_step(step, engines, ids[name], by_name[name], config, native)
        if step.mode == TARGET:
            last_a[(step.repeat, step.setting)] = record
        elif step.mode == SPECULATIVE and step.setting.temperature == 0:
            record.divergence = first_divergence(last_a[(step.repeat, step.setting)].tokens, record.tokens)
        runs.append(record)
        s = step.setting
        advance(f"{name} T={s.temperature:g} {s.drafter} k={s.k} {step.mode} (repeat {step.repeat + 1}/{config.repeats})")

    cost = {name: median_curve(c) for name, c in curves.items()}
    piece = engines[TARGET].piece
    results = analyse(runs, cost, config, [p.name for p in prompts], piece)
    summary = summarise(results, runs, config)
    return BenchReport(
        config=config,
        prompts=list(prompts),
        models=models or {},
        runs=runs,
        cost_curves=cost,
        results=results,
        summary=summary,
        recommendation=recommend(summary),
        seconds=time.perf_counter() - started,
    )


def _run_step(
    step: Step, engines: dict[str, Engine], prompt_ids: list[int], prompt: Prompt, config: BenchConfig, native: NativeRunner | None
) -> RunRecord:
    if step.mode == NATIVE:
        assert native is not None
        t0 = time.perf_counter()
        result = native(prompt, step.setting)
        return RunRecord(
            step=step,
            new_tokens=result.decoded_tokens,
            generation_seconds=result.seconds,
            wall_seconds=time.perf_counter() - t0,
            tokens_per_second=result.tokens_per_second,
            native=result,
        )
    s = step.setting
    engine = engines[TARGET] if step.mode == TARGET else engines[s.drafter]
    outcome = decode_once(engine, prompt_ids, config.generation(s.temperature, step.repeat), s.k)
    return RunRecord(
        step=step,
        new_tokens=outcome.stats.new_tokens,
        generation_seconds=outcome.stats.generation_seconds,
        wall_seconds=outcome.wall_seconds,
        tokens_per_second=outcome.stats.tokens_per_second,
        stats=outcome.stats,
        tokens=tuple(outcome.tokens),
    )


# -- the analysis ---------------------------------------------------------------------------


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """First index where two outputs differ (a length difference counts); None if equal.

    Example: [5, 6, 7], [5, 6, 9] -> 2; [5, 6], [5, 6, 7] -> 2; [5], [5] -> None.
    """
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def median_curve(curves: Sequence[CostCurve]) -> CostCurve:
    """Element-wise median of several measurements of the same cost curve."""
    assert curves, "at least one cost curve"
    return CostCurve(
        draft_step=statistics.median(c.draft_step for c in curves),
        target_batch=tuple(statistics.median(col) for col in zip(*(c.target_batch for c in curves))),
    )


def predictable(setting: Setting) -> bool:
    """Theorem 3.8 assumes k drafts from a draft model every round: the model drafter at a fixed k."""
    return setting.drafter == "model" and setting.k != AUTO


def pool(stats: Iterable[RunStats]) -> RunStats:
    """Several runs' counters and timings summed, as if they were one run (RunStats.merge)."""
    return functools.reduce(RunStats.merge, stats, RunStats())


def _median(values: Iterable[float]) -> float:
    values = list(values)
    return statistics.median(values) if values else float("nan")


def geometric_mean(values: Iterable[float]) -> float:
    values = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")


def analyse(
    runs: Sequence[RunRecord],
    cost: dict[str, CostCurve],
    config: BenchConfig,
    prompt_order: Sequence[str],
    piece: Callable[[int], bytes] | None = None,
) -> list[SettingResult]:
    """One SettingResult per (prompt, temperature, drafter, k), in the order of the sweep."""
    groups: dict[Setting, dict[str, list[RunRecord]]] = {}
    for run in runs:
        groups.setdefault(run.step.setting, {}).setdefault(run.step.mode, []).append(run)
    results = []
    for prompt in prompt_order:
        for temperature in config.temperatures:
            for setting in (Setting(prompt, temperature, k, d) for d in config.drafters for k in config.draft_tokens):
                if setting in groups:
                    results.append(_setting_result(setting, groups[setting], cost[prompt], piece))
    return results


def _setting_result(setting: Setting, modes: dict[str, list[RunRecord]], cost: CostCurve, piece) -> SettingResult:
    a_runs, b_runs = modes.get(TARGET, []), modes.get(SPECULATIVE, [])
    a_by_repeat = {r.step.repeat: r for r in a_runs}
    # Paired: each B is divided by the A that ran right before it, in the same repeat.
    pairs = [(a_by_repeat[b.step.repeat], b) for b in b_runs if b.step.repeat in a_by_repeat]
    ratios = [b.tokens_per_second / a.tokens_per_second for a, b in pairs if a.tokens_per_second > 0]
    pooled = pool(b.stats for b in b_runs)
    natives = modes.get(NATIVE, [])
    native_drafted = sum(r.native.n_drafted or 0 for r in natives)
    native_accepted = sum(r.native.n_accept or 0 for r in natives)
    divergences = []
    for b in b_runs:
        if b.divergence is not None:
            a = a_by_repeat[b.step.repeat]
            divergences.append(_divergence(setting, b.step.repeat, b.divergence, a.tokens, b.tokens, piece))
    return SettingResult(
        setting=setting,
        target_tps=Spread.of(r.tokens_per_second for r in a_runs),
        speculative_tps=Spread.of(r.tokens_per_second for r in b_runs),
        speedup=Spread.of(ratios),
        acceptance_rate=pooled.acceptance_rate,
        alpha=pooled.alpha,
        acceptance_by_position=pooled.acceptance_by_position,
        mean_accepted=pooled.mean_accepted,
        mean_k=pooled.mean_k,
        python_share=_median(b.stats.python_share for b in b_runs),
        draft_step=cost.draft_step,
        target_step=cost.target_step,
        verify_batch=cost.target_batch[setting.k] if setting.k != AUTO else math.nan,
        predicted_speedup=predict(pooled.alpha, setting.k, cost) if predictable(setting) else math.nan,
        native_tps=Spread.of(r.tokens_per_second for r in natives),
        native_acceptance=native_accepted / native_drafted if native_drafted else None,
        divergences=divergences,
    )


def _divergence(setting: Setting, repeat: int, position: int, a: Sequence[int], b: Sequence[int], piece) -> Divergence:
    x = a[position] if position < len(a) else None
    y = b[position] if position < len(b) else None

    def text(token: int | None) -> str:
        return piece(token).decode("utf-8", "replace") if (piece and token is not None) else ""

    return Divergence(setting, repeat, position, x, y, text(x), text(y))


def summarise(results: Sequence[SettingResult], runs: Sequence[RunRecord], config: BenchConfig) -> list[SummaryRow]:
    """One row per (temperature, drafter, k) over all prompts."""
    rows = []
    for temperature, drafter, k in ((t, d, k) for t in config.temperatures for d in config.drafters for k in config.draft_tokens):

        def same(s: Setting) -> bool:
            return s.temperature == temperature and s.drafter == drafter and s.k == k

        group = [r for r in results if same(r.setting)]
        if not group:
            continue
        pooled = pool(run.stats for run in runs if run.step.mode == SPECULATIVE and same(run.step.setting))
        medians = [r.speedup.median for r in group if r.speedup]
        natives = [r.native_tps.median for r in group if r.native_tps]
        rows.append(
            SummaryRow(
                temperature=temperature,
                drafter=drafter,
                k=k,
                speedup=geometric_mean(medians),
                speedup_low=min(medians, default=float("nan")),
                speedup_high=max(medians, default=float("nan")),
                predicted_speedup=geometric_mean(r.predicted_speedup for r in group),
                target_tps=_median(r.target_tps.median for r in group if r.target_tps),
                speculative_tps=_median(r.speculative_tps.median for r in group if r.speculative_tps),
                acceptance_rate=pooled.acceptance_rate,
                alpha=pooled.alpha,
                acceptance_by_position=pooled.acceptance_by_position,
                mean_accepted=pooled.mean_accepted,
                mean_k=pooled.mean_k,
                native_tps=_median(natives) if natives else None,
                divergences=sum(len(r.divergences) for r in group),
            )
        )
    return rows


def _k_order(k: DraftTokens) -> tuple[int, int]:
    """Numbers in order, then auto. Example: sorted([auto, 4, 2], key=_k_order) -> [2, 4, auto]."""
    return (1, 0) if k == AUTO else (0, int(k))


def recommend(summary: Sequence[SummaryRow]) -> Recommendation:
    """The (drafter, k) whose speed-ups, geometric mean over temperatures, are best.

    Ties go to the drafter listed first, then the smaller k (auto after every number).
    """
    by_setting: dict[tuple[str, DraftTokens], list[SummaryRow]] = {}
    for row in summary:
        by_setting.setdefault((row.drafter, row.k), []).append(row)
    assert by_setting, "nothing to recommend from"
    drafters = list(dict.fromkeys(row.drafter for row in summary))
    order = sorted(by_setting, key=lambda key: (drafters.index(key[0]), _k_order(key[1])))
    best, best_score = None, -math.inf
    for key in order:
        score = geometric_mean(row.speedup for row in by_setting[key])
        if math.isfinite(score) and score > best_score:
            best, best_score = key, score
    if best is None:
        drafter, k = order[0]
        return Recommendation(drafter, k, False, {}, {}, "no speed-up could be measured (every run produced no tokens?)")
    drafter, k = best
    rows = by_setting[best]
    speedups = {row.temperature: row.speedup for row in rows}
    predicted = {row.temperature: row.predicted_speedup for row in rows}
    detail = ", ".join(f"{row.speedup:.2f}x at T={row.temperature:g}{_predicted_note(row)}" for row in rows)
    worthwhile = best_score > 1.0
    options = f"--drafter {drafter} --draft-tokens {k}"
    if worthwhile:
        line = f"best: {options}: {detail}"
    else:
        line = f"no drafter and k beats target-only decoding for this pair on this machine (best: {options}, {detail}); decode target-only"
    return Recommendation(drafter, k, worthwhile, speedups, predicted, line)


def _predicted_note(row: SummaryRow) -> str:
    return f" (predicted {row.predicted_speedup:.2f}x)" if math.isfinite(row.predicted_speedup) else ""


# -- writing ------------------------------------------------------------------------------

CSV_COLUMNS = (
    "repeat",
    "prompt",
    "temperature",
    "drafter",
    "k",
    "mode",
    "new_tokens",
    "generation_seconds",
    "wall_seconds",
    "tokens_per_second",
    "target_passes",
    "drafted",
    "accepted",
    "acceptance_rate",
    "alpha",
    "mean_accepted",
    "mean_k",
    "python_share",
    "finish_reason",
    "divergence_position",
)


def csv_rows(report: BenchReport) -> list[dict]:
    """One row per run (every measurement), with the columns of CSV_COLUMNS."""
    rows = []
    for run in report.runs:
        s, stats, nat = run.step.setting, run.stats, run.native
        row = {
            "repeat": run.step.repeat + 1,
            "prompt": s.prompt,
            "temperature": s.temperature,
            "drafter": s.drafter,
            "k": s.k,
            "mode": run.step.mode,
            "new_tokens": run.new_tokens,
            "generation_seconds": run.generation_seconds,
            "wall_seconds": run.wall_seconds,
            "tokens_per_second": run.tokens_per_second,
            "target_passes": stats.target_passes if stats else "",
            "drafted": stats.drafted if stats else (nat.n_drafted if nat and nat.n_drafted is not None else ""),
            "accepted": stats.accepted if stats else (nat.n_accept if nat and nat.n_accept is not None else ""),
            "acceptance_rate": stats.acceptance_rate if stats else (nat.acceptance_rate if nat and nat.acceptance_rate is not None else ""),
            "alpha": stats.alpha if stats else "",
            "mean_accepted": stats.mean_accepted if stats else "",
            "mean_k": stats.mean_k if stats else "",
            "python_share": stats.python_share if stats else "",
            "finish_reason": stats.finish_reason if stats else "",
            "divergence_position": "" if run.divergence is None else run.divergence,
        }
        rows.append(row)
    return rows


def write_csv(report: BenchReport, out: TextIO) -> None:
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS)
    writer.writeheader()
    writer.writerows(csv_rows(report))


def _result_dict(r: SettingResult) -> dict:
    out = asdict(r)
    out["measured_over_predicted"] = r.measured_over_predicted
    return out


def _run_dict(run: RunRecord) -> dict:
    return {
        "repeat": run.step.repeat + 1,
        **asdict(run.step.setting),
        "mode": run.step.mode,
        "new_tokens": run.new_tokens,
        "generation_seconds": run.generation_seconds,
        "wall_seconds": run.wall_seconds,
        "tokens_per_second": run.tokens_per_second,
        "divergence_position": run.divergence,
        "stats": run.stats.to_dict() if run.stats else None,
        "native": run.native.to_dict() if run.native else None,
        "tokens": list(run.tokens),
    }


def _finite(value):
    """JSON has no NaN or infinity: write null instead."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {(k if isinstance(k, str) else str(k)): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _describe(token: int | None, text: str) -> str:
    return "(end of output)" if token is None else f"{token} {text!r}"
