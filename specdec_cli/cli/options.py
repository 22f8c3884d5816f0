"""The command line's options: Typer declarations shared by the commands, and reading the prompt.

A flag is declared here (or in its one command) and nothing else: what its value means,
its range and its message come from the core's options.py, the same checks the server and
the bench use. Lists are comma-separated, as options.parse_draft_tokens reads them.

The flags several commands take together are declared once, as a `FlagGroup`: a frozen
dataclass whose fields are Typer annotations with their defaults. A command names the group as
one parameter, and `flag_groups` shows Typer the group's flags in that parameter's place (so
--help lists them there, in the field order) and hands the command the group built from them:

    @flag_groups
    def bench(models: ModelFlags = ModelFlags(), ..., load: LoadFlags = LoadFlags(), ...): ...
    specdec bench --ctx 4096 --threads 8  ->  bench(models=ModelFlags(), ..., load=LoadFlags(ctx=4096, threads=8), ...)

The groups: `ModelFlags` (--draft --target --pair), `FilterFlags` (--top-k --top-p --min-p),
`ConstraintFlags` (--json-schema --grammar), `LoadFlags` (--ctx ... --draft-rpc), all four of
run, serve, bench and audit (serve has no constraint flags); `DraftingFlags` (-k --drafter
--p-min --lookup-*) for run and serve. `check_common` is the check sequence the four share.
A flag one command words its own way (bench's -k takes a list) stays in that command.

`resolve_paths` turns --draft/--target/--pair into two local files (downloading once),
announcing downloads and the built-in conversion on stderr. `parse_stops` understands
--stop's escapes: parse_stops(["a\\nb"]) -> ("a\nb",).

Left out: what a setting means (options.py), the commands themselves (app.py, run.py,
bench.py, models.py, doctor.py, audit.py, serve.py).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import re
import sys
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Callable, Optional

import typer

from ..errors import BadInput
from ..events import AUTO
from ..inputs import argv_text, read_stdin
from ..options import check_load_limits, check_p_min, check_sampling_options, check_seed, check_stops, parse_draft_length, parse_drafter, parse_verify

if TYPE_CHECKING:  # imported where used, keeping --help fast
    from ..drafting.lookup import LookupOptions
    from ..events import DraftTokens
    from ..maths.sampling import SamplingParams
    from ..session import LoadOptions

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

# Options `run` and `audit` share.
PromptArgument = Annotated[Optional[str], typer.Argument(help="The prompt; '-' or a piped stdin reads it from stdin.")]
ChatOption = Annotated[bool, typer.Option("--chat/--raw", help="Wrap the prompt in the target's chat template, or send it as it is.")]
SystemOption = Annotated[Optional[str], typer.Option(help="System message (with --raw: text put before the prompt).")]


class FlagGroup:
    """Flags several commands take together: a subclass is a frozen dataclass of Typer annotations
    with their defaults, and a command that takes one is wrapped in `flag_groups`."""


@dataclass(frozen=True)
class ModelFlags(FlagGroup):
    """The two models (run, serve, bench, audit): GGUF paths, hf: patterns, a named pair, or none (the built-in pair)."""

    draft: DraftOption = None
    target: TargetOption = None
    pair_name: PairOption = None


@dataclass(frozen=True)
class DraftingFlags(FlagGroup):
    """Who drafts and how much (run; serve's defaults of a request)."""

    draft_tokens: DraftTokensOption = AUTO
    drafter: DrafterOption = "model"
    p_min: PMinOption = None
    lookup_ngram_min: LookupNgramMinOption = 1
    lookup_ngram_max: LookupNgramMaxOption = 3
    lookup_max_tokens: LookupMaxTokensOption = 10

    def checked(self) -> Drafting:
        """The flags parsed and checked. Example: DraftingFlags(draft_tokens="8", drafter="Lookup") -> Drafting("lookup", 8, None, ...)."""
        from ..drafting.lookup import LookupOptions

        drafter = parse_drafter(self.drafter)
        draft_tokens = parse_draft_length(self.draft_tokens)
        check_p_min(self.p_min)
        lookup = LookupOptions.from_range(self.lookup_ngram_min, self.lookup_ngram_max, self.lookup_max_tokens)
        return Drafting(drafter, draft_tokens, self.p_min, lookup)


@dataclass(frozen=True)
class Drafting:
    """DraftingFlags checked: the drafter's name, k (a number or auto), the early stop, lookup's sizes."""

    drafter: str
    draft_tokens: DraftTokens
    p_min: float | None
    lookup: LookupOptions


@dataclass(frozen=True)
class FilterFlags(FlagGroup):
    """The sampling filters (run, serve, bench, audit); the temperature is each command's own (bench sweeps a list)."""

    top_k: TopKOption = 40
    top_p: TopPOption = 0.95
    min_p: MinPOption = 0.05

    def sampling(self, temperature: float) -> SamplingParams:
        from ..maths.sampling import SamplingParams

        return SamplingParams(temperature=temperature, top_k=self.top_k, top_p=self.top_p, min_p=self.min_p)


@dataclass(frozen=True)
class ConstraintFlags(FlagGroup):
    """What the output must match (run, bench, audit): a JSON schema or a GBNF grammar."""

    json_schema: JsonSchemaOption = None
    grammar: GrammarOption = None

    def read(self):
        """The constraint compiled (read_constraint), or None without one."""
        return read_constraint(self.json_schema, self.grammar)


@dataclass(frozen=True)
class LoadFlags(FlagGroup):
    """Where and how the two models load (run, serve, bench, audit): context, threads, GPU layers, repacking, RPC servers."""

    ctx: CtxOption = None
    draft_ctx: DraftCtxOption = None
    threads: ThreadsOption = None
    gpu_layers: GpuLayersOption = -1
    draft_gpu_layers: DraftGpuLayersOption = -1
    repack: RepackOption = None
    rpc: RpcOption = None
    draft_rpc: DraftRpcOption = None

    def check(self) -> None:
        check_load_limits(self.ctx, self.draft_ctx, self.threads, self.gpu_layers, self.draft_gpu_layers)

    def options(self, pair_name: str | None, *, chat: bool = False) -> LoadOptions:
        """What session.open_pair loads with (session.LoadOptions.from_cli: the --pair's context when --ctx is not given)."""
        from ..session import LoadOptions

        return LoadOptions.from_cli(
            self.ctx, self.draft_ctx, self.threads, self.gpu_layers, self.draft_gpu_layers, self.repack, pair_name,
            chat=chat, rpc=self.rpc, draft_rpc=self.draft_rpc,
        )  # fmt: skip


def check_common(temperature: float, max_tokens: int, verify: str, filters: FilterFlags, load: LoadFlags, *, seed: int | None = None, repeats: int = 1) -> str:
    """The checks run, serve, bench and audit share, in this order: the sampling settings (bench
    passes its lowest temperature), the load limits, the seed (with `repeats`, the last repeat's
    seed too), then the verify rule, which comes back parsed.
    Example: check_common(0.8, 256, "Block", FilterFlags(), LoadFlags()) -> "block";
    with FilterFlags(top_p=1.5) -> BadSetting "--top-p must be in (0, 1], got 1.5"."""
    check_sampling_options(temperature, filters.top_k, filters.top_p, filters.min_p, max_tokens)
    load.check()
    check_seed(seed, repeats)
    return parse_verify(verify)


def flag_groups(command: Callable) -> Callable:
    """`command` as Typer should see it: each parameter typed as a FlagGroup becomes the group's
    fields, in its place; called, it builds the groups from their fields and calls `command`.
    Example: def f(a: int = 1, load: LoadFlags = LoadFlags()) -> Typer reads f(a, ctx, draft_ctx,
    ..., draft_rpc); f(a=1, ctx=64, ...) calls command(a=1, load=LoadFlags(ctx=64, ...))."""
    hints = typing.get_type_hints(command, include_extras=True)
    parameters: list[inspect.Parameter] = []
    groups: dict[str, tuple[type, list[str]]] = {}
    for name, parameter in inspect.signature(command).parameters.items():
        hint = hints.get(name, parameter.annotation)
        if isinstance(hint, type) and issubclass(hint, FlagGroup):
            fields = dataclasses.fields(hint)
            field_hints = typing.get_type_hints(hint, include_extras=True)
            groups[name] = (hint, [f.name for f in fields])
            parameters += [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=field_hints[f.name]) for f in fields]
        else:
            parameters.append(parameter.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=hint))

    @functools.wraps(command)
    def with_groups(**flags):
        for name, (group, fields) in groups.items():
            flags[name] = group(**{field: flags.pop(field) for field in fields})
        return command(**flags)

    with_groups.__signature__ = inspect.Signature(parameters, return_annotation=hints.get("return", inspect.Signature.empty))  # duplicate names raise here
    with_groups.__annotations__ = {p.name: p.annotation for p in parameters}
    return with_groups


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
