"""`specdec run`: one generation on a loaded pair, streamed to stdout, statistics to stderr.

    specdec run "Write a haiku about the sea"            # built-in pair, text on stdout
    echo "Summarise: ..." | specdec run --json -n 64     # prompt from stdin, JSON on stdout
    specdec run --draft tiny.gguf --target big.gguf -k 6 --baseline "prompt"

`decoding/consume.consume` runs the engine's event generator to its end or to Ctrl-C; with
--baseline a target-only generation on a second context of the target is decoded in turns with
it (decoding/in_turns.py), and `measure_afterwards` times the costs behind the predicted speed-up. With `-k auto`
the policy starts from what earlier calls learnt of this pair on this machine, and keeps what
this one learnt (tuning/record.py; `--no-tuning-cache` turns it off).

Left out: option checks (cli/options.py), the layout (cli/render.py), the loop (decoding/engine.py).
"""

from __future__ import annotations

import contextlib
import json
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from ..drafting.memory import DEFAULT_MAX_TOKENS as DEFAULT_CACHE_TOKENS
from ..drafting.memory import BadCache, DraftMemory, read_cache, save_cache
from ..errors import BadInput, SpecdecError
from ..inputs import argv_text, writable_file
from ..options import DEFAULT_VERIFY, check_draft_cache_size
from .options import (
    EXIT_INTERRUPTED,
    ChatOption,
    ColorMode,
    ConstraintFlags,
    DraftingFlags,
    FilterFlags,
    LoadFlags,
    ModelFlags,
    PromptArgument,
    SystemOption,
    TemperatureOption,
    VerifyOption,
    _err,
    check_common,
    flag_groups,
    pair_files,
    parse_stops,
    read_prompt,
)

if TYPE_CHECKING:  # the real imports happen inside the command, keeping --help fast
    from ..decoding.consume import Outcome
    from ..decoding.stats import RunStats
    from ..session import LoadedPair
    from ..tuning.cost_curve import CostCurve
    from ..tuning.record import Identity, TuningRecord


@flag_groups
def run(
    prompt: PromptArgument = None,
    models: ModelFlags = ModelFlags(),
    max_tokens: Annotated[int, typer.Option("--max-tokens", "-n", help="Tokens to generate at most.")] = 256,
    drafting: DraftingFlags = DraftingFlags(),
    draft_cache: Annotated[Optional[Path], typer.Option(metavar="FILE", help="Lookup also drafts from earlier calls' prompts and outputs, kept in FILE (read, then updated).")] = None,
    draft_cache_size: Annotated[int, typer.Option(help="Tokens the draft cache keeps at most; the oldest calls go first.")] = DEFAULT_CACHE_TOKENS,
    no_tuning_cache: Annotated[bool, typer.Option("--no-tuning-cache", help="With -k auto, start from nothing: neither read nor keep what earlier calls learnt of this pair on this machine (also SPECDEC_NO_TUNING_CACHE=1).")] = False,
    temperature: TemperatureOption = 0.8,
    verify: VerifyOption = DEFAULT_VERIFY,
    filters: FilterFlags = FilterFlags(),
    seed: Annotated[Optional[int], typer.Option(help="Random seed (default: a fresh one, reported in the stats).")] = None,
    stop: Annotated[
        Optional[list[str]], typer.Option("--stop", metavar="TEXT", help="End the output just before this text; repeatable; \\n and \\t understood.")
    ] = None,
    constraints: ConstraintFlags = ConstraintFlags(),
    load: LoadFlags = LoadFlags(),
    chat: ChatOption = True,
    system: SystemOption = None,
    baseline: Annotated[bool, typer.Option(help="Also decode target-only, in turns with the speculative run (the text streams at about half speed), and report the measured speed-up.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout instead of text.")] = False,
    jsonl: Annotated[bool, typer.Option("--jsonl", help="Stream one JSON object per token on stdout, then a stats object.")] = False,
    color: Annotated[ColorMode, typer.Option(help="Colour the stream by provenance: auto (stdout is a terminal, no NO_COLOR), always, never.")] = ColorMode.auto,
    show_rejected: Annotated[bool, typer.Option(help="Also show each rejected draft token, dim and struck out, where it was rejected (needs colour).")] = False,
    stats: Annotated[bool, typer.Option("--stats/--no-stats", help="Print the statistics table on stderr.")] = True,
) -> None:
    """Generate with speculative decoding; text streams to stdout, statistics to stderr.

    Colours: green = accepted draft token, yellow = the target's correction, cyan = the
    bonus token after a fully accepted draft, magenta = a token the constraint forced
    (--json-schema, --grammar), plain = a target-only step.
    """
    chosen = drafting.checked()
    verify = check_common(temperature, max_tokens, verify, filters, load, seed=seed)
    check_draft_cache(draft_cache, draft_cache_size, chosen.drafter)
    if json_out and jsonl:
        raise BadInput("--json and --jsonl exclude each other; pick one")
    stops = parse_stops(stop)
    constraint = constraints.read()
    text = read_prompt(prompt)
    if system is not None:
        system = argv_text(system, "--system")

    from ..decoding.consume import consume
    from ..decoding.engine import GenerationConfig
    from ..decoding.in_turns import Beside
    from ..decoding.stats import measured_speedup
    from ..tuning.policy import draft_policy
    from .render import Activity, JsonlRenderer, TextRenderer, color_enabled, legend, stats_table, stderr_console

    out_color = color_enabled(color.value, sys.stdout)
    err_color = color_enabled(color.value, sys.stderr)
    console = stderr_console(err_color)
    if show_rejected and not (out_color or jsonl or json_out):
        _err("specdec: --show-rejected needs colour (stdout is not a terminal or colour is off); pass --color always to force it")
    seed = secrets.randbits(32) if seed is None else seed
    config = GenerationConfig(
        max_tokens=max_tokens,
        sampling=filters.sampling(temperature),
        seed=seed,
        stop=stops,
        verify=verify,
        grammar=constraint,
    )
    options = load.options(models.pair_name, chat=chat)
    reported = stats or json_out or jsonl  # the statistics are shown: the baseline and the costs behind them are worth measuring

    with contextlib.ExitStack() as stack:
        pair = load_pair(stack, models, options, Activity(console), need_draft=chosen.drafter != "lookup")
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
            memory, distrusted = open_memory(pair, draft_cache, draft_cache_size)
            tuning = open_tuning(pair, options, chosen.draft_tokens, no_tuning_cache)
            policy = draft_policy(chosen.draft_tokens, chosen.p_min, tuning.record.costs if tuning else None, pair.first_pass_prior())
            earned = memory.earned if memory is not None else tuning.record.earned if tuning else None
            events = pair.engine(drafter=chosen.drafter, lookup=chosen.lookup, memory=memory, earned=earned).generate(prompt_ids, config, policy)
            beside = None
            if baseline and reported:  # decoded in turns with the run: in_turns.py
                plain = pair.baseline_engine()
                stack.callback(plain.target.close)
                beside = Beside(plain.generate(prompt_ids, config))
                events = beside.alongside(events)
            result = consume(events, sink)
        except BaseException:
            if isinstance(sink, TextRenderer) and sink.started:
                sink.close()  # end the partial line, so the error message starts on its own
            raise
        if isinstance(sink, TextRenderer):
            sink.close()  # the final newline comes right after the text, before anything slow
        if draft_cache is not None:
            remember(pair, draft_cache, draft_cache_size, prompt_ids + result.tokens, memory, said=distrusted)
        if tuning is not None:
            keep_tuning(tuning, policy, earned)
        contexts = allocated_contexts(pair, options.n_ctx)
        after = Afterwards(interrupted=result.interrupted)
        if not after.interrupted and reported:
            after = measure_afterwards(pair, prompt_ids, chosen.draft_tokens, result, Activity(console))
            after.baseline = beside.outcome.stats if beside is not None else None

    summary = result.stats.to_dict()
    summary.update(contexts)
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
                k=chosen.draft_tokens,
                seed=seed,
                baseline=after.baseline,
                predicted=after.predicted,
                costs=after.costs,
                note=after.note,
                context=describe_contexts(contexts, options.n_ctx),
                verify=verify,
            )
        )
    if after.interrupted:
        _err("specdec: interrupted")
        raise typer.Exit(EXIT_INTERRUPTED)


def load_pair(stack: contextlib.ExitStack, models: ModelFlags, options, activity, need_draft: bool = True) -> LoadedPair:
    """Resolve and check both files, then load them (a spinner on stderr meanwhile); closed with `stack`.

    Without need_draft (--drafter lookup) only the target is loaded: --target alone, or the
    target of --pair (its draft is resolved too) or of the built-in pair.
    """
    from ..session import open_pair

    def download_notice(message: str) -> None:
        activity.stop()  # plain lines and huggingface-hub's progress bars, no spinner over them
        _err(f"specdec: {message}")

    with activity:
        draft_path, target_path = pair_files(
            models.draft, models.target, models.pair_name, need_draft,
            on_convert=lambda dst: activity.show(f"converting the built-in target to F32 once, into {dst} ...", note=True),
            notify=download_notice,
        )  # fmt: skip
        return stack.enter_context(
            open_pair(draft_path, target_path, options, on_load=lambda kind, path: activity.show(f"loading the {kind} {path.name} ..."))
        )


def check_draft_cache(path: Path | None, size: int, drafter: str) -> None:
    """--draft-cache is lookup's memory: a drafter that looks up, a file that can be written, a size."""
    if path is None:
        return
    if drafter == "model":
        raise BadInput("--draft-cache is what lookup drafts from: pass --drafter lookup, model+lookup or cascade")
    check_draft_cache_size(size)
    writable_file(path, "--draft-cache")


def open_memory(pair: LoadedPair, path: Path | None, size: int) -> tuple[DraftMemory | None, bool]:
    """The draft cache's memory (drafting/memory.py; None without --draft-cache), and whether the file was
    distrusted: then it is said in one line and not used, and the update rebuilds it."""
    if path is None:
        return None, False
    try:
        return read_cache(path.expanduser(), pair.tokenizer_fingerprint(), pair.target.n_vocab, size), False
    except BadCache as exc:
        _err(f"specdec: {exc}; starting a new one")
        return DraftMemory(size), True


def remember(pair: LoadedPair, path: Path, size: int, tokens: list[int], memory: DraftMemory, said: bool) -> None:
    """Add this call's prompt and output, and what lookup's proposals earned in it (memory.earned), to the
    draft cache file (another process may have added too)."""
    note = save_cache(path.expanduser(), [tokens], pair.tokenizer_fingerprint(), pair.target.n_vocab, size, memory.earned)
    if note is not None and not said:  # the file went bad while this call ran
        _err(f"specdec: {note}")


@dataclass
class Tuning:
    """`-k auto`'s record for this pair, machine and settings (tuning/record.py), and where it is kept."""

    folder: Path
    identity: Identity
    record: TuningRecord


def open_tuning(pair: LoadedPair, options, draft_tokens, off: bool) -> Tuning | None:
    """The record a call with `-k auto` starts from (None for a fixed k, or when turned off); a
    file that cannot be trusted, or a cache folder that cannot be one, is said in one line."""
    from ..events import AUTO
    from ..models.cache import cache_dir
    from ..tuning import record as records

    if draft_tokens != AUTO or not records.enabled(off):
        return None
    identity = records.Identity.of(
        pair.draft.path if pair.draft is not None else None, pair.target.path, threads=options.n_threads,
        gpu_layers=options.gpu_layers, draft_gpu_layers=options.draft_gpu_layers, rpc=options.rpc, draft_rpc=options.draft_rpc,
    )  # fmt: skip
    try:
        folder = cache_dir() / "tuning"
    except SpecdecError as exc:
        _err(f"specdec: {exc}; -k auto starts from nothing")
        return None
    record, note = records.load_record(folder, identity)
    if note is not None:
        _err(f"specdec: {note}")
    return Tuning(folder, identity, record)


def keep_tuning(tuning: Tuning, policy, earned) -> None:
    """Save what the call's policy learnt: its costs (AdaptivePolicy.costs; the record's draft step
    and first-pass cost where this call has none) and each proposer's record (`earned`, as the
    engine wrote it back)."""
    import dataclasses

    from ..tuning.record import TuningRecord, save_record

    costs, kept = policy.costs(), tuning.record.costs
    if costs is None:
        costs = kept
    elif kept is not None:
        costs = dataclasses.replace(
            costs,
            draft_step=kept.draft_step if costs.draft_step is None else costs.draft_step,
            first_pass=kept.first_pass if costs.first_pass is None else costs.first_pass,
        )
    try:
        save_record(tuning.folder, tuning.identity, TuningRecord(costs, dict(earned), tuning.record.calls + 1))
    except OSError as exc:
        _err(f"specdec: the tuning record could not be kept in {tuning.folder}: {(exc.strerror or str(exc)).lower()}")


def allocated_contexts(pair: LoadedPair, requested: int) -> dict:
    """The context sizes llama.cpp really allocated (it pads a request: --ctx 64 gets 256)."""
    out = {"ctx": pair.target.n_ctx, "ctx_requested": requested}
    if pair.draft is not None:
        out["draft_ctx"] = pair.draft.n_ctx
    return out


def describe_contexts(contexts: dict, requested: int) -> str:
    """Example: {"ctx": 256, "draft_ctx": 256}, 64 -> "256 tokens (asked for 64; llama.cpp pads), draft 256"."""
    text = f"{contexts['ctx']} tokens" + (f" (asked for {requested}; llama.cpp pads)" if contexts["ctx"] != requested else "")
    if "draft_ctx" in contexts:
        text += f", draft {contexts['draft_ctx']}"
    return text


@dataclass
class Afterwards:
    """What the statistics report beside the run: the target-only run (decoded in turns with it) and the predicted speed-up."""

    baseline: RunStats | None = None
    costs: CostCurve | None = None
    predicted: float | None = None
    note: str | None = None  # why there is no prediction
    interrupted: bool = False


def measure_afterwards(pair, prompt_ids: list[int], k, result: Outcome, activity) -> Afterwards:
    """Time draft and target steps on the loaded pair, for the predicted speed-up.

    The predicted speed-up is Leviathan et al.'s formula at the measured alpha and costs,
    timed halfway through the generated text (cost_curve.mid_generation); measure_cost_curve
    rewinds both caches itself. Ctrl-C here keeps what was measured.
    """
    from ..tuning.cost_curve import measure_cost_curve, mid_generation
    from ..tuning.speedup import predict

    after = Afterwards()
    context = mid_generation(prompt_ids, result.tokens)
    try:
        with activity:
            if not result.stats.drafted:
                after.note = "n/a (nothing was drafted)"
            elif k == "auto" or pair.draft is None:
                after.note = "n/a (k chosen each round)" if k == "auto" else "n/a (no draft model)"
            elif len(context) + k + 1 > pair.target.n_ctx:
                after.note = f"n/a (the context has no room left for a verify batch of {k + 1} tokens)"
            else:
                activity.show("measuring the cost of draft and target steps ...")
                after.costs = measure_cost_curve(pair.target, pair.draft, context, k + 1, draft_context=pair.draft_context(context))
                after.predicted = predict(result.stats.alpha, k, after.costs)
    except KeyboardInterrupt:
        after.interrupted = True
    return after
