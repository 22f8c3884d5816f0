"""What the user sees: the token stream on stdout, the legend, spinner and statistics on stderr.

The stream is appended to stdout as tokens arrive (never Rich Live: a long output must
scroll like any other program's). With colour on, each token is painted by provenance:

    accepted draft  green     correction  yellow     bonus  cyan     target  plain
    rejected draft  dim + struck through (only with --show-rejected)

Example: drafts "The", " cat" accepted, " dog" rejected, the target corrects to " sat":
    "\\x1b[32mThe\\x1b[0m\\x1b[32m cat\\x1b[0m\\x1b[2;9m dog\\x1b[0m\\x1b[33m sat\\x1b[0m"
and with colour off simply "The cat sat" (a rejected draft is never shown without colour,
so piped text is always exactly the generated text).

`JsonlRenderer` writes the same stream as one JSON object per token. `stats_table` lays
out a `RunStats` (and the baseline and the predicted speed-up) as a Rich table for stderr.

Left out: computing anything (decoding/stats.py), deciding what to print (cli/run.py; the bench's
screen is bench/render.py).
"""

from __future__ import annotations

import collections
import json
import os
import sys
from typing import Mapping, TextIO

from rich import box
from rich.console import Console
from rich.table import Table

from ..decoding.stats import RunStats, measured_speedup
from ..events import AUTO, DraftTokens, Event, Rejected, Source, Token
from ..tuning.cost_curve import CostCurve

# ANSI SGR codes, shared by the stream, the legend and `specdec simulate`.
SGR = {Source.DRAFT: "32", Source.CORRECTION: "33", Source.BONUS: "36", Source.FORCED: "35", Source.TARGET: ""}
SGR_REJECTED = "2;9"  # dim, struck through
COLOUR_NAMES = {Source.DRAFT: "green", Source.CORRECTION: "yellow", Source.BONUS: "cyan", Source.FORCED: "magenta", Source.TARGET: "plain"}
LABELS = {Source.DRAFT: "accepted draft", Source.CORRECTION: "correction", Source.BONUS: "bonus", Source.FORCED: "forced by the constraint", Source.TARGET: "target"}


def color_enabled(mode: str, stream: TextIO, environ: Mapping[str, str] | None = None) -> bool:
    """--color always/never win; auto colours a terminal unless NO_COLOR is set (no-color.org) or TERM=dumb."""
    if mode == "always":
        return True
    if mode == "never":
        return False
    env = os.environ if environ is None else environ
    if env.get("NO_COLOR") or env.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def paint(text: str, sgr: str, color: bool = True) -> str:
    """Wrap text in an SGR code and a reset; unchanged when colour is off or there is no code."""
    return f"\x1b[{sgr}m{text}\x1b[0m" if color and sgr and text else text


def visible(text: str) -> str:
    """A rejected token's text made visible in place: newlines and tabs as symbols."""
    return text.replace("\n", "↵").replace("\t", "⇥")


def legend(color: bool, show_rejected: bool) -> str:
    """One line naming the colours of the stream, e.g. 'specdec: green = accepted draft, ...'."""
    parts = [paint(f"{COLOUR_NAMES[s]} = {LABELS[s]}", SGR[s], color) for s in Source]
    if show_rejected:
        parts.append(paint("struck out = rejected draft", SGR_REJECTED, color))
    return "specdec: " + ", ".join(parts)


class InPlace:
    """Orders events for display: each Rejected just before the correction that replaced it.

    The engine reports a rejection before the round's accepted drafts (and a stop string
    can hold tokens back across rounds), so rejections wait here, first in first out, until
    their correction is released. A rejection whose correction never comes (the correction
    was end-of-generation, or a stop string cut the text first) is never shown.
    """

    def __init__(self) -> None:
        self._waiting: collections.deque[Rejected] = collections.deque()

    def __call__(self, event: Event) -> list[Event]:
        if isinstance(event, Rejected):
            self._waiting.append(event)
            return []
        if isinstance(event, Token) and event.source is Source.CORRECTION and self._waiting:
            return [self._waiting.popleft(), event]
        return [event]


class TextRenderer:
    """Token text to `out` as it comes, coloured by provenance when asked; a final newline at the end."""

    def __init__(self, out: TextIO | None = None, *, color: bool = False, show_rejected: bool = False) -> None:
        self.out = out or sys.stdout
        self.color = color
        self.show_rejected = show_rejected and color  # struck-out text only makes sense in colour
        self.started = False  # anything written yet
        self._order = InPlace()

    def __call__(self, event: Event) -> None:
        wrote = False
        for item in self._order(event):
            if isinstance(item, Token) and item.text:
                self.out.write(paint(item.text, SGR[item.source], self.color))
                wrote = True
            elif isinstance(item, Rejected) and self.show_rejected and item.text:
                self.out.write(paint(visible(item.text), SGR_REJECTED))
                wrote = True
        if wrote:
            self.out.flush()
            self.started = True

    def close(self) -> None:
        self.out.write("\n")
        self.out.flush()


class JsonlRenderer:
    """One JSON object per line: each token as it is released, then a final stats object.

        {"type": "token", "id": 504, "text": " cat", "provenance": "draft", "position": 2}
        {"type": "rejected", "id": 3290, "text": " dog", "position": 3}     (--show-rejected)
        {"type": "stats", "seed": 7, "stats": {...}}
    """

    def __init__(self, out: TextIO | None = None, *, show_rejected: bool = False) -> None:
        self.out = out or sys.stdout
        self.show_rejected = show_rejected
        self._order = InPlace()

    def __call__(self, event: Event) -> None:
        for item in self._order(event):
            if isinstance(item, Token):
                self._line({"type": "token", "id": item.id, "text": item.text, "provenance": item.source.value, "position": item.position})
            elif isinstance(item, Rejected) and self.show_rejected:
                self._line({"type": "rejected", "id": item.id, "text": item.text, "position": item.position})

    def close(self, summary: dict) -> None:
        self._line({"type": "stats", **summary})

    def _line(self, obj: dict) -> None:
        self.out.write(json.dumps(obj, ensure_ascii=False) + "\n")
        self.out.flush()


def stderr_console(color: bool) -> Console:
    """A Rich console on stderr that colours exactly when `color` says (NO_COLOR already applied)."""
    return Console(
        file=sys.stderr,
        force_terminal=True if color else None,
        no_color=not color,
        color_system="standard" if color else None,
        highlight=False,
    )


class Activity:
    """A spinner on stderr while something slow runs (model loads, the first F32 conversion).

    Animates only when stderr is a terminal; otherwise `show(..., note=True)` messages
    become one plain line each and the rest stay silent, so logs get no spinner frames.
    """

    def __init__(self, console: Console, animate: bool | None = None) -> None:
        self.console = console
        self.animate = console.file.isatty() if animate is None else animate
        self._status = None

    def show(self, message: str, *, note: bool = False) -> None:
        if not self.animate:
            if note:
                self.console.print(f"specdec: {message}", markup=False, soft_wrap=True)
            return
        if self._status is None:
            self._status = self.console.status(message, spinner="dots")
            self._status.start()
        else:
            self._status.update(message)

    def stop(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def __enter__(self) -> "Activity":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 0.1 else f"{seconds * 1000:.0f} ms"


def _share(part: float, whole: float) -> str:
    return f"{_ms(part)} ({part / whole:.0%})" if whole else _ms(part)


FINISH_REASONS = {
    "eog": "end of generation",
    "max_tokens": "--max-tokens reached",
    "stop": "a --stop string",
    "context_full": "the context is full (pass a larger --ctx)",
    "interrupted": "interrupted (Ctrl-C)",
}


def stats_table(
    stats: RunStats,
    *,
    k: DraftTokens,
    seed: int | None = None,
    baseline: RunStats | None = None,
    predicted: float | None = None,
    costs: CostCurve | None = None,
    note: str | None = None,
    context: str | None = None,
    verify: str | None = None,
) -> Table:
    """The run's figures as a two-column table; `predicted` and `costs` come from the measured cost curve.
    With verify "auto", a row says how many drafting rounds each rule verified."""
    table = Table(title="specdec run", box=box.SIMPLE_HEAD, show_header=False, title_justify="left", pad_edge=False)
    table.add_column("figure", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")
    row = table.add_row

    row("prompt", f"{stats.prompt_tokens} tokens, prefill {_ms(stats.prefill_seconds)}")
    row("new tokens", f"{stats.new_tokens} (stopped by {FINISH_REASONS.get(stats.finish_reason, stats.finish_reason or '?')})")
    row("big-model steps", f"{stats.target_passes} target forward passes, {stats.tokens_per_pass:.2f} tokens per pass")
    if stats.drafted:
        row("drafted / accepted", f"{stats.drafted} / {stats.accepted} ({stats.acceptance_rate:.1%} accepted)")
        by_pos = " ".join(f"{i}:{rate:.0%}" for i, rate in enumerate(stats.acceptance_by_position, start=1))
        row("acceptance by position", by_pos)
        row("mean accepted length", f"{stats.mean_accepted:.2f} of k = {k}")
        if verify == AUTO:
            by_rule = ", ".join(f"{rule} {n}" for rule, n in sorted(stats.rounds_by_rule.items()))
            row("verified by (auto)", f"{by_rule} rounds")
    else:
        row("drafted / accepted", "0 (no round had room to draft)")
    if stats.forced or stats.grammar_seconds:
        row("forced by the constraint", f"{stats.forced} tokens (free drafts), masks {_ms(stats.grammar_seconds)}")
    row("generation speed", f"{stats.tokens_per_second:.1f} tokens/s (prefill excluded)")
    gen = stats.generation_seconds
    row("generation time", _ms(gen))
    row("  drafting", _share(stats.draft_seconds, gen))
    row("  verifying", _share(stats.verify_seconds, gen))
    row("  everything else", _share(stats.other_seconds, gen))
    if baseline is not None:
        row("target-only", f"{baseline.tokens_per_second:.1f} tokens/s ({baseline.new_tokens} tokens)")
        row("measured speed-up", f"{measured_speedup(stats, baseline):.2f}x")
    if predicted is not None and costs is not None:
        row("predicted speed-up", f"{predicted:.2f}x (Leviathan et al. 2022 at alpha {stats.alpha:.3f}, k {k})")
        row("  from the costs", f"draft step {_ms(costs.draft_step)}, target step {_ms(costs.target_step)}")
        row("", f"verify batch of {k + 1} tokens {_ms(costs.target_batch[k])}")
    elif note:
        row("predicted speed-up", note)
    if context is not None:
        row("context", context)
    if seed is not None:
        row("seed", str(seed))
    return table
