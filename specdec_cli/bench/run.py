"""Planning and running the bench's honest A/B: target-only against speculative decoding.

For every setting (prompt, temperature, k) the bench decodes the prompt target-only (A) and
speculatively (B) with the same sampling settings, seed and token budget, one right after
the other, and repeats the whole sweep `repeats` times: A B A B ..., so that drift on a
noisy machine (thermal limits, another process) hits both sides and every k alike. Each
run is folded into a `decoding/stats.RunStats`; the bench reports per setting:

- tokens/s both ways (median, min, max) and the speed-up, taken per A/B pair, then the median;
- acceptance overall and by draft position, alpha, and the mean accepted length (pooled);
- the target's measured cost curve (one batch of n = 1..k+1 tokens) and a draft step (the
  mean of a few in a row, as a round drafts them; cost_curve.measure_cost_curve, medians),
  once per prompt and repeat, right after the prompt's first target-only run and halfway
  through that run's text (cost_curve.mid_generation: a step costs more as the context
  grows), and from it the speed-up that Leviathan et al. 2022, Theorem 3.8, predicts with the
  run's own alpha (stats.predicted_speedup), to be read next to the measured one;
- at temperature 0, the position of any token where B's output differs from A's (exactness).

k is a number or "auto" (adaptive.AdaptivePolicy chooses each round's length); B drafts with
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
    report.recommendation   # Recommendation("model", 4, worthwhile=True, speedups={0.0: 1.5}, ...)

This module plans and runs the sweep; nothing here prints: progress goes to the `progress`
callback, results to the caller. Left out: the data model (bench/model.py), the
statistics (bench/stats.py), CSV and JSON (bench/output.py), tables, plots and wording
(bench/render.py), options (cli/options.py), llama.cpp's own binary (bench/native.py, reached
through the `native` callback).
"""

from __future__ import annotations

import time
from typing import Sequence

from ..decoding.consume import Outcome, consume
from ..decoding.engine import Engine, GenerationConfig
from ..events import AUTO, DraftTokens
from ..prompts import Prompt
from ..tuning.cost_curve import CostCurve, measure_cost_curve, mid_generation
from ..tuning.policy import draft_policy
from .model import NATIVE, SPECULATIVE, TARGET, BenchConfig, BenchReport, NativeRunner, Pair, ProgressCallback, RunRecord, Setting, Step
from .stats import analyse, first_divergence, median_curve, recommend, summarise


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
    """One generation at draft length k (a number or AUTO), folded by decoding/consume.consume; Ctrl-C ends the bench."""
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
            grammar=config.grammar,
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
        record = _run_step(step, engines, ids[name], by_name[name], config, native)
        if step.mode == TARGET:
            last_a[(step.repeat, step.setting)] = record
        elif step.mode == SPECULATIVE and step.setting.temperature == 0:
            record.divergence = first_divergence(last_a[(step.repeat, step.setting)].tokens, record.tokens)
        runs.append(record)
        s = step.setting
        advance(f"{name} T={s.temperature:g} {s.drafter} k={s.k} {step.mode} (repeat {step.repeat + 1}/{config.repeats})")
        if (step.repeat, name) not in measured:
            assert step.mode == TARGET, "plan() starts every prompt's runs of a repeat with target-only"
            measured.add((step.repeat, name))
            context = mid_generation(ids[name], record.tokens)[: pair.target.n_ctx - max_batch]  # room for the batches
            draft_context = pair.draft_context(context)
            curves[name].append(measure_cost_curve(pair.target, pair.draft, context, max_batch, config.cost_repeats, draft_context))
            advance(f"cost curve, {name} (repeat {step.repeat + 1}/{config.repeats})")

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
