"""Files that several specdec processes share: an advisory lock, and a replace that readers never see half done.

    with locked(path):                        # other specdec processes wait at PATH.lock
        old = path.read_text() if path.exists() else ""
        replace_atomically(path, old + "more")  # a temporary file, fsync, rename

Used by the drafting memory's file (drafting/memory.py) and `-k auto`'s record (tuning/record.py).

Left out: what the files hold, and refusing one that cannot be trusted (their own modules).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on PATH.lock for the length of the block (other specdec processes wait)."""
    lock = path.with_name(path.name + ".lock")
    with open(lock, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def replace_atomically(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same folder, fsync'd, then renamed over it."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
