"""Where model files come from: the catalogue of named pairs, `hf:` specs, and the built-in pair.

A model is named in one of three ways, and `resolve_pair` turns any of them into paths:

    --draft tiny.gguf --target big.gguf                     local files, used as they are
    --target hf:Qwen/Qwen2.5-7B-Instruct-GGUF/qwen2.5-7b-instruct-q4_k_m*.gguf
                                                            a Hugging Face repository + glob
    --pair qwen2.5-0.5b-7b                                  a named pair from models.toml

    draft, target = resolve_pair(None, None, "qwen2.5-0.5b-7b")   # downloads on first use

A `hf:` model that is already in huggingface-hub's cache is used without touching the
network; otherwise it is downloaded (models/download.py). `--pair` with `--draft` or `--target`
replaces that side of the pair. Nothing at all means the built-in pair.

The catalogue is catalogue.py's; the built-in pair and its conversion are cache.py's.

Left out: loading (llama/model.py) and the Hugging Face transfers themselves (models/download.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Union

from ..errors import BadInput
from .cache import builtin_pair
from .catalogue import HF_PREFIX, HubModel, find_pair, pattern_problem

Notify = Callable[[str], None]

# -- from user options to paths --------------------------------------------------------------

ModelRef = Union[Path, HubModel]


def parse_model(text: str | os.PathLike[str]) -> ModelRef:
    """'hf:owner/name/glob' -> HubModel; anything else is a local path.

    Example: 'hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF/*q8_0.gguf'
          -> HubModel('Qwen/Qwen2.5-0.5B-Instruct-GGUF', '*q8_0.gguf')
    """
    raw = os.fspath(text)
    if not raw.startswith(HF_PREFIX):
        return Path(raw).expanduser()
    parts = raw[len(HF_PREFIX) :].split("/", 2)
    if len(parts) < 3 or not parts[2]:
        raise BadInput(
            f"{raw!r} names no file pattern; write hf:OWNER/REPO/PATTERN, "
            f"e.g. hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF/*q8_0.gguf"
        )
    from .download import REPO_RE

    repo, pattern = f"{parts[0]}/{parts[1]}", parts[2]
    if not REPO_RE.match(repo):
        raise BadInput(f"{raw!r}: {repo!r} is not a Hugging Face repository name (owner/name)")
    problem = pattern_problem(pattern)
    if problem:
        raise BadInput(f"{raw!r}: the file pattern {problem}")
    return HubModel(repo, pattern)


def model_path(ref: ModelRef, notify: Notify | None = None) -> Path:
    """A local path for a model: itself for a path; the cached or freshly downloaded file for `hf:`."""
    if isinstance(ref, Path):
        return ref
    from . import download

    found = download.cached_model(ref.repo, ref.pattern)
    if found is not None:
        return found.path
    if notify and not download.offline():
        notify(f"downloading {ref.spec} from Hugging Face into {download.hub_cache_dir()} ...")
    return download.pull(ref.repo, ref.pattern, notify=notify).path


def resolve_pair(
    draft: str | os.PathLike[str] | None,
    target: str | os.PathLike[str] | None,
    pair: str | None = None,
    *,
    notify: Notify | None = None,
    on_convert: Callable[[Path], None] | None = None,
) -> tuple[Path, Path]:
    """(draft, target) paths from the user's --draft / --target / --pair (see the module docstring).

    `notify` hears about downloads (and conversions, unless `on_convert` is given).
    """
    on_convert = on_convert or _on_convert(notify)
    if pair is not None:
        entry = find_pair(pair)
        if entry.builtin:
            base_draft, base_target = (None, None) if (draft and target) else builtin_pair(on_convert)
        else:
            base_draft, base_target = entry.draft, entry.target
        draft_ref = parse_model(draft) if draft is not None else base_draft
        target_ref = parse_model(target) if target is not None else base_target
        return model_path(draft_ref, notify), model_path(target_ref, notify)
    if (draft is None) != (target is None):
        raise BadInput("give both --draft and --target, --pair NAME, or nothing to use the built-in pair")
    if draft is None:
        return builtin_pair(on_convert)
    return model_path(parse_model(draft), notify), model_path(parse_model(target), notify)


def _on_convert(notify: Notify | None) -> Callable[[Path], None] | None:
    if notify is None:
        return None
    return lambda dst: notify(f"converting the built-in target to F32 once, into {dst} ...")
