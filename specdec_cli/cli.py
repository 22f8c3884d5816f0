"""The `specdec` command line (Typer): options in, one engine run, text or JSON out.

    specdec run "Write a haiku about the sea"            # built-in pair, text on stdout
    echo "Summarise: ..." | specdec run --json -n 64     # prompt from stdin, JSON on stdout
    specdec run --draft tiny.gguf --target big.gguf -k 6 --baseline "prompt"
    specdec simulate --accept-rate 0.7 --draft-tokens 4  # the acceptance model, no models

stdout carries only the generated text (or the JSON); everything else goes to stderr.
Exit codes: 0 success, 1 runtime failure, 2 bad usage or bad input, 130 interrupted. A
`SpecdecError` becomes one stderr line and its exit code wherever it is raised (the app's
group class converts it for every command); click's usage errors keep click's own message.
llama_cpp is imported only inside commands, so `--help` stays fast.

Left out: the maths (sampling.py, stats.py), the loop (engine.py), the layout (render.py).
"""

from __future__ import annotations

import contextlib
import enum
import json
import logging
import math
import re
import secrets
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Callable, Optional

import typer
from typer.core import TyperGroup

from .cli_models import models_app
from .errors import BadInput, SpecdecError

if TYPE_CHECKING:  # the real imports happen inside commands, keeping --help fast
    from .engine import CostCurve
    from .session import LoadedPair
    from .stats import RunStats

log = logging.getLogger("specdec")

MAX_DRAFT_TOKENS = 64
EXIT_INTERRUPTED = 130


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

class ColorMode(str, enum.Enum):
    auto = "auto"
    always = "always"
    never = "never"


@app.callback()
def _root() -> None:
    """Exact speculative decoding for llama.cpp models: a small draft proposes, the big target verifies."""


def _err(message: str) -> None:
    typer.echo(message, err=True)


def read_prompt(prompt: str | None) -> str:
    """The prompt argument, or stdin when the argument is '-' or absent and stdin is piped."""
    if prompt == "-" or (prompt is None and not sys.stdin.isatty()):
        prompt = sys.stdin.read()
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
        text = re.sub(r"\\([ntr\\])", lambda m: _ESCAPES[m.group(1)], raw)
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


@dataclass
class Outcome:
    """What one pass over the engine's events left behind (also when Ctrl-C cut it short)."""

    stats: RunStats
    tokens: list[int] = field(default_factory=list)
    text: str = ""

    @property
    def interrupted(self) -> bool:
        return self.stats.finish_reason == "interrupted"


def drive(events, on_event: Callable = lambda event: None) -> Outcome:
    """Run the engine's event generator to the end, or to Ctrl-C; the generator's `finally` rolls back."""
    from .engine import Token
    from .stats import RunStats

    outcome = Outcome(RunStats())
    pieces = []
    try:
        for event in events:
            outcome.stats.add(event)
            if isinstance(event, Token):
                outcome.tokens.append(event.id)
                pieces.append(event.text)
            on_event(event)
    except KeyboardInterrupt:
        outcome.stats.finish_reason = "interrupted"
    finally:
        events.close()  # runs the engine's rollback now, not at garbage collection
        outcome.text = "".join(pieces)
    return outcome


@app.command()
def run(
    prompt: Annotated[Optional[str], typer.Argument(help="The prompt; '-' or a piped stdin reads it from stdin.")] = None,
    draft: Annotated[Optional[str], typer.Option(help="Draft GGUF (small, fast): a path or hf:OWNER/REPO/PATTERN.")] = None,
    target: Annotated[Optional[str], typer.Option(help="Target GGUF (the model whose output you want): a path or hf:OWNER/REPO/PATTERN.")] = None,
    pair_name: Annotated[Optional[str], typer.Option("--pair", help="A named pair from `specdec models list`, e.g. qwen2.5-0.5b-7b.")] = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", "-n", help="Tokens to generate at most.")] = 256,
    draft_tokens: Annotated[str, typer.Option("--draft-tokens", "-k", help="Draft tokens per round: 'auto' (chosen each round from this run's acceptance and costs) or a fixed k, e.g. 8.")] = "auto",
    drafter: Annotated[str, typer.Option(help="Who drafts: model (the draft GGUF), lookup (copies from the prompt and output; no draft model), model+lookup.")] = "model",
    p_min: Annotated[Optional[float], typer.Option(help="Stop drafting before a token the draft model gives less than this probability (llama.cpp's --draft-p-min). Default 0: off.")] = None,
    lookup_ngram_min: Annotated[int, typer.Option(help="Lookup: shortest n-gram to match.")] = 1,
    lookup_ngram_max: Annotated[int, typer.Option(help="Lookup: longest n-gram to match (tried first).")] = 3,
    lookup_max_tokens: Annotated[int, typer.Option(help="Lookup: longest proposal.")] = 10,
    temperature: Annotated[float, typer.Option(help="0 is greedy.")] = 0.8,
    top_k: Annotated[int, typer.Option(help="Keep the k likeliest tokens; 0 is off.")] = 40,
    top_p: Annotated[float, typer.Option(help="Nucleus mass; 1 is off.")] = 0.95,
    min_p: Annotated[float, typer.Option(help="Drop tokens below min-p x the top probability; 0 is off.")] = 0.05,
    seed: Annotated[Optional[int], typer.Option(help="Random seed (default: a fresh one, reported in the stats).")] = None,
    stop: Annotated[
        Optional[list[str]], typer.Option("--stop", help="End the output just before this text; repeatable; \\n and \\t understood.")
    ] = None,
    ctx: Annotated[int, typer.Option(help="Context size in tokens (prompt + output).")] = 2048,
    draft_ctx: Annotated[Optional[int], typer.Option(help="Draft context size (default: --ctx).")] = None,
    threads: Annotated[Optional[int], typer.Option(help="CPU threads (default: all cores).")] = None,
    gpu_layers: Annotated[int, typer.Option(help="Target layers on the GPU; -1 all when llama.cpp has a GPU backend.")] = -1,
    draft_gpu_layers: Annotated[int, typer.Option(help="Draft layers on the GPU; -1 as for the target.")] = -1,
    chat: Annotated[bool, typer.Option("--chat/--raw", help="Wrap the prompt in the target's chat template, or send it as it is.")] = True,
    system: Annotated[Optional[str], typer.Option(help="System message (with --raw: text put before the prompt).")] = None,
    baseline: Annotated[bool, typer.Option(help="Also decode target-only and report the measured speed-up.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout instead of text.")] = False,
    jsonl: Annotated[bool, typer.Option("--jsonl", help="Stream one JSON object per token on stdout, then a stats object.")] = False,
    color: Annotated[ColorMode, typer.Option(help="Colour the stream by provenance: auto (stdout is a terminal, no NO_COLOR), always, never.")] = ColorMode.auto,
    show_rejected: Annotated[bool, typer.Option(help="Also show each rejected draft token, dim and struck out, where it was rejected (needs colour).")] = False,
    stats: Annotated[bool, typer.Option("--stats/--no-stats", help="Print the statistics table on stderr.")] = True,
) -> None:
    """Generate with speculative decoding; text streams to stdout, statistics to stderr.

    Colours: green = accepted draft token, yellow = the target's correction, cyan = the
    bonus token after a fully accepted draft, plain = a target-only step.
    """
    from .drafters import LookupOptions
    from .policy import parse_draft_tokens
    from .session import DRAFTERS

    if drafter not in DRAFTERS:
        raise BadInput(f"--drafter must be one of {', '.join(DRAFTERS)}, got {drafter!r}")
    draft_tokens = parse_draft_tokens(draft_tokens, MAX_DRAFT_TOKENS)
    check_sampling_options(draft_tokens, temperature, top_k, top_p, min_p, max_tokens)
    if p_min is not None and not 0 <= p_min <= 1:
        raise BadInput(f"--p-min must be in [0, 1], got {p_min}")
    lookup = LookupOptions.from_range(lookup_ngram_min, lookup_ngram_max, lookup_max_tokens)
    if json_out and jsonl:
        raise BadInput("--json and --jsonl exclude each other; pick one")
    if ctx < 1:
        raise BadInput(f"--ctx must be at least 1 token, got {ctx}")
    if threads is not None and threads < 1:
        raise BadInput(f"--threads must be at least 1, got {threads}")
    stops = parse_stops(stop)
    text = read_prompt(prompt)

    from .engine import GenerationConfig
    from .render import Activity, JsonlRenderer, TextRenderer, color_enabled, legend, stats_table, stderr_console
    from .sampling import SamplingParams
    from .session import LoadOptions
    from .stats import measured_speedup

    out_color = color_enabled(color.value, sys.stdout)
    err_color = color_enabled(color.value, sys.stderr)
    console = stderr_console(err_color)
    if show_rejected and not (out_color or jsonl or json_out):
        _err("specdec: --show-rejected needs colour (stdout is not a terminal or colour is off); pass --color always to force it")
    seed = secrets.randbits(32) if seed is None else seed
    config = GenerationConfig(
        max_tokens=max_tokens,
        draft_tokens=draft_tokens,
        p_min=p_min,
        sampling=SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p),
        seed=seed,
        stop=stops,
    )
    gpu_layers, draft_gpu_layers = gpu_layers_to_load(gpu_layers, draft_gpu_layers)
    options = LoadOptions(n_ctx=ctx, draft_ctx=draft_ctx, n_threads=threads, gpu_layers=gpu_layers, draft_gpu_layers=draft_gpu_layers)

    with contextlib.ExitStack() as stack:
        pair = load_pair(stack, draft, target, options, Activity(console), pair_name=pair_name, need_draft=drafter != "lookup")
        prompt_ids = pair.prompt_tokens(text, chat=chat, system=system)
        if jsonl:
            sink = JsonlRenderer(show_rejected=show_rejected)
        elif json_out:
            sink = None
        else:
            sink = TextRenderer(color=out_color, show_rejected=show_rejected)
            if out_color:
                typer.echo(legend(err_color, show_rejected), err=True, color=err_color)  # echo strips codes unless told
        try:
            result = drive(pair.engine(drafter=drafter, lookup=lookup).generate(prompt_ids, config), sink or (lambda event: None))
        except BaseException:
            if isinstance(sink, TextRenderer) and sink.started:
                sink.close()  # end the partial line, so the error message starts on its own
            raise
        if isinstance(sink, TextRenderer):
            sink.close()  # the final newline comes right after the text, before anything slow
        after = Afterwards(interrupted=result.interrupted)
        if not after.interrupted and (stats or json_out or jsonl):
            after = measure_afterwards(pair, prompt_ids, config, result, baseline, Activity(console))

    summary = result.stats.to_dict()
    if after.predicted is not None:
        summary["predicted_speedup"] = after.predicted
    if after.baseline is not None:
        summary["baseline_tokens_per_second"] = after.baseline.tokens_per_second
        summary["speedup"] = measured_speedup(result.stats, after.baseline)
    if json_out:
        typer.echo(json.dumps({"text": result.text, "tokens": result.tokens, "seed": seed, "stats": summary}, ensure_ascii=False))
    elif jsonl:
        sink.close({"seed": seed, "stats": summary})
    if stats:
        console.print(
            stats_table(
                result.stats,
                k=draft_tokens,
                seed=seed,
                baseline=after.baseline,
                predicted=after.predicted,
                costs=after.costs,
                note=after.note,
            )
        )
    if after.interrupted:
        _err("specdec: interrupted")
        raise typer.Exit(EXIT_INTERRUPTED)


def load_pair(
    stack: contextlib.ExitStack,
    draft: str | None,
    target: str | None,
    options,
    activity,
    pair_name: str | None = None,
    need_draft: bool = True,
) -> LoadedPair:
    """Resolve and check both files, then load them (a spinner on stderr meanwhile); closed with `stack`.

    Without need_draft (--drafter lookup) only the target is loaded: --target alone, or the
    target of --pair (its draft is resolved too) or of the built-in pair.
    """
    from .backend import check_gguf_file
    from .session import open_pair

    def download_notice(message: str) -> None:
        activity.stop()  # plain lines and huggingface-hub's progress bars, no spinner over them
        _err(f"specdec: {message}")

    with activity:
        if not need_draft and draft is not None:
            _err("specdec: --drafter lookup loads no draft model; ignoring --draft")
        draft_path, target_path = resolve_paths(
            draft if need_draft else target,  # lookup with --target alone: resolved in both places
            target,
            on_convert=lambda dst: activity.show(f"converting the built-in target to F32 once, into {dst} ...", note=True),
            pair=pair_name,
            notify=download_notice,
        )
        if not need_draft:
            draft_path = None
        for path in (target_path, draft_path):  # fail before a long load, not after it
            if path is not None:
                check_gguf_file(path)
        return stack.enter_context(
            open_pair(draft_path, target_path, options, on_load=lambda kind, path: activity.show(f"loading the {kind} {path.name} ..."))
        )


@dataclass
class Afterwards:
    """What is measured after generation: the target-only run and the predicted speed-up."""

    baseline: RunStats | None = None
    costs: CostCurve | None = None
    predicted: float | None = None
    note: str | None = None  # why there is no prediction
    interrupted: bool = False


def measure_afterwards(pair, prompt_ids: list[int], config, result: Outcome, baseline: bool, activity) -> Afterwards:
    """Decode target-only (with --baseline), then time draft and target steps on the loaded pair.

    The predicted speed-up is Leviathan et al.'s formula at the measured alpha and costs;
    measure_cost_curve rewinds both caches itself. Ctrl-C here keeps what was measured.
    """
    from .engine import measure_cost_curve
    from .stats import predicted_speedup

    after = Afterwards()
    k = config.draft_tokens
    context = list(prompt_ids) + result.tokens
    try:
        with activity:
            if baseline:
                activity.show("decoding target-only for the baseline ...")
                base = drive(pair.engine(speculative=False).generate(prompt_ids, config))
                if base.interrupted:
                    after.interrupted = True
                    return after
                after.baseline = base.stats
            if not result.stats.drafted:
                after.note = "n/a (nothing was drafted)"
            elif k == "auto" or pair.draft is None:
                after.note = "n/a (k chosen each round)" if k == "auto" else "n/a (no draft model)"
            elif len(context) + k + 1 > pair.target.n_ctx:
                after.note = f"n/a (the context has no room left for a verify batch of {k + 1} tokens)"
            else:
                activity.show("measuring the cost of draft and target steps ...")
                after.costs = measure_cost_curve(pair.target, pair.draft, context, k + 1)
                after.predicted = predicted_speedup(
                    result.stats.alpha, k, after.costs.draft_step, after.costs.target_step, after.costs.target_batch[k]
                )
    except KeyboardInterrupt:
        after.interrupted = True
    return after


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
    """The `specdec` script. Usage errors exit 2 with click's message; commands convert their own errors (see _Group)."""
    logging.basicConfig(level=logging.WARNING, format="specdec: %(message)s", stream=sys.stderr)
    try:
        app(prog_name="specdec")
    except SpecdecError as exc:  # raised while parsing, outside any command
        _err(f"specdec: error: {exc}")
        sys.exit(exc.exit_code)




@app.command()
def bench(
    draft: Annotated[Optional[str], typer.Option(help="Draft GGUF: a path or hf:OWNER/REPO/PATTERN (give both --draft and --target, --pair, or neither for the built-in pair).")] = None,
    target: Annotated[Optional[str], typer.Option(help="Target GGUF: a path or hf:OWNER/REPO/PATTERN.")] = None,
    pair_name: Annotated[Optional[str], typer.Option("--pair", help="A named pair from `specdec models list`, e.g. qwen2.5-0.5b-7b.")] = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", "-n", help="Tokens to generate per run.")] = 128,
    draft_tokens: Annotated[str, typer.Option("--draft-tokens", "-k", help="Values of k to sweep, e.g. 1,2,4,8,12.")] = "1,2,4,8,12",
    temperature: Annotated[str, typer.Option(help="Temperatures to sweep, e.g. 0,0.7 (0 is greedy and checks exactness).")] = "0,0.7",
    repeats: Annotated[int, typer.Option(help="Interleaved A/B repetitions of the whole sweep; medians are reported.")] = 3,
    prompts: Annotated[
        Optional[Path],
        typer.Option(exists=True, dir_okay=False, help="Your prompts: JSONL with a \"prompt\" key, or one prompt per line (default: the built-in suite)."),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of repeat 1 (repeat r uses seed + r - 1, the same for both sides).")] = 0,
    top_k: Annotated[int, typer.Option(help="Keep the k likeliest tokens; 0 is off.")] = 40,
    top_p: Annotated[float, typer.Option(help="Nucleus mass; 1 is off.")] = 0.95,
    min_p: Annotated[float, typer.Option(help="Drop tokens below min-p x the top probability; 0 is off.")] = 0.05,
    ctx: Annotated[int, typer.Option(help="Context size in tokens (prompt + output).")] = 2048,
    draft_ctx: Annotated[Optional[int], typer.Option(help="Draft context size (default: --ctx).")] = None,
    threads: Annotated[Optional[int], typer.Option(help="CPU threads (default: all cores).")] = None,
    gpu_layers: Annotated[int, typer.Option(help="Target layers on the GPU; -1 all when llama.cpp has a GPU backend.")] = -1,
    draft_gpu_layers: Annotated[int, typer.Option(help="Draft layers on the GPU; -1 as for the target.")] = -1,
    raw: Annotated[bool, typer.Option("--raw", help="Send prompts as they are, without the chat template.")] = False,
    warmup: Annotated[int, typer.Option(help="Tokens of one unrecorded warm-up run per side; 0 skips it.")] = 16,
    json_out: Annotated[bool, typer.Option("--json", help="Write every measurement as one JSON object on stdout.")] = False,
    csv_path: Annotated[Optional[Path], typer.Option("--csv", dir_okay=False, help="Write one CSV row per run to this file.")] = None,
    plot: Annotated[Optional[Path], typer.Option(dir_okay=False, help="Draw speed-up and acceptance against k into this PNG (needs matplotlib).")] = None,
    native: Annotated[Optional[str], typer.Option(help="Also run llama.cpp's llama-speculative-simple (path or name on PATH) with the same settings.")] = None,
    native_args: Annotated[str, typer.Option(help="Extra arguments for --native, e.g. \"--draft-p-min 0\".")] = "",
) -> None:
    """Measure speculative against target-only decoding on the same models, interleaved, and recommend k.

    Example: specdec bench -n 64 --draft-tokens 2,4,8 --temperature 0 --repeats 3 --csv bench.csv
    """
    import shlex

    from .bench import BenchConfig, parse_draft_tokens, parse_temperatures, run_bench, write_csv
    from .native import find_binary, native_command, run_native
    from .prompts import builtin_prompts, load_prompts
    from .render_bench import bench_console, print_report, progress_bar, require_matplotlib, write_plot
    from .session import LoadOptions, open_pair

    ks = parse_draft_tokens(draft_tokens)
    temperatures = parse_temperatures(temperature)
    check_sampling_options(max(ks), min(temperatures), top_k, top_p, min_p, max_tokens)
    if repeats < 1:
        raise BadInput(f"--repeats must be at least 1, got {repeats}")
    if warmup < 0:
        raise BadInput(f"--warmup must be 0 (none) or more tokens, got {warmup}")
    # Fail before the models load, not after a long bench.
    for option, path in (("--csv", csv_path), ("--plot", plot)):
        if path is not None and not path.expanduser().resolve().parent.is_dir():
            raise BadInput(f"{option}: the folder of {path} does not exist; create it first")
    if plot is not None:
        require_matplotlib()
    binary = find_binary(native) if native else None
    extra = shlex.split(native_args)
    suite = load_prompts(prompts) if prompts else builtin_prompts()
    config = BenchConfig(
        draft_tokens=ks,
        temperatures=temperatures,
        max_tokens=max_tokens,
        repeats=repeats,
        seed=seed,
        top_k=top_k,
        top_p=top_p,
        min_p=min_p,
        chat=not raw,
        warmup_tokens=warmup,
    )
    draft_path, target_path = resolve_paths(draft, target, pair=pair_name)
    console = bench_console()
    options = LoadOptions(n_ctx=ctx, draft_ctx=draft_ctx, n_threads=threads, gpu_layers=gpu_layers, draft_gpu_layers=draft_gpu_layers)
    with open_pair(draft_path, target_path, options) as pair:

        def run_llama_cpp(prompt, setting):
            text = pair.target.apply_chat_template([("user", prompt.text)]) if config.chat else prompt.text
            command = native_command(
                binary, draft_path, target_path, text,
                draft_tokens=setting.k, max_tokens=max_tokens, temperature=setting.temperature,
                top_k=top_k, top_p=top_p, min_p=min_p, seed=seed, ctx=ctx, threads=threads,
                gpu_layers=gpu_layers, draft_gpu_layers=draft_gpu_layers, extra=extra,
            )  # fmt: skip
            return run_native(command)

        models = {
            "draft": str(draft_path),
            "target": str(target_path),
            "threads": pair.target.n_threads,
            "gpu_layers": pair.target.n_gpu_layers,
            "draft_gpu_layers": pair.draft.n_gpu_layers,
            "ctx": ctx,
            "native": str(binary) if binary else None,
        }
        with progress_bar(console) as update:
            report = run_bench(pair, suite, config, progress=update, native=run_llama_cpp if binary else None, models=models)
    print_report(report, console)
    if json_out:
        typer.echo(json.dumps(report.to_dict()))
    if csv_path is not None:
        with open(csv_path, "w", newline="", encoding="utf-8") as f:
            write_csv(report, f)
        _err(f"specdec: wrote {len(report.runs)} runs to {csv_path}")
    if plot is not None:
        write_plot(report, plot)
        _err(f"specdec: wrote the plot to {plot}")
    if report.divergences:
        first = report.divergences[0]
        raise SpecdecError(
            f"{len(report.divergences)} run(s) at temperature 0 where speculative output differs from target-only output; "
            f"first: {first.message()}"
        )


if __name__ == "__main__":
    main()
