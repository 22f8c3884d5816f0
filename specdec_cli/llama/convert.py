"""A GGUF rewritten at another precision by llama.cpp's quantizer (`convert_gguf`), in a child process that can be stopped.

llama.cpp's quantizer is one long C call with no way to abort it. A Ctrl-C that arrives
meanwhile can only surface in llama.cpp's log callback, where ctypes prints "Exception
ignored on calling ctypes callback" and drops it: the conversion went on to the end. So
the caller's process only waits, and the quantizer runs in a child it can kill:

    convert_in_child(Path("SmolLM2-135M-Instruct.Q4_1.gguf"), Path(".x.F32.gguf.4242.partial"), "F32")

    parent: waits for the child, reading the one line it writes if it fails. Ctrl-C (or any
            exception, SIGTERM included: cache.ensure_converted makes it one) kills the child,
            waits for it to end, and is raised again; the caller then removes the partial file
            (models/cache.ensure_converted), which no one writes any more.
    child:  `python -m specdec_cli.llama.convert SRC DST TYPE`, in a session of its own (a terminal's
            Ctrl-C reaches only the parent, which decides). A thread reads stdin, a pipe from
            the parent: end of file means the parent has gone (killed by SIGKILL, say),
            and the child ends at once instead of writing on for nobody. It exits 0 when the
            file is written, else 1 after one line on stdout, convert_gguf's message.

The child's stderr is the parent's: SPECDEC_LLAMA_LOG=1 shows llama.cpp's log as it converts.

Left out: where the file goes, the free-space check and the partial file's name and
removal (models/cache.py).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import llama_cpp as lc

from ..errors import SpecdecError
from . import crashguard
from .crashguard import signal_name
from .gguf import FILE_TYPES
from .log import llama_log

_PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # so the child imports this very package


def convert_in_child(src: Path, dst: Path, file_type: str) -> None:
    """convert_gguf(src, dst, file_type) in a child process; SpecdecError with its reason if it fails."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_PACKAGE_ROOT), env.get("PYTHONPATH", "")) if p)
    command = [sys.executable, "-m", "specdec_cli.llama.convert", str(src), str(dst), file_type]
    with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, start_new_session=True) as child:
        try:
            reason = child.stdout.read().decode("utf-8", errors="replace").strip()
            code = child.wait()
        except BaseException:  # Ctrl-C above all: the child must have stopped writing before the caller cleans up
            child.kill()
            child.wait()
            raise
    if code == 0:
        return
    if code < 0:  # a crash, or the kernel's out-of-memory killer
        raise SpecdecError(f"llama.cpp's converter ended by {signal_name(-code)} while converting {src.name} to {file_type}")
    raise SpecdecError(reason or f"converting {src.name} to {file_type} failed (the converter exited with {code})")


def convert_gguf(src: Path, dst: Path, file_type: str = "F32", n_threads: int = 0) -> None:
    """Rewrite a GGUF at another precision with llama.cpp's quantizer (requantizing allowed).

    Writes straight to `dst`; callers that need atomicity write to a temporary name first.
    The quantizer is one long C call that nothing interrupts: `convert_in_child` runs it in a child
    process that can be stopped. A failure is one line, llama.cpp's reason: "llama.cpp could
    not convert a.gguf to F32: failed to quantize: basic_ios::clear: iostream error".
    """
    captured = llama_log()
    params = lc.llama_model_quantize_default_params()
    params.nthread = n_threads
    params.ftype = FILE_TYPES[file_type][0]
    params.allow_requantize = True
    crashguard.mark(f"converting {src.name} to {file_type}")
    mark = captured.count
    rc = lc.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    captured.raise_pending()
    if rc != 0:
        raise SpecdecError(
            f"llama.cpp could not convert {src} to {file_type}: {captured.reason(mark)} (SPECDEC_LLAMA_LOG=1 shows llama.cpp's full log)"
        )


def _end_when_the_parent_goes() -> None:
    while os.read(0, 4096):  # b"" at end of file: the parent closed the pipe or died
        pass  # (os.read, not sys.stdin: a daemon thread in a buffered read breaks the interpreter's shutdown)
    os._exit(1)


def main(argv: list[str]) -> int:
    """The child: convert, and say on stdout why not."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # only the parent stops a conversion
    threading.Thread(target=_end_when_the_parent_goes, daemon=True).start()
    src, dst, file_type = argv
    try:
        convert_gguf(Path(src), Path(dst), file_type)
    except SpecdecError as exc:
        sys.stdout.write(" ".join(str(exc).split()) + "\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
