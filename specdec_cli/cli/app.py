"""The `specdec` app (Typer): wires the commands together and converts their errors at the edge.

    specdec run "Write a haiku about the sea"            # built-in pair, text on stdout
    echo "Summarise: ..." | specdec run --json -n 64     # prompt from stdin, JSON on stdout
    specdec run --draft tiny.gguf --target big.gguf -k 6 --baseline "prompt"
    specdec simulate --accept-rate 0.7 --draft-tokens 4  # the acceptance model, no models
    specdec doctor                                       # the llama.cpp build, paths, models probed

stdout carries only the generated text (or the JSON); everything else goes to stderr.
Exit codes: 0 success, 1 runtime failure, 2 bad usage or bad input, 130 interrupted, 141
stdout's reader went away (`| head`). A `SpecdecError` becomes one stderr line and its exit
code wherever it is raised (the app's group class converts it for every command); a usage
error is click's message on one line plus a usage line:

    specdec: error: No such option: --bogus
    usage: specdec run [OPTIONS] [prompt]; see 'specdec run --help'

The commands' heavy modules are imported inside them; llama_cpp itself is loaded by the
package's `__init__` (the import order, see there), which `--help` pays for too.

Left out: the commands' bodies (cli/run.py, cli/bench.py, cli/models.py, cli/doctor.py, cli/audit.py; `simulate` is
small enough to live here), option parsing (cli/options.py), the maths (maths/sampling.py,
maths/speculative.py, decoding/stats.py), the loop (decoding/engine.py), the layout (cli/render.py).
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

from ..errors import BadInput, SpecdecError
from ..options import check_draft_tokens, check_seed
from .audit import audit
from .bench import bench
from .doctor import doctor
from .models import models_app
from .options import EXIT_INTERRUPTED, ColorMode, _err
from .run import run
from .serve import serve

# click's exception classes, as the installed Typer raises them (typer >= 0.26 vendors click).
_ClickException, _UsageError = (next(c for c in typer.BadParameter.__mro__ if c.__name__ == name) for name in ("ClickException", "UsageError"))

EXIT_BROKEN_PIPE = 128 + 13  # what a shell reports for a tool killed by SIGPIPE (`yes | head -1`)


class _Group(TyperGroup):
    """The edge where errors become exit codes, for every command and for Typer's runner alike.

    A SpecdecError becomes one stderr line and its exit code; Ctrl-C exits 130. A usage error
    (unknown option, missing or malformed value) is click's message on one line and a short
    usage line that points to --help, exit 2. Writes to stdout go through `_GuardedStdout`:
    a full or failing stdout is one line and exit 1; a reader that went away (`| head`) ends
    the run quietly with exit 141, as `cat` or `git log` do when SIGPIPE kills them.
    """

    def main(self, args=None, prog_name=None, **extra):
        extra["standalone_mode"] = False  # errors are shown here, in specdec's format
        if sys.stdout is None:  # started with stdout closed (>&-)
            _err("specdec: error: stdout is closed; redirect it to a file or to /dev/null instead (> out.txt)")
            sys.exit(1)
        guard = _GuardedStdout(sys.stdout)
        sys.stdout = guard
        try:
            code = super().main(args, prog_name, **extra)
            code = code if isinstance(code, int) else 0
            guard.flush()  # text still buffered for a file must reach it before we report success
        except _UsageError as exc:
            code = _usage_error(exc)
        except _ClickException as exc:
            _err(f"specdec: error: {exc.format_message()}")
            code = exc.exit_code
        except typer.Abort:
            _err("specdec: interrupted")
            code = EXIT_INTERRUPTED
        except SpecdecError as exc:  # the final flush
            _err(f"specdec: error: {exc}")
            code = exc.exit_code
        except BrokenPipeError:
            code = EXIT_BROKEN_PIPE
        except SystemExit as exc:  # click's own exits (a broken pipe while printing --help)
            code = exc.code if isinstance(exc.code, int) else 1
        finally:
            sys.stdout = guard.raw
        if guard.failed:
            guard.silence()  # so that the interpreter's last flush of stdout raises nothing
            code = EXIT_BROKEN_PIPE if guard.broken_pipe else (code or 1)
        sys.exit(code)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except SpecdecError as exc:
            _err(f"specdec: error: {exc}")
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            _err("specdec: interrupted")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except BrokenPipeError:
            raise typer.Exit(EXIT_BROKEN_PIPE) from None
        except _UsageError as exc:
            if exc.ctx is None:  # some parser errors carry no context: give them the command's, for its usage line
                exc.ctx = self._command_context(ctx)
            raise

    def _command_context(self, ctx):
        """A context for the command being parsed (`specdec run`), or the group's if there is none."""
        try:
            name = ctx.invoked_subcommand  # set before the command parses its arguments
            return self.get_command(ctx, name).make_context(name, [], parent=ctx, resilient_parsing=True)
        except Exception:  # only for a nicer usage line; the error itself is already known
            return ctx


def _usage_error(exc) -> int:
    """click's message on one line, then `usage: specdec run [OPTIONS] [prompt]; see 'specdec run --help'`."""
    if type(exc).__name__ == "NoArgsIsHelpError":  # click >= 8.2: bare `specdec` shows the help
        typer.echo(exc.ctx.get_help())
        return exc.exit_code
    ctx = exc.ctx
    message = " ".join(exc.format_message().split())
    _err(f"specdec: error: {message}")
    if ctx is not None:
        pieces = " ".join(ctx.command.collect_usage_pieces(ctx))
        _err(f"usage: {ctx.command_path} {pieces}; see '{ctx.command_path} --help'")
    else:
        _err("usage: see 'specdec --help'")
    return exc.exit_code


class _GuardedStdout:
    """sys.stdout for the length of a command: a failed write raises SpecdecError (exit 1), naming the reason.

    A broken pipe stays a BrokenPipeError (the reader is gone: a quiet exit). Everything
    else (isatty, encoding, buffer, fileno) is the real stream's.
    """

    def __init__(self, raw) -> None:
        self.raw = raw
        self.failed = False
        self.broken_pipe = False

    def __getattr__(self, name):
        return getattr(self.raw, name)

    def write(self, text: str) -> int:
        return self._guard(self.raw.write, text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self._guard(self.raw.flush)

    def _guard(self, op, *args):
        try:
            return op(*args)
        except BrokenPipeError:
            self.failed = self.broken_pipe = True
            raise
        except OSError as exc:
            self.failed = True
            reason = exc.strerror.lower() if exc.strerror else str(exc)
            raise SpecdecError(f"cannot write to stdout: {reason}; free some space or send stdout elsewhere (> file, | less)") from None

    def silence(self) -> None:
        """Point the stdout descriptor at /dev/null and drop what is buffered for it."""
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.raw.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):  # no descriptor (Typer's runner): nothing to silence
            pass


app = typer.Typer(
    name="specdec",
    cls=_Group,
    help="Exact speculative decoding for llama.cpp models: a small draft proposes, the big target verifies.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode=None,  # click's plain help: full option names, one column of text
    context_settings={"max_content_width": 100},
)
app.add_typer(models_app, name="models", short_help="Named pairs: list, download, check that two models fit.")
# The one-line summaries `specdec --help` lists (click would cut the docstrings' first sentence).
app.command(short_help="Generate speculatively: text on stdout, stats on stderr.")(run)
app.command(short_help="A/B speculative against target-only decoding; recommend k.")(bench)
app.command(short_help="Report the llama.cpp build and paths; probe each model.")(doctor)
app.command(short_help="Test that the target's output distribution is unchanged.")(audit)
app.command(short_help="Serve the pair over OpenAI's API, with a live page at /.")(serve)


@app.callback()
def _root() -> None:
    """Exact speculative decoding for llama.cpp models: a small draft proposes, the big target verifies."""


@app.command(short_help="Play the acceptance model round by round; no models.")
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
    check_seed(seed)
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
    """The `specdec` script, run in a forked child so that a native crash is explained (llama/crashguard.py).

    Every error and exit code is decided in _Group.main. SPECDEC_LLAMA_LOG=1 also shows
    specdec's info lines (e.g. the repack choice).
    """
    from ..llama.crashguard import guard

    verbose = os.environ.get("SPECDEC_LLAMA_LOG", "") not in ("", "0")
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="specdec: %(message)s", stream=sys.stderr)
    guard(_run_app)


def _run_app() -> None:
    app(prog_name="specdec")


if __name__ == "__main__":
    main()
