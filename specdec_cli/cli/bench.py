"""`specdec bench`: the interleaved A/B of target-only against speculative decoding.

    specdec bench --draft-tokens 1,2,4,8,12,auto --drafter model,lookup --temperature 0,0.7 --csv runs.csv --plot bench.png

The measuring is bench/run.py's; the tables and plot are bench/render.py's, the files
bench/output.py's; this module only turns options (parsed by cli/options.py) into a
BenchConfig, loads the pair once and writes the outputs.

Left out: everything that measures or formats (bench*.py, bench/render.py, bench/native.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..bench.model import DEFAULT_DRAFT_TOKENS, DEFAULT_DRAFTERS, DEFAULT_REPEATS, DEFAULT_TEMPERATURES
from ..bench.native import DEFAULT_NATIVE_TIMEOUT
from ..errors import BadInput, SpecdecError
from ..inputs import writable_file
from ..options import DEFAULT_VERIFY, option_list, parse_draft_tokens, parse_drafters, parse_temperatures
from .options import ConstraintFlags, FilterFlags, LoadFlags, ModelFlags, VerifyOption, _err, check_common, flag_groups, resolve_paths


def check_plot_format(path: Path, matplotlib) -> None:
    """BadInput unless matplotlib can write the format `path`'s suffix names (no suffix: its default, PNG)."""
    suffix = path.suffix.lstrip(".").lower()
    if not suffix:
        return
    from matplotlib.backend_bases import FigureCanvasBase

    known = FigureCanvasBase.get_supported_filetypes()
    if suffix not in known:
        raise BadInput(f"--plot: matplotlib cannot write .{suffix} files; use one of {', '.join('.' + k for k in sorted(known))}")


@flag_groups
def bench(
    models: ModelFlags = ModelFlags(),
    max_tokens: Annotated[int, typer.Option("--max-tokens", "-n", help="Tokens to generate per run.")] = 128,
    draft_tokens: Annotated[str, typer.Option("--draft-tokens", "-k", help="Values of k to sweep, numbers and/or auto, e.g. 1,2,4,8,12,auto.")] = option_list(DEFAULT_DRAFT_TOKENS),
    drafter: Annotated[str, typer.Option(help="Drafters to sweep: model (the draft GGUF), lookup (prompt lookup, no draft model), model+lookup, cascade; e.g. model,lookup.")] = option_list(DEFAULT_DRAFTERS),
    temperature: Annotated[str, typer.Option(help="Temperatures to sweep, e.g. 0,0.7 (0 is greedy and checks exactness).")] = option_list(DEFAULT_TEMPERATURES),
    repeats: Annotated[int, typer.Option(help="Interleaved A/B repetitions of the whole sweep; medians are reported.")] = DEFAULT_REPEATS,
    verify: VerifyOption = DEFAULT_VERIFY,
    prompts: Annotated[
        Optional[Path],
        typer.Option(exists=True, dir_okay=False, help="Your prompts: JSONL with a \"prompt\" key, or one prompt per line (default: the built-in suite)."),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of repeat 1 (repeat r uses seed + r - 1, the same for both sides).")] = 0,
    filters: FilterFlags = FilterFlags(),
    constraints: ConstraintFlags = ConstraintFlags(),
    load: LoadFlags = LoadFlags(),
    raw: Annotated[bool, typer.Option("--raw", help="Send prompts as they are, without the chat template.")] = False,
    warmup: Annotated[int, typer.Option(help="Tokens of one unrecorded warm-up run per side; 0 skips it.")] = 16,
    json_out: Annotated[bool, typer.Option("--json", help="Write every measurement as one JSON object on stdout.")] = False,
    csv_path: Annotated[Optional[Path], typer.Option("--csv", dir_okay=False, help="Write one CSV row per run to this file.")] = None,
    plot: Annotated[Optional[Path], typer.Option(dir_okay=False, help="Draw speed-up and acceptance against k into this PNG (needs matplotlib).")] = None,
    native: Annotated[Optional[str], typer.Option(help="Also run llama.cpp's llama-speculative-simple (path or name on PATH) with the same settings.")] = None,
    native_args: Annotated[str, typer.Option(help="Extra arguments for --native, e.g. \"--draft-p-min 0\".")] = "",
    native_timeout: Annotated[float, typer.Option(help="Seconds one --native run may take before it is stopped.")] = DEFAULT_NATIVE_TIMEOUT,
) -> None:
    """Measure speculative against target-only decoding on the same models, interleaved, and recommend k.

    Example: specdec bench -n 64 --draft-tokens 2,4,8 --temperature 0 --repeats 3 --csv bench.csv
    """
    import shlex

    from ..bench.native import find_binary, native_command, run_native
    from ..bench.output import report_dict, write_csv
    from ..bench.render import bench_console, divergence_message, print_report, progress_bar, require_matplotlib, write_plot
    from ..bench.run import BenchConfig, run_bench
    from ..prompts import builtin_prompts, load_prompts
    from ..session import open_pair

    ks = parse_draft_tokens(draft_tokens)
    drafters = parse_drafters(drafter)
    temperatures = parse_temperatures(temperature)
    if repeats < 1:
        raise BadInput(f"--repeats must be at least 1, got {repeats}")
    if warmup < 0:
        raise BadInput(f"--warmup must be 0 (none) or more tokens, got {warmup}")
    verify = check_common(min(temperatures), max_tokens, verify, filters, load, seed=seed, repeats=repeats)
    # Fail before the models load, not after a long bench.
    for option, path in (("--csv", csv_path), ("--plot", plot)):
        if path is not None:
            writable_file(path, option)
    if plot is not None:
        check_plot_format(plot, require_matplotlib())
    binary = find_binary(native) if native else None
    try:
        extra = shlex.split(native_args)
    except ValueError as exc:  # "No closing quotation", "No escaped character"
        raise BadInput(f"--native-args {native_args!r} cannot be split as a shell would: {str(exc).lower()}; check its quotes") from None
    if not (native_timeout > 0 and native_timeout != float("inf")):
        raise BadInput(f"--native-timeout must be a positive number of seconds, got {native_timeout}")
    suite = load_prompts(prompts) if prompts else builtin_prompts()
    constraint = constraints.read()
    if binary is not None and constraint is not None:
        _err("specdec: --native skipped: llama-speculative-simple takes no JSON schema or grammar here")
        binary = None
    config = BenchConfig(
        draft_tokens=ks,
        drafters=drafters,
        temperatures=temperatures,
        max_tokens=max_tokens,
        repeats=repeats,
        seed=seed,
        top_k=filters.top_k,
        top_p=filters.top_p,
        min_p=filters.min_p,
        chat=not raw,
        warmup_tokens=warmup,
        verify=verify,
        grammar=constraint,
    )
    draft_path, target_path = resolve_paths(models.draft, models.target, pair=models.pair_name)
    console = bench_console()
    options = load.options(models.pair_name, chat=config.chat)
    with open_pair(draft_path, target_path, options) as pair:
        if binary is not None and pair.vocab_map is not None:
            _err(f"specdec: --native skipped: {binary.name} refuses a draft whose vocabulary differs from the target's")
            binary = None

        def run_llama_cpp(prompt, setting):
            text = pair.target.apply_chat_template([("user", prompt.text)]) if config.chat else prompt.text
            command = native_command(
                binary, draft_path, target_path, text,
                draft_tokens=setting.k, max_tokens=max_tokens, temperature=setting.temperature,
                top_k=filters.top_k, top_p=filters.top_p, min_p=filters.min_p, seed=seed, ctx=options.n_ctx, threads=load.threads,
                gpu_layers=options.gpu_layers, draft_gpu_layers=options.draft_gpu_layers,
                extra=([] if pair.target.repack else ["--no-repack"]) + extra,
            )  # fmt: skip
            return run_native(command, timeout=native_timeout)

        models = {
            "draft": str(draft_path),
            "target": str(target_path),
            "threads": pair.target.n_threads,
            "gpu_layers": pair.target.n_gpu_layers,
            "draft_gpu_layers": pair.draft.n_gpu_layers,
            "ctx": pair.target.n_ctx,  # what llama.cpp allocated (it pads the request)
            "repack": pair.target.repack,
            "native": str(binary) if binary else None,
        }
        with progress_bar(console) as update:
            report = run_bench(pair, suite, config, progress=update, native=run_llama_cpp if binary else None, models=models)
    print_report(report, console)
    if json_out:
        typer.echo(json.dumps(report_dict(report)))
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
            f"first: {divergence_message(first)}"
        )
