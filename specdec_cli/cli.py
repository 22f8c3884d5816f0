"""The `specdec` command line (Typer): options in, one engine run, text or JSON out.

    specdec run "Write a haiku about the sea"            # built-in pair, text on stdout
    echo "Summarise: ..." | specdec run --json -n 64     # prompt from stdin, JSON on stdout
    specdec run --draft tiny.gguf --target big.gguf -k 6 --baseline "prompt"

stdout carries only the generated text (or the JSON object); everything else goes to
stderr. A `SpecdecError` becomes one stderr line and its exit code (2 for bad input);
Ctrl-C exits 130. llama_cpp is imported only inside commands, so `--help` stays fast.

Left out: the maths (sampling.py), the loop (engine.py), the table layout (render.py).
"""

from __future__ import annotations

import json
import logging
import secrets
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from .errors import BadInput, SpecdecError

app = typer.Typer(
    name="specdec",
    help="Exact speculative decoding for llama.cpp models: a small draft proposes, the big target verifies.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)

MAX_DRAFT_TOKENS = 64


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


def check_sampling_options(draft_tokens: int, temperature: float, top_k: int, top_p: float, min_p: float, max_tokens: int) -> None:
    if not 1 <= draft_tokens <= MAX_DRAFT_TOKENS:
        raise BadInput(f"--draft-tokens must be between 1 and {MAX_DRAFT_TOKENS}, got {draft_tokens}")
    if temperature < 0:
        raise BadInput(f"--temperature must be 0 (greedy) or more, got {temperature}")
    if top_k < 0:
        raise BadInput(f"--top-k must be 0 (off) or more, got {top_k}")
    if not 0 < top_p <= 1:
        raise BadInput(f"--top-p must be in (0, 1], got {top_p}")
    if not 0 <= min_p < 1:
        raise BadInput(f"--min-p must be in [0, 1), got {min_p}")
    if max_tokens < 1:
        raise BadInput(f"--max-tokens must be at least 1, got {max_tokens}")


def resolve_paths(draft: Path | None, target: Path | None) -> tuple[Path, Path]:
    """Both given: use them; neither: the built-in pair (converting its target once)."""
    if (draft is None) != (target is None):
        raise BadInput("give both --draft and --target, or neither to use the built-in pair")
    if draft is not None and target is not None:
        return draft, target
    from .registry import builtin_pair

    return builtin_pair(on_convert=lambda dst: _err(f"specdec: converting the built-in target to F32 once, into {dst} ..."))


@app.command()
def run(
    prompt: Annotated[Optional[str], typer.Argument(help="The prompt; '-' or a piped stdin reads it from stdin.")] = None,
    draft: Annotated[Optional[Path], typer.Option(help="Draft GGUF (small, fast).")] = None,
    target: Annotated[Optional[Path], typer.Option(help="Target GGUF (the model whose output you want).")] = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", "-n", help="Tokens to generate at most.")] = 256,
    draft_tokens: Annotated[int, typer.Option("--draft-tokens", "-k", help="Draft tokens per round (k).")] = 8,
    temperature: Annotated[float, typer.Option(help="0 is greedy.")] = 0.8,
    top_k: Annotated[int, typer.Option(help="Keep the k likeliest tokens; 0 is off.")] = 40,
    top_p: Annotated[float, typer.Option(help="Nucleus mass; 1 is off.")] = 0.95,
    min_p: Annotated[float, typer.Option(help="Drop tokens below min-p x the top probability; 0 is off.")] = 0.05,
    seed: Annotated[Optional[int], typer.Option(help="Random seed (default: a fresh one, reported in the stats).")] = None,
    ctx: Annotated[int, typer.Option(help="Context size in tokens (prompt + output).")] = 2048,
    draft_ctx: Annotated[Optional[int], typer.Option(help="Draft context size (default: --ctx).")] = None,
    threads: Annotated[Optional[int], typer.Option(help="CPU threads (default: all cores).")] = None,
    gpu_layers: Annotated[int, typer.Option(help="Target layers on the GPU; -1 all when llama.cpp has a GPU backend.")] = -1,
    draft_gpu_layers: Annotated[int, typer.Option(help="Draft layers on the GPU; -1 as for the target.")] = -1,
    raw: Annotated[bool, typer.Option("--raw", help="Send the prompt as it is, without the chat template.")] = False,
    system: Annotated[Optional[str], typer.Option(help="System message for the chat template.")] = None,
    baseline: Annotated[bool, typer.Option(help="Also decode target-only and report the measured speed-up.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout instead of text.")] = False,
) -> None:
    """Generate with speculative decoding; text streams to stdout, statistics to stderr."""
    from .engine import GenerationConfig
    from .render import TextRenderer, stats_summary
    from .sampling import SamplingParams
    from .session import LoadOptions, open_pair
    from .stats import RunStats

    check_sampling_options(draft_tokens, temperature, top_k, top_p, min_p, max_tokens)
    text = read_prompt(prompt)
    draft_path, target_path = resolve_paths(draft, target)
    seed = secrets.randbits(32) if seed is None else seed
    config = GenerationConfig(
        max_tokens=max_tokens,
        draft_tokens=draft_tokens,
        sampling=SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p),
        seed=seed,
    )
    options = LoadOptions(n_ctx=ctx, draft_ctx=draft_ctx, n_threads=threads, gpu_layers=gpu_layers, draft_gpu_layers=draft_gpu_layers)
    with open_pair(draft_path, target_path, options) as pair:
        prompt_ids = pair.prompt_tokens(text, chat=not raw, system=system)
        renderer = None if json_out else TextRenderer()
        stats = RunStats()
        finished = None
        for event in pair.engine().generate(prompt_ids, config):
            stats.add(event)
            if renderer:
                renderer(event)
            finished = event
        if renderer:
            renderer.close()
        base_stats = None
        if baseline:
            base_stats = RunStats.from_events(pair.engine(speculative=False).generate(prompt_ids, config))
    if json_out:
        out = {"text": finished.text, "tokens": list(finished.tokens), "seed": seed, "stats": stats.to_dict()}
        if base_stats is not None:
            out["stats"]["baseline_tokens_per_second"] = base_stats.tokens_per_second
            out["stats"]["speedup"] = stats.tokens_per_second / base_stats.tokens_per_second
        typer.echo(json.dumps(out))
    _err(stats_summary(stats, base_stats))


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="specdec: %(message)s", stream=sys.stderr)
    try:
        app(standalone_mode=False)
    except SpecdecError as exc:
        _err(f"specdec: error: {exc}")
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        _err("specdec: interrupted")
        sys.exit(130)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except Exception as exc:  # click's usage errors and aborts
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        if isinstance(exc, click.exceptions.Abort):
            sys.exit(130)
        raise




@app.command()
def bench(
    draft: Annotated[Optional[Path], typer.Option(help="Draft GGUF (give both --draft and --target, or neither for the built-in pair).")] = None,
    target: Annotated[Optional[Path], typer.Option(help="Target GGUF.")] = None,
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
    draft_path, target_path = resolve_paths(draft, target)
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
