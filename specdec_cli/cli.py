"""The `specdec` app (Typer): wires the commands together and converts their errors at the edge.

    specdec run "Write a haiku about the sea"            # built-in pair, text on stdout
    echo "Summarise: ..." | specdec run --json -n 64     # prompt from stdin, JSON on stdout
    specdec run --draft tiny.gguf --target big.gguf -k 6 --baseline "prompt"
    specdec simulate --accept-rate 0.7 --draft-tokens 4  # the acceptance model, no models
    specdec doctor                                       # the llama.cpp build, paths, models probed

stdout carries only the generated text (or the JSON); everything else goes to stderr.
Exit codes: 0 success, 1 runtime failure, 2 bad usage or bad input, 130 interrupted. A
`SpecdecError` becomes one stderr line and its exit code wherever it is raised (the app's
group class converts it for every command); click's usage errors keep click's own message.
llama_cpp is imported only inside commands, so `--help` stays fast.

Left out: the commands' bodies (cli_run.py, cli_bench.py, cli_models.py; `simulate` is
small enough to live here), option parsing (cli_options.py), the maths (sampling.py,
stats.py), the loop (engine.py), the layout (render.py).
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import sys
from typing import Annotated, Optional

import typer
from typer.core import TyperGroup

from .cli_bench import bench
from .cli_doctor import doctor
from .cli_models import models_app
from .cli_options import EXIT_INTERRUPTED, ColorMode, _err, check_draft_tokens
from .cli_run import run
from .errors import BadInput, SpecdecError


class _Group(TyperGroup):
    """Every command's SpecdecError becomes one stderr line and its exit code; Ctrl-C exits 130."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except SpecdecError as exc:
            _err(f"specdec: error: {exc}")
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            _err("specdec: interrupted")
            raise typer.Exit(EXIT_INTERRUPTED) from None


app = typer.Typer(
    name="specdec",
    cls=_Group,
    help="Exact speculative decoding for llama.cpp models: a small draft proposes, the big target verifies.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)
app.add_typer(models_app, name="models")
app.command()(run)
app.command()(bench)
app.command()(doctor)


@app.callback()
def _root() -> None:
    """Exact speculative decoding for llama.cpp models: a small draft proposes, the big target verifies."""


@app.command()
def simulate(
    accept_rate: Annotated[float, typer.Option("--accept-rate", "-a", help="Chance that each draft token is accepted (alpha), 0..1.")] = 0.7,
    draft_tokens: Annotated[int, typer.Option("--draft-tokens", "-k", help="Draft tokens per round (k).")] = 4,
    rounds: Annotated[int, typer.Option(help="Rounds (big-model steps) to play.")] = 12,
    seed: Annotated[Optional[int], typer.Option(help="Random seed (default: a fresh one, printed at the end).")] = None,
    delay: Annotated[float, typer.Option(help="Seconds per animation step on a terminal.")] = 0.08,
    color: Annotated[ColorMode, typer.Option(help="auto (stdout is a terminal, no NO_COLOR), always, never.")] = ColorMode.auto,
) -> None:
    """Play the i.i.d. acceptance model round by round: no models, the colours of `specdec run`.

    Example: specdec simulate --accept-rate 0.7 --draft-tokens 4 --rounds 20
    """
    if not (math.isfinite(accept_rate) and 0 <= accept_rate <= 1):
        raise BadInput(f"--accept-rate must be between 0 and 1, got {accept_rate}")
    check_draft_tokens(draft_tokens)
    if not 1 <= rounds <= 1_000_000:
        raise BadInput(f"--rounds must be between 1 and 1000000, got {rounds}")
    if not (math.isfinite(delay) and delay >= 0):
        raise BadInput(f"--delay must be 0 or more seconds, got {delay}")
    from .render import color_enabled
    from .simulate import play

    animate = sys.stdout.isatty() and delay > 0
    seed = secrets.randbits(32) if seed is None else seed
    play(accept_rate, draft_tokens, rounds, seed, sys.stdout, color=color_enabled(color.value, sys.stdout), animate=animate, delay=delay)


def main() -> None:
    """The `specdec` script, run in a forked child so that a native crash is explained (crashguard.py).

    Usage errors exit 2 with click's message; commands convert their own errors (see _Group).
    SPECDEC_LLAMA_LOG=1 also shows specdec's info lines (e.g. the repack choice).
    """
    from .crashguard import guard

    verbose = os.environ.get("SPECDEC_LLAMA_LOG", "") not in ("", "0")
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="specdec: %(message)s", stream=sys.stderr)
    guard(_run_app)


def _run_app() -> None:
    try:
        app(prog_name="specdec")
    except SpecdecError as exc:  # raised while parsing, outside any command
        _err(f"specdec: error: {exc}")
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
