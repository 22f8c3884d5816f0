"""What `specdec audit` shows: the time estimate and progress on stderr, the report on stdout.

Progress is a Rich bar when stderr is a terminal, else one plain line per tenth of the draws
("specdec: audit: 400/2000 draws, 31 s"). The estimate is always one line, before the long
part starts: "specdec: audit: 2000 draws and a greedy check of 128 tokens; about 2.5 min
(from the first 10 draws)". The report, e.g.

    specdec audit: consistent (nothing rejects at alpha 0.001)
      first token   chi-square 4.1, df 11, p 0.965 (256 simulated exact samplers): passes at 0.0005
                    12 cells, after pooling 0 of 12 that expect < 5 draws each ...

Left out: computing anything (audit/run.py, audit/gof.py); choosing what to run (cli/audit.py).
"""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.progress import Progress as Bar

from ..maths.sampling import SamplingParams
from .gof import MIN_EXPECTED, TV_LEVEL
from .run import AuditResult, Progress, SampledTest

VERDICTS = {
    "consistent": "consistent (nothing rejects at alpha {alpha:g})",
    "rejected": "REJECTED at alpha {alpha:g}: the output does not follow the target's law",
    "inconclusive": "inconclusive: round 1 drafted nothing in any draw, so the draws were the target's own",
}

FEW_DRAFTED = "most draws were the target's own, which tests little of speculation; a fixed -k (e.g. -k 4) with the model drafter drafts in every draw"


def duration(seconds: float) -> str:
    """Example: 42 -> '42 s'; 150 -> '2.5 min'; 7200 -> '2.0 h'."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


class AuditDisplay:
    """The progress callback audit.run.run_audit takes; a context manager that stops the bar."""

    def __init__(self, console: Console, greedy_tokens: int) -> None:
        self.console = console
        self.greedy_tokens = greedy_tokens
        self.live = console.file.isatty()
        self._bar: Bar | None = None
        self._task = None
        self._told = False

    def _line(self, text: str) -> None:
        self.console.print(f"specdec: audit: {text}", markup=False, highlight=False, soft_wrap=True)

    def __call__(self, p: Progress) -> None:
        if p.stage == "law":
            self._line("computing the target's exact law after the prompt ...")
        elif p.stage in ("timing", "drawing"):
            if p.estimate_seconds is not None and not self._told:
                self._told = True
                greedy = f" and a greedy check of {self.greedy_tokens} tokens" if self.greedy_tokens else ""
                self._line(f"{p.total} draws{greedy}; about {duration(p.estimate_seconds)} (from the first {p.done} draws)")
            self._progress(p)
        elif p.stage == "greedy":
            self.stop()
            if self.greedy_tokens:
                self._line(f"greedy check: {self.greedy_tokens} tokens speculative and target-only ...")

    def _progress(self, p: Progress) -> None:
        if self.live:
            if self._bar is None:
                columns = (TextColumn("audit: draws"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn())
                self._bar = Bar(*columns, console=self.console, transient=True)
                self._bar.start()
                self._task = self._bar.add_task("draws", total=p.total)
            self._bar.update(self._task, completed=p.done)
        else:
            step = max(1, p.total // 10)
            if p.done and (p.done % step == 0 or p.done == p.total):
                self._line(f"{p.done}/{p.total} draws, {duration(p.elapsed_seconds)}")

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def __enter__(self) -> "AuditDisplay":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def settings(params: SamplingParams) -> str:
    """Example: SamplingParams() -> 'temperature 0.8, top-k 40, top-p 0.95, min-p 0.05'."""
    return f"temperature {params.temperature:g}, top-k {params.top_k}, top-p {params.top_p:g}, min-p {params.min_p:g}"


def simulated(simulations: int) -> str:
    """Example: 39999 -> ' (39,999 simulated exact samplers)'; 0 (nothing simulated) -> ''."""
    return f" ({simulations:,} simulated exact samplers)" if simulations else ""


def sampled_line(t: SampledTest, level: float) -> list[str]:
    c, tv = t.chi2, t.tv
    verdict = "REJECTS" if t.rejects else "passes"
    impossible = f"; {c.impossible} draws the target gives probability 0" if c.impossible else ""
    return [
        f"chi-square {c.statistic:.1f}, df {c.dof}, p {t.exact.p_value:.3g}{simulated(t.exact.simulations)}: {verdict} at {level:g}{impossible}",
        f"{c.cells} cells, after pooling {c.pooled} of {c.outcomes} that expect < {MIN_EXPECTED:g} draws each",
        f"total variation {tv.estimate:.3f}, {TV_LEVEL:.0%} interval [{tv.low:.3f}, {tv.high:.3f}]; "
        f"an exact engine shows up to {tv.noise:.3f} at this size ({TV_LEVEL:.0%} of the time)",
    ]


def report_text(result: AuditResult, describe: str) -> str:
    """The report on stdout; `describe` names the pair and drafting (e.g. 'draft a.gguf -> target b.gguf, drafter model, k 4, verify token')."""
    c = result.config
    lines = [f"specdec audit: {VERDICTS[result.verdict].format(alpha=c.alpha)}", f"  pair          {describe}"]
    lines.append(f"  sampling      {settings(c.sampling)}; seeds {c.seed}..{c.seed + max(c.samples, 1) - 1}")
    if c.sampled:
        d = result.drafting
        drafted = (
            f"round 1 drafted in {d.drafted_draws} of them ({d.drafted / d.drafted_draws:.1f} tokens on average, "
            f"{d.accepted / d.drafted:.0%} accepted)" if d.drafted_draws else "round 1 drafted in none of them"
        )
        lines.append(f"  draws         {d.draws} speculative generations, first two tokens each; {drafted}")
        if 0 < d.drafted_draws < d.draws / 2:
            lines.append(f"  {'':<13} {FEW_DRAFTED}")
        lines.append(f"  false alarms  at most {c.alpha:g} for an exact engine (Bonferroni: each chi-square test at {c.level:g})")
        lines.append("  exact law     the target's processed distribution after the prompt, and after each first token "
                     f"expecting >= {MIN_EXPECTED:g} draws ({result.target_passes} target passes)")  # fmt: skip
        for name, test in (("first token", result.first_token), ("first pair", result.first_pair)):
            first, *rest = sampled_line(test, c.level)
            lines.append(f"  {name:<13} {first}")
            lines.extend(f"  {'':<13} {more}" for more in rest)
    else:
        lines.append("  draws         none: at temperature 0 the law is one-hot, so the greedy check below is the test")
    g = result.greedy
    if c.greedy_tokens == 0:
        lines.append("  greedy        skipped (--greedy-tokens 0)")
    elif g.identical:
        lines.append(f"  greedy        {g.tokens} tokens at temperature 0 identical to target-only decoding")
    else:
        lines.append(
            f"  greedy        DIFFERS from target-only decoding at token {g.position + 1}: "
            f"speculative {_token(g.speculative)}, target-only {_token(g.target_only)}"
        )
    estimate = f"estimated {duration(result.estimate_seconds)}, " if result.estimate_seconds is not None else ""
    lines.append(f"  time          {estimate}took {duration(result.seconds)}")
    return "\n".join(lines)


def _token(token: int | None) -> str:
    return "(ended)" if token is None else f"id {token}"
