"""The one home of the `specdec` commands' option constants, parsing and messages.

Constants (MAX_DRAFT_TOKENS, DRAFTERS, the bench's default sweep), the option types that
`run` and `bench` share, and every parser and check. Each check raises BadInput with the
value given and the range expected, e.g. "--top-p must be in (0, 1], got 1.5"; the app's
group class (cli._Group) turns that into one stderr line and exit 2. Lists are
comma-separated: parse_draft_tokens("auto,4,1,2") -> (1, 2, 4, 'auto').
`resolve_paths` turns --draft/--target/--pair into two local files (downloading once).
Options are checked here and handed down as typed values: nothing below names a flag.

Left out: the commands themselves (cli.py, cli_run.py, cli_bench.py, cli_models.py).
"""

from __future__ import annotations

import enum
import logging
import math
import re
import sys
from pathlib import Path
from typing import Annotated, Callable, Optional

import typer

from .errors import BadInput
from .events import AUTO, DraftTokens
from .inputs import argv_text, read_stdin

log = logging.getLogger("specdec")

MAX_DRAFT_TOKENS = 64
EXIT_INTERRUPTED = 130
DRAFTERS = ("model", "lookup", "model+lookup")  # see drafters.py and session.LoadedPair.engine

# The bench's default sweep: 7 prompts x 2 temperatures x 2 drafters x 5 k x (A, B) = 280
# runs a repeat, two repeats. k = 1 is left out: on a CPU, where a round's overhead is paid
# per token, it is rarely the best.
DEFAULT_DRAFT_TOKENS: tuple[DraftTokens, ...] = (2, 4, 8, 12, AUTO)
DEFAULT_DRAFTERS: tuple[str, ...] = ("model", "lookup")
DEFAULT_TEMPERATURES: tuple[float, ...] = (0.0, 0.7)
DEFAULT_REPEATS = 2
DEFAULT_NATIVE_TIMEOUT = 600.0  # seconds for one llama-speculative-simple run: load both models, decode -n tokens


def option_list(values) -> str:
    """A tuple of option values as its comma-separated flag text. Example: (2, 'auto') -> '2,auto'; (0.0, 0.7) -> '0,0.7'."""
    return ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values)


# Option types shared by `run` and `bench` (Typer reads the flag and help from the alias).
DraftOption = Annotated[Optional[str], typer.Option("--draft", metavar="FILE", help="Draft GGUF (small, fast): a path or hf:OWNER/REPO/PATTERN.")]
TargetOption = Annotated[Optional[str], typer.Option("--target", metavar="FILE", help="Target GGUF (the model whose output you want): a path or hf:OWNER/REPO/PATTERN.")]
PairOption = Annotated[Optional[str], typer.Option("--pair", metavar="NAME", help="A named pair from `specdec models list`, e.g. qwen2.5-0.5b-7b.")]
TopKOption = Annotated[int, typer.Option("--top-k", help="Keep the k likeliest tokens; 0 is off.")]
TopPOption = Annotated[float, typer.Option("--top-p", help="Nucleus mass; 1 is off.")]
MinPOption = Annotated[float, typer.Option("--min-p", help="Drop tokens below min-p x the top probability; 0 is off.")]
CtxOption = Annotated[Optional[int], typer.Option("--ctx", help="Context size in tokens (prompt + output); default the --pair's, else 2048.")]
DraftCtxOption = Annotated[Optional[int], typer.Option("--draft-ctx", help="Draft context size (default: --ctx).")]
ThreadsOption = Annotated[Optional[int], typer.Option("--threads", help="CPU threads (default: all cores).")]
GpuLayersOption = Annotated[int, typer.Option("--gpu-layers", help="Target layers on the GPU; -1 all when llama.cpp has a GPU backend.")]
DraftGpuLayersOption = Annotated[int, typer.Option("--draft-gpu-layers", help="Draft layers on the GPU; -1 as for the target.")]
RepackOption = Annotated[
    Optional[bool],
    typer.Option(
        "--repack/--no-repack",
        help="Repack quantized weights for the CPU's SIMD units (llama.cpp's extra buffer types). "
        "Default: off where llama.cpp reports AMX (it can crash there), on elsewhere.",
        show_default=False,
    ),
]

# What the C fields behind the options hold (llama.cpp's n_ctx is uint32_t, n_threads and
# n_gpu_layers int32_t); numpy seeds a generator from any integer >= 0, and 2**64 - 1 keeps
# a seed one machine word (llama.cpp's own --seed is 32-bit).
UINT32_MAX = 2**32 - 1
INT32_MAX = 2**31 - 1
SEED_MAX = 2**64 - 1


class ColorMode(str, enum.Enum):
    auto = "auto"
    always = "always"
    never = "never"


def _err(message: str) -> None:
    typer.echo(message, err=True)


def read_prompt(prompt: str | None) -> str:
    """The prompt argument, or stdin when the argument is '-' or absent and stdin is piped."""
    if prompt == "-" or (prompt is None and sys.stdin is not None and not sys.stdin.isatty()):
        prompt = read_stdin("the prompt")
    elif prompt is not None:
        prompt = argv_text(prompt, "the prompt")
    if prompt is None:
        raise BadInput('no prompt: give one as an argument, or pipe it on stdin (specdec run - < prompt.txt)')
    if not prompt.strip():
        raise BadInput("the prompt is empty")
    return prompt


def check_load_limits(ctx: int | None, draft_ctx: int | None, threads: int | None, *gpu_layers: tuple[str, int]) -> None:
    """Values the C types behind them cannot hold (llama.cpp would wrap --ctx 4294967552 to 256)."""
    for flag, value, top, unit in (
        ("--ctx", ctx, UINT32_MAX, " tokens"),
        ("--draft-ctx", draft_ctx, UINT32_MAX, " tokens"),
        ("--threads", threads, INT32_MAX, ""),
    ):
        if value is not None and value < 1:
            raise BadInput(f"{flag} must be at least 1{unit.rstrip('s')}, got {value}")
        if value is not None and value > top:
            raise BadInput(f"{flag} must be at most {top}{unit} (what llama.cpp's C type holds), got {value}")
    for flag, value in gpu_layers:
        if not -1 <= value <= INT32_MAX:
            raise BadInput(f"{flag} must be -1 (all) or between 0 and {INT32_MAX}, got {value}")


def check_seed(seed: int | None, repeats: int = 1) -> None:
    """A seed numpy and the reports can use: 0 to 2**64 - 1 (for bench, the last repeat's seed too)."""
    if seed is not None and not (0 <= seed and seed + repeats - 1 <= SEED_MAX):
        raise BadInput(f"--seed must be between 0 and {SEED_MAX - repeats + 1}, got {seed}")


def check_draft_tokens(draft_tokens: DraftTokens) -> None:
    if draft_tokens != AUTO and not 1 <= draft_tokens <= MAX_DRAFT_TOKENS:
        raise BadInput(f"--draft-tokens must be between 1 and {MAX_DRAFT_TOKENS}, got {draft_tokens}")


def parse_draft_tokens(text: str) -> tuple[DraftTokens, ...]:
    """'auto,4,1,2' -> (1, 2, 4, 'auto'): numbers sorted, then auto; without repeats, each in 1..64."""
    items = [v.lower() for v in _items(text)]
    wrong = BadInput(f"--draft-tokens takes whole numbers and/or auto, such as 8, auto or 1,2,4,8,auto; got {text!r}")
    try:
        values: list[DraftTokens] = sorted({int(v) for v in items if v != AUTO})
    except ValueError:
        raise wrong from None
    if not items:
        raise wrong
    for k in values:
        check_draft_tokens(k)
    return tuple(values) + ((AUTO,) if AUTO in items else ())


def parse_draft_length(text: str) -> DraftTokens:
    """One --draft-tokens value (run): 'auto' or a number. Example: '8' -> 8, 'AUTO' -> 'auto'."""
    values = parse_draft_tokens(text)
    if len(values) != 1:
        raise BadInput(f"--draft-tokens takes one value here, auto or a number such as 8; got {text!r}")
    return values[0]


def parse_drafters(text: str) -> tuple[str, ...]:
    """'lookup,model' -> ('lookup', 'model'): in the order given, without repeats."""
    values = list(dict.fromkeys(v.lower() for v in _items(text)))
    unknown = [v for v in values if v not in DRAFTERS]
    if not values or unknown:
        raise BadInput(f"--drafter takes a comma-separated list of {', '.join(DRAFTERS)}, got {text!r}")
    return tuple(values)


def parse_drafter(text: str) -> str:
    """One --drafter value (run). Example: 'Lookup' -> 'lookup'."""
    name = text.strip().lower()
    if name not in DRAFTERS:
        raise BadInput(f"--drafter must be one of {', '.join(DRAFTERS)}, got {text!r}")
    return name


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


def check_sampling_options(temperature: float, top_k: int, top_p: float, min_p: float, max_tokens: int) -> None:
    if not (math.isfinite(temperature) and temperature >= 0):
        raise BadInput(f"--temperature must be 0 (greedy) or more, got {temperature}")
    if top_k < 0:
        raise BadInput(f"--top-k must be 0 (off) or more, got {top_k}")
    if not 0 < top_p <= 1:
        raise BadInput(f"--top-p must be in (0, 1], got {top_p}")
    if not 0 <= min_p < 1:
        raise BadInput(f"--min-p must be in [0, 1), got {min_p}")
    if max_tokens < 1:
        raise BadInput(f"--max-tokens must be at least 1, got {max_tokens}")


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}


def parse_stops(stops: list[str] | None) -> tuple[str, ...]:
    """--stop values with \\n, \\t, \\r and \\\\ understood (as llama.cpp does). Example: 'a\\\\n' -> 'a' + newline."""
    out = []
    for raw in stops or []:
        text = re.sub(r"\\([ntr\\])", lambda m: _ESCAPES[m.group(1)], argv_text(raw, "a --stop string"))
        if not text:
            raise BadInput("a --stop string must not be empty")
        out.append(text)
    return tuple(out)


def resolve_paths(
    draft: str | Path | None,
    target: str | Path | None,
    on_convert: Callable[[Path], None] | None = None,
    *,
    pair: str | None = None,
    notify: Callable[[str], None] | None = None,
) -> tuple[Path, Path]:
    """Local paths, hf:OWNER/REPO/PATTERN (downloaded once), --pair NAME, or nothing (the built-in pair)."""
    from .registry import resolve_pair

    notify = notify or (lambda message: _err(f"specdec: {message}"))
    return resolve_pair(draft, target, pair, notify=notify, on_convert=on_convert)


def gpu_layers_to_load(gpu_layers: int, draft_gpu_layers: int) -> tuple[int, int]:
    """The layer counts to load with. Asking for GPU layers without a GPU backend warns once, then runs on the CPU."""
    from .backend import gpu_offload_supported

    asked = [f"{flag} {n}" for flag, n in (("--gpu-layers", gpu_layers), ("--draft-gpu-layers", draft_gpu_layers)) if n > 0]
    if asked and not gpu_offload_supported():
        log.warning("llama.cpp was built without a GPU backend; ignoring %s and running on the CPU", " and ".join(asked))
        return 0, 0
    return gpu_layers, draft_gpu_layers


def check_p_min(p_min: float | None) -> None:
    """--p-min is a probability (None: the policy's default). Example: 1.5 -> BadInput."""
    if p_min is not None and not 0 <= p_min <= 1:
        raise BadInput(f"--p-min must be in [0, 1], got {p_min}")


DEFAULT_CTX = 2048


def context_size(ctx: int | None, pair_name: str | None) -> int:
    """--ctx if given, else the named pair's suggested context, else 2048."""
    if ctx is None:
        if pair_name is None:
            return DEFAULT_CTX
        from .registry import find_pair

        return find_pair(pair_name).ctx
    if ctx < 1:
        raise BadInput(f"--ctx must be at least 1 token, got {ctx}")
    return ctx
