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


def check_sampling_options(draft_tokens: int | str, temperature: float, top_k: int, top_p: float, min_p: float, max_tokens: int) -> None:
    if draft_tokens != "auto" and not 1 <= draft_tokens <= MAX_DRAFT_TOKENS:
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


def resolve_paths(draft: Path | None, target: Path | None, need_draft: bool = True) -> tuple[Path | None, Path]:
    """Both given: use them; neither: the built-in pair (converting its target once).

    Without need_draft (--drafter lookup) no draft is loaded: (None, target or the built-in one).
    """
    if not need_draft:
        if draft is not None:
            _err("specdec: --drafter lookup loads no draft model; ignoring --draft")
        return None, target if target is not None else resolve_paths(None, None)[1]
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
    from .drafters import LookupOptions
    from .engine import GenerationConfig
    from .policy import parse_draft_tokens
    from .render import TextRenderer, stats_summary
    from .sampling import SamplingParams
    from .session import DRAFTERS, LoadOptions, open_pair
    from .stats import RunStats

    if drafter not in DRAFTERS:
        raise BadInput(f"--drafter must be one of {', '.join(DRAFTERS)}, got {drafter!r}")
    k = parse_draft_tokens(draft_tokens, MAX_DRAFT_TOKENS)
    check_sampling_options(k, temperature, top_k, top_p, min_p, max_tokens)
    if p_min is not None and not 0 <= p_min <= 1:
        raise BadInput(f"--p-min must be in [0, 1], got {p_min}")
    lookup = LookupOptions.from_range(lookup_ngram_min, lookup_ngram_max, lookup_max_tokens)
    text = read_prompt(prompt)
    draft_path, target_path = resolve_paths(draft, target, need_draft=drafter != "lookup")
    seed = secrets.randbits(32) if seed is None else seed
    config = GenerationConfig(
        max_tokens=max_tokens,
        draft_tokens=k,
        p_min=p_min,
        sampling=SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p),
        seed=seed,
    )
    options = LoadOptions(n_ctx=ctx, draft_ctx=draft_ctx, n_threads=threads, gpu_layers=gpu_layers, draft_gpu_layers=draft_gpu_layers)
    with open_pair(draft_path, target_path, options) as pair:
        prompt_ids = pair.prompt_tokens(text, chat=not raw, system=system)
        renderer = None if json_out else TextRenderer()
        stats = RunStats()
        finished = None
        for event in pair.engine(drafter=drafter, lookup=lookup).generate(prompt_ids, config):
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


if __name__ == "__main__":
    main()
