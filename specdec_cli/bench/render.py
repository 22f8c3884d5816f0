"""What `specdec bench` shows: a progress bar and tables on stderr, and the optional plot.

    with progress_bar(console) as update:          # Rich progress on stderr
        report = run_bench(pair, prompts, config, progress=update)
    print_report(report, console)                   # cost curves, per-setting and summary tables
    write_plot(report, Path("bench.png"))           # needs the `plot` extra (matplotlib)

Numbers are formatted here and nowhere else: a spread prints as "1.47 (1.40-1.52)", an
acceptance-by-position list [1.0, 0.95, 0.5] as "100 95 50" (percent, draft 1 first).

Sentences too: a divergence ("prompt 'story', drafter model, k=4, repeat 1: speculative
output differs ...") and the recommendation ("best: --drafter model --draft-tokens 4: ...").

Left out: computing anything (bench/run.py, bench/stats.py), the CSV and JSON files
(bench/output.py) and choosing what to write where (cli/bench.py).
"""

from __future__ import annotations

import contextlib
import math
import sys
from pathlib import Path
from typing import Iterator, Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from ..errors import BadInput
from ..events import AUTO
from .model import BenchReport, Divergence, ProgressCallback, Recommendation, Spread


def bench_console() -> Console:
    """Rich on stderr; when stderr is a file or pipe, lines wide enough for the tables (160)."""
    return Console(stderr=True, width=None if sys.stderr.isatty() else 160)


@contextlib.contextmanager
def progress_bar(console: Console) -> Iterator[ProgressCallback]:
    """A Rich progress bar on `console` (stderr); yields the callback bench.run.run_bench takes."""
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task("bench: loading", total=None)

        def update(done: int, total: int, label: str) -> None:
            progress.update(task, completed=done, total=total, description=f"bench: {label}")

        yield update


def spread(s: Spread | None, digits: int = 1) -> str:
    """Example: Spread(1.47, 1.40, 1.52, 3) -> '1.47 (1.40-1.52)' with digits=2."""
    if s is None:
        return "-"
    if s.n == 1 or s.low == s.high:
        return f"{s.median:.{digits}f}"
    return f"{s.median:.{digits}f} ({s.low:.{digits}f}-{s.high:.{digits}f})"


def by_position(values: Sequence[float]) -> str:
    """Example: [1.0, 0.95, 0.5] -> '100 95 50'."""
    return " ".join(f"{100 * v:.0f}" for v in values) or "-"


def _num(x: float | None, fmt: str = ".2f", suffix: str = "") -> str:
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:{fmt}}{suffix}"


def cost_table(report: BenchReport) -> Table:
    curves = report.cost_curves
    n_max = max(len(c.target_batch) for c in curves.values())
    table = Table(title="measured costs, ms (median over repeats): a draft step, and one target batch of n tokens", title_justify="left")
    table.add_column("prompt")
    table.add_column("draft step", justify="right")
    for n in range(1, n_max + 1):
        table.add_column(f"n={n}", justify="right")
    for name, c in curves.items():
        table.add_row(name, f"{1000 * c.draft_step:.1f}", *(f"{1000 * t:.1f}" for t in c.target_batch))
    return table


def results_table(report: BenchReport) -> Table:
    native = any(r.native_tps for r in report.results)
    table = Table(title="per setting: median (min-max) over repeats; speed-up per A/B pair", title_justify="left")
    for name in ("prompt", "T", "drafter", "k", "target tok/s", "spec tok/s", "speed-up", "predicted", "meas/pred", "accept", "by position %", "mean acc", "mean k", "py share"):
        table.add_column(name, justify="left" if name in ("prompt", "by position %") else "right")
    if native:
        table.add_column("llama.cpp tok/s", justify="right")
    table.add_column("exact", justify="left")
    for r in report.results:
        s = r.setting
        exact = "-" if s.temperature != 0 else ("yes" if not r.divergences else f"NO @{r.divergences[0].position}")
        row = [
            s.prompt,
            f"{s.temperature:g}",
            s.drafter,
            str(s.k),
            spread(r.target_tps),
            spread(r.speculative_tps),
            spread(r.speedup, 2),
            _num(r.predicted_speedup),
            _num(r.measured_over_predicted),
            _num(r.acceptance_rate, ".0%"),
            by_position(r.acceptance_by_position),
            _num(r.mean_accepted),
            _num(r.mean_k, ".1f"),
            _num(r.python_share, ".0%"),
        ]
        if native:
            row.append(spread(r.native_tps))
        table.add_row(*row, exact)
    return table


def summary_table(report: BenchReport) -> Table:
    native = any(row.native_tps is not None for row in report.summary)
    table = Table(
        title="summary over prompts: geometric mean speed-up (lowest-highest prompt); acceptance pooled", title_justify="left"
    )
    for name in ("T", "drafter", "k", "target tok/s", "spec tok/s", "speed-up", "predicted", "accept", "alpha", "mean acc", "mean k", "by position %"):
        table.add_column(name, justify="left" if name == "by position %" else "right")
    if native:
        table.add_column("llama.cpp tok/s", justify="right")
    table.add_column("exact", justify="left")
    best = (report.recommendation.drafter, report.recommendation.k)
    for row in report.summary:
        exact = "-" if row.temperature != 0 else ("yes" if not row.divergences else f"NO ({row.divergences})")
        speedup = f"{row.speedup:.2f} ({row.speedup_low:.2f}-{row.speedup_high:.2f})" if math.isfinite(row.speedup) else "-"
        cells = [
            f"{row.temperature:g}",
            row.drafter,
            f"{row.k}*" if (row.drafter, row.k) == best else str(row.k),
            _num(row.target_tps, ".1f"),
            _num(row.speculative_tps, ".1f"),
            speedup,
            _num(row.predicted_speedup),
            _num(row.acceptance_rate, ".0%"),
            _num(row.alpha),
            _num(row.mean_accepted),
            _num(row.mean_k, ".1f"),
            by_position(row.acceptance_by_position),
        ]
        if native:
            cells.append(_num(row.native_tps, ".1f"))
        table.add_row(*cells, exact)
    return table


def print_report(report: BenchReport, console: Console) -> None:
    """All tables, the recommendation and every divergence, on `console` (stderr)."""
    c = report.config
    console.print(
        f"bench: {len(report.prompts)} prompts x T in {{{', '.join(f'{t:g}' for t in c.temperatures)}}} x "
        f"k in {{{', '.join(map(str, c.draft_tokens))}}} x drafter in {{{', '.join(c.drafters)}}}, {c.max_tokens} tokens, {c.repeats} repeats, "
        f"{len(report.runs)} runs in {report.seconds:.0f} s",
        highlight=False,
    )
    console.print(cost_table(report))
    console.print(results_table(report))
    console.print(summary_table(report))
    console.print("predicted: Theorem 3.8, for the model drafter at a fixed k only ('-' for auto and lookup, whose draft length varies per round); mean k: drafts per target pass", highlight=False)
    console.print(f"recommendation: {recommendation_line(report.recommendation)}", highlight=False)
    divergences = report.divergences
    if divergences:
        console.print(f"[bold red]{len(divergences)} divergence(s) at temperature 0[/]: speculative output must equal target-only output")
        for d in divergences:
            console.print(f"  {divergence_message(d)}", highlight=False, markup=False)


def require_matplotlib():
    """The matplotlib module, or BadInput saying how to install the `plot` extra."""
    try:
        import matplotlib
    except ImportError:
        raise BadInput("--plot needs matplotlib, which is not installed; run: pip install 'specdec-cli[plot]' (or pip install matplotlib)") from None
    return matplotlib


def write_plot(report: BenchReport, path: Path) -> None:
    """Speed-up and acceptance against k: one colour per temperature, one line style per drafter.

    Fixed k are lines (the predicted speed-up dashed, model drafter only); `auto` has no single
    k, so it is a horizontal dotted line at its measured value, in the same colour and marker.
    """
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax_speed, ax_accept = fig.subplots(1, 2)
    markers = dict(zip(report.config.drafters, "os^D"))
    for i, temperature in enumerate(report.config.temperatures):
        colour = f"C{i}"
        for drafter in report.config.drafters:
            rows = [r for r in report.summary if r.temperature == temperature and r.drafter == drafter]
            fixed = sorted((r for r in rows if r.k != AUTO), key=lambda r: r.k)
            auto = next((r for r in rows if r.k == AUTO), None)
            label, style = f"T={temperature:g} {drafter}", markers[drafter]
            if fixed:
                ks = [r.k for r in fixed]
                ax_speed.plot(ks, [r.speedup for r in fixed], f"{style}-", color=colour, label=label)
                ax_speed.fill_between(ks, [r.speedup_low for r in fixed], [r.speedup_high for r in fixed], color=colour, alpha=0.1)
                predicted = [r.predicted_speedup for r in fixed]
                if any(math.isfinite(v) for v in predicted):
                    ax_speed.plot(ks, predicted, "--", color=colour, label=f"{label} predicted (Thm 3.8)")
                ax_accept.plot(ks, [r.acceptance_rate for r in fixed], f"{style}-", color=colour, label=label)
            if auto is not None:
                for ax, value in ((ax_speed, auto.speedup), (ax_accept, auto.acceptance_rate)):
                    if math.isfinite(value):
                        ax.axhline(value, color=colour, linestyle=":", marker=style, markevery=[0], label=f"{label} auto")
    ax_speed.axhline(1.0, color="grey", linewidth=0.8)
    ax_speed.set(xlabel="draft tokens k", ylabel="speed-up over target-only", title="speed-up (band: lowest-highest prompt; dotted: auto)")
    ax_accept.set(xlabel="draft tokens k", ylabel="acceptance rate", title="acceptance (dotted: auto)", ylim=(0, 1.05))
    for ax in (ax_speed, ax_accept):
        if report.config.fixed_k:
            ax.set_xticks(report.config.fixed_k)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="x-small")
    try:
        fig.savefig(path, dpi=120)
    except OSError as exc:
        raise BadInput(f"--plot: cannot write {path}: {exc}") from None


def divergence_message(d: Divergence) -> str:
    """Example: "prompt 'story', drafter model, k=4, repeat 1: speculative output differs from
    target-only at generated token 17 (0-based): target 279 ' the', speculative 264 ' a'"."""
    s = d.setting
    return (
        f"prompt {s.prompt!r}, drafter {s.drafter}, k={s.k}, repeat {d.repeat + 1}: speculative output differs from "
        f"target-only at generated token {d.position} (0-based): "
        f"target {_describe(d.target_token, d.target_text)}, "
        f"speculative {_describe(d.speculative_token, d.speculative_text)}"
    )


def recommendation_line(rec: Recommendation) -> str:
    """Example: "best: --drafter model --draft-tokens 4: 1.50x at T=0 (predicted 1.06x)"."""
    if not rec.speedups:
        return "no speed-up could be measured (every run produced no tokens?)"
    detail = ", ".join(
        f"{speedup:.2f}x at T={t:g}{_predicted_note(rec.predicted.get(t, math.nan))}" for t, speedup in rec.speedups.items()
    )
    options = f"--drafter {rec.drafter} --draft-tokens {rec.k}"
    if rec.worthwhile:
        return f"best: {options}: {detail}"
    return f"no drafter and k beats target-only decoding for this pair on this machine (best: {options}, {detail}); decode target-only"


def _predicted_note(predicted: float) -> str:
    return f" (predicted {predicted:.2f}x)" if math.isfinite(predicted) else ""


def _describe(token: int | None, text: str) -> str:
    return "(end of output)" if token is None else f"{token} {text!r}"
