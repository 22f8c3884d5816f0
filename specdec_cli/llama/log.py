"""llama.cpp's log, captured into a ring buffer (`LlamaLog`) rather than printed, and the backends' one initialisation.

The tail of the log is attached to the error when a load fails; `SPECDEC_LLAMA_LOG=1` echoes it
live. A Ctrl-C that lands inside one of llama.cpp's callbacks (where ctypes would print and drop
it) is kept, and raised once the C call returns (`raise_pending`).

    captured = llama_log()
    mark = captured.count
    ...                                   # a call into llama.cpp that fails
    captured.reason(mark)                 # "tensor 'x' data is not within the file bounds, ..."

Left out: what the log is attached to (model.py, convert.py).
"""

from __future__ import annotations

import collections
import ctypes
import functools
import os
import re
import sys

import llama_cpp as lc  # before numpy: see specdec_cli/__init__.py


class LlamaLog:
    """llama.cpp's log lines, kept in a bounded buffer instead of flooding stderr."""

    def __init__(self, keep: int = 200) -> None:
        self.lines: collections.deque[str] = collections.deque(maxlen=keep)
        self.count = 0  # lines seen so far, kept or not: `since(mark)` finds the newer ones
        self.echo = os.environ.get("SPECDEC_LLAMA_LOG", "") not in ("", "0")
        self._partial = ""
        self.pending: BaseException | None = None  # a Ctrl-C that arrived inside a callback
        # The ctypes callback must outlive every call into llama.cpp, so this object holds it.
        self._callback = lc.llama_log_callback(self._on_log)
        lc.llama_log_set(self._callback, ctypes.c_void_p(0))

    def _on_log(self, level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        try:
            piece = text.decode("utf-8", errors="replace")
            if self.echo:
                sys.stderr.write(piece)
            self._partial += piece
            *done, self._partial = self._partial.split("\n")
            for line in done:
                if line.strip():
                    self.lines.append(line)
                    self.count += 1
        except BaseException as exc:  # KeyboardInterrupt: ctypes would print it and drop it
            self.pending = self.pending or exc

    def raise_pending(self) -> None:
        """Raise the Ctrl-C (or other exception) that arrived inside a callback, once."""
        exc, self.pending = self.pending, None
        if exc is not None:
            raise exc

    def tail(self, n: int = 12) -> str:
        return "\n".join(list(self.lines)[-n:])

    def since(self, mark: int) -> list[str]:
        """The kept lines logged after `count` was `mark`."""
        n = min(self.count - mark, len(self.lines))
        return list(self.lines)[len(self.lines) - n :] if n > 0 else []

    def reason(self, mark: int) -> str:
        """llama.cpp's error lines since `mark` as one line, without function-name prefixes.

        Example: "llama_model_load: error loading model: tensor 'x' data is not within the
        file bounds, model is corrupted or incomplete" -> "tensor 'x' data is not within ...".
        Falls back to the last line logged when none mentions an error.
        """
        found: list[str] = []
        for line in self.since(mark):
            if not _ERROR_LINE.search(line) or _GENERIC_FAILURE.search(line):
                continue
            text = line.strip()
            while True:
                shorter = _LOG_PREFIX.sub("", text, count=1)
                if shorter == text:
                    break
                text = shorter
            if text and text not in found:
                found.append(text)
        if found:
            return "; ".join(found)
        recent = self.since(mark)
        return recent[-1].strip() if recent else "no reason given in llama.cpp's log"


_ERROR_LINE = re.compile(r"error|fail|invalid|corrupt", re.IGNORECASE)
_GENERIC_FAILURE = re.compile(r"^\s*llama_model_load_from_file\w*: failed to load model\s*$")
_LOG_PREFIX = re.compile(r"^(?:[A-Za-z_][\w:]*: |error loading model: )")


@functools.lru_cache(maxsize=1)
def llama_log() -> LlamaLog:
    """Initialise llama.cpp's backends once and route its log into a `LlamaLog`."""
    captured = LlamaLog()
    lc.llama_backend_init()
    return captured
