"""The command line's options: Typer declarations shared by the commands, and reading the prompt.

A flag is declared here (or in its one command) and nothing else: what its value means,
its range and its message come from the core's options.py, the same checks the server and
the bench use. The types below are shared by `run`, `serve`, `bench` and `audit`, so a flag
reads the same everywhere (Typer reads the flag and help from the alias). Lists are
comma-separated, as options.parse_draft_tokens reads them.

`resolve_paths` turns --draft/--target/--pair into two local files (downloading once),
announcing downloads and the built-in conversion on stderr. `parse_stops` understands
--stop's escapes: parse_stops(["a\\nb"]) -> ("a\nb",).

Left out: what a setting means (options.py), the commands themselves (app.py, run.py,
bench.py, models.py, doctor.py, audit.py, serve.py).
"""

from __future__ import annotations

import enum
import re
import sys
from pathlib import Path
from typing import Annotated, Callable, Optional

import typer

from ..errors import BadInput
from ..events import AUTO
from ..inputs import argv_text, read_stdin
from ..options import check_stops

EXIT_INTERRUPTED = 130

# Options of every command that loads models (Typer reads the flag and help from the alias).
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
RpcOption = Annotated[Optional[str], typer.Option("--rpc", metavar="HOST:PORT[,...]", help="Put the target's layers on the devices of these llama.cpp RPC servers (ggml-rpc-server on another machine); the draft stays here. The RPC server has no authentication: a trusted network or an SSH tunnel only.")]
DraftRpcOption = Annotated[Optional[str], typer.Option("--draft-rpc", metavar="HOST:PORT[,...]", help="Put the draft's layers on these RPC servers' devices (default: here).")]
RepackOption = Annotated[
    Optional[bool],
    typer.Option(
        "--repack/--no-repack",
        help="Repack quantized weights for the CPU's SIMD units (llama.cpp's extra buffer types). "
        "Default: off where llama.cpp reports AMX (it can crash there), on elsewhere.",
        show_default=False,
    ),
]

# Options `run` and `serve` share (the sampling ones are serve's per-request defaults).
DraftTokensOption = Annotated[str, typer.Option("--draft-tokens", "-k", help="Draft tokens per round: 'auto' (chosen each round from this run's acceptance and costs) or a fixed k, e.g. 8.")]
DrafterOption = Annotated[str, typer.Option(help="Who drafts: model (the draft GGUF), lookup (copies from the prompt and output; no draft model), model+lookup, cascade (lookup guesses, the draft model checks the guess in one batch), none (target-only: speculation off).")]
PMinOption = Annotated[Optional[float], typer.Option(help="Stop drafting before a token the draft model gives less than this probability (llama.cpp's --draft-p-min). Default 0: off.")]
LookupNgramMinOption = Annotated[int, typer.Option(help="Lookup: shortest n-gram to match.")]
LookupNgramMaxOption = Annotated[int, typer.Option(help="Lookup: longest n-gram to match (tried first).")]
LookupMaxTokensOption = Annotated[int, typer.Option(help="Lookup: longest proposal.")]
TemperatureOption = Annotated[float, typer.Option(help="0 is greedy.")]
VerifyOption = Annotated[str, typer.Option(help="How drafts are kept: token (one by one), block (jointly, Sun et al. 2025; needs a sampling model draft) or auto (each round the rule this run measures faster).")]
JsonSchemaOption = Annotated[Optional[str], typer.Option("--json-schema", metavar="FILE|JSON", help="Constrain the output to JSON valid against this schema: a file, or the schema itself ('{\"type\": \"object\", ...}'). The output stays exactly the target's, sampled among what the schema allows.")]
GrammarOption = Annotated[Optional[Path], typer.Option("--grammar", metavar="FILE", help="Constrain the output to a llama.cpp GBNF grammar (its root rule), read from FILE.")]


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


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}


def parse_stops(stops: list[str] | None) -> tuple[str, ...]:
    """--stop values with \\n, \\t, \\r and \\\\ understood (as llama.cpp does). Example: 'a\\\\n' -> 'a' + newline."""
    out = []
    for raw in stops or []:
        text = re.sub(r"\\([ntr\\])", lambda m: _ESCAPES[m.group(1)], argv_text(raw, "a --stop string"))
        out.append(text)
    check_stops(out)
    return tuple(out)


def read_constraint(json_schema: str | None, grammar: Path | None):
    """--json-schema (a file, or inline JSON starting with '{') or --grammar (a GBNF file), compiled
    (options.constraint); None without either. Both at once is refused."""
    from ..options import constraint

    if json_schema is not None and grammar is not None:
        raise BadInput("--json-schema and --grammar exclude each other; pick one")
    if grammar is not None:
        return constraint("grammar", _read_text(grammar, "--grammar"))
    if json_schema is None:
        return None
    text = json_schema if json_schema.lstrip().startswith(("{", "true", "false")) else _read_text(Path(json_schema), "--json-schema")
    return constraint("json_schema", text)


def _read_text(path: Path, flag: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{flag}: cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None


def resolve_paths(
    draft: str | Path | None,
    target: str | Path | None,
    on_convert: Callable[[Path], None] | None = None,
    *,
    pair: str | None = None,
    notify: Callable[[str], None] | None = None,
) -> tuple[Path, Path]:
    """Local paths, hf:OWNER/REPO/PATTERN (downloaded once), --pair NAME, or nothing (the built-in pair)."""
    from ..models.registry import resolve_pair

    notify = notify or (lambda message: _err(f"specdec: {message}"))
    return resolve_pair(draft, target, pair, notify=notify, on_convert=on_convert)


def pair_files(
    draft: str | None,
    target: str | None,
    pair: str | None,
    need_draft: bool,
    on_convert: Callable[[Path], None],
    notify: Callable[[str], None] | None = None,
) -> tuple[Path | None, Path]:
    """The two files to load (no draft without need_draft: --drafter lookup), each checked to be a
    GGUF before anything long starts. Lookup with --target alone resolves it in both places."""
    from ..llama.gguf import check_gguf_file

    if not need_draft and draft is not None:
        _err("specdec: --drafter lookup loads no draft model; ignoring --draft")
    draft_path, target_path = resolve_paths(draft if need_draft else target, target, on_convert, pair=pair, notify=notify)
    draft_path = draft_path if need_draft else None
    for path in (target_path, draft_path):  # fail before a long load, not after it
        if path is not None:
            check_gguf_file(path)
    return draft_path, target_path
