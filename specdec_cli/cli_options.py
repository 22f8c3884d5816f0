"""Option parsing and checks shared by the `specdec` commands (run, bench, simulate).

Each check raises BadInput with the value given and the range expected, e.g.
"--top-p must be in (0, 1], got 1.5"; cli.py turns that into one stderr line and exit 2.
`resolve_paths` turns --draft/--target/--pair into two local files (downloading once).

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
from .inputs import argv_text, read_stdin

log = logging.getLogger("specdec")

MAX_DRAFT_TOKENS = 64
EXIT_INTERRUPTED = 130


# Option types shared by `run` and `bench` (Typer reads the flag and help from the alias).
DraftOption = Annotated[Optional[str], typer.Option("--draft", help="Draft GGUF (small, fast): a path or hf:OWNER/REPO/PATTERN.")]
TargetOption = Annotated[Optional[str], typer.Option("--target", help="Target GGUF (the model whose output you want): a path or hf:OWNER/REPO/PATTERN.")]
PairOption = Annotated[Optional[str], typer.Option("--pair", help="A named pair from `specdec models list`, e.g. qwen2.5-0.5b-7b.")]
TopKOption = Annotated[int, typer.Option("--top-k", help="Keep the k likeliest tokens; 0 is off.")]
TopPOption = Annotated[float, typer.Option("--top-p", help="Nucleus mass; 1 is off.")]
MinPOption = Annotated[float, typer.Option("--min-p", help="Drop tokens below min-p x the top probability; 0 is off.")]
CtxOption = Annotated[Optional[int], typer.Option("--ctx", help="Context size in tokens (prompt + output); default the --pair's, else 2048.")]
DraftCtxOption = Annotated[Optional[int], typer.Option("--draft-ctx", help="Draft context size (default: --ctx).")]
ThreadsOption = Annotated[Optional[int], typer.Option("--threads", help="CPU threads (default: all cores).")]
GpuLayersOption = Annotated[int, typer.Option("--gpu-layers", help="Target layers on the GPU; -1 all when llama.cpp has a GPU backend.")]
DraftGpuLayersOption = Annotated[int, typer.Option("--draft-gpu-layers", help="Draft layers on the GPU; -1 as for the target.")]


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


def check_draft_tokens(draft_tokens: int | str) -> None:
    if draft_tokens != "auto" and not 1 <= draft_tokens <= MAX_DRAFT_TOKENS:
        raise BadInput(f"--draft-tokens must be between 1 and {MAX_DRAFT_TOKENS}, got {draft_tokens}")


def check_sampling_options(draft_tokens: int | str, temperature: float, top_k: int, top_p: float, min_p: float, max_tokens: int) -> None:
    check_draft_tokens(draft_tokens)
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
