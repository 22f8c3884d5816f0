"""What the user sees: the token stream on stdout, the statistics on stderr.

`TextRenderer` appends each token's text to stdout as it arrives (no Rich Live: a long
output must scroll like any other program's) and ends with one newline.
`stats_summary` formats a `RunStats` as a short block for stderr.

Left out: computing anything (stats.py) and deciding what to print (cli.py).
"""

from __future__ import annotations

import sys
from typing import TextIO

from .engine import Event, Token
from .stats import RunStats


class TextRenderer:
    """Plain text: token pieces to `out` as they come, a final newline at the end."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self._wrote = False

    def __call__(self, event: Event) -> None:
        if isinstance(event, Token) and event.text:
            self.out.write(event.text)
            self.out.flush()
            self._wrote = True

    def close(self) -> None:
        self.out.write("\n")
        self.out.flush()


def stats_summary(stats: RunStats, baseline: RunStats | None = None) -> str:
    lines = [
        f"prompt {stats.prompt_tokens} tokens, prefill {stats.prefill_seconds * 1000:.0f} ms",
        f"generated {stats.new_tokens} tokens in {stats.target_passes} target passes "
        f"({stats.tokens_per_pass:.2f} tokens/pass), {stats.tokens_per_second:.1f} tokens/s",
    ]
    if stats.drafted:
        lines.append(
            f"drafted {stats.drafted}, accepted {stats.accepted} ({stats.acceptance_rate:.1%}), "
            f"mean accepted length {stats.mean_accepted:.2f}"
        )
    if baseline is not None:
        speedup = stats.tokens_per_second / baseline.tokens_per_second if baseline.tokens_per_second else 0.0
        lines.append(f"target-only {baseline.tokens_per_second:.1f} tokens/s, speed-up {speedup:.2f}x")
    return "\n".join(lines)
