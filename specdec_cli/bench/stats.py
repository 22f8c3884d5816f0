"""The bench's statistics: paired speed-ups, pooled acceptance, predictions, the recommendation.

From the run records of bench.run.run_bench: per setting, the speed-up of each B over the A
run right before it (median, min, max), acceptance pooled over B runs (RunStats.merge),
Theorem 3.8's prediction at the pooled alpha (stats.predict) where it applies, and any
greedy divergence; per (temperature, drafter, k), the geometric mean over prompts; and the
(drafter, k) with the best mean over temperatures. Example: paired speed-ups 1.50, 1.38,
1.61 -> Spread(1.50, 1.38, 1.61, 3); per-prompt medians 1.2 and 1.8 -> geometric mean 1.47.

Left out: running (bench/run.py), writing (bench/output.py), wording (bench/render.py).
"""

from __future__ import annotations

import functools
import math
import statistics
from typing import Callable, Iterable, Sequence

from ..decoding.stats import RunStats
from ..events import AUTO, DraftTokens
from ..tuning.cost_curve import CostCurve
from ..tuning.speedup import predict
from .model import NATIVE, SPECULATIVE, TARGET, BenchConfig, Divergence, Recommendation, RunRecord, Setting, SettingResult, Spread, SummaryRow


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
        return Recommendation(drafter, k, False, {}, {})  # no speed-up could be measured
    drafter, k = best
    rows = by_setting[best]
    speedups = {row.temperature: row.speedup for row in rows}
    predicted = {row.temperature: row.predicted_speedup for row in rows}
    return Recommendation(drafter, k, best_score > 1.0, speedups, predicted)
