"""Reading what the user points specdec at (files, stdin, argv text) without hanging or a traceback.

Opening a FIFO for reading blocks until a writer appears, and a device or socket is not a
file at all, so every input file (a model, a prompt file, a models.toml) is looked at with
`os.stat` first and refused unless it is a regular file. The OS errors that `Path.exists()`
lets through (a name too long for the file system, a symlink loop, no permission to look)
become one-line `BadInput`s that name the path:

    regular_file(Path("/tmp/fifo"), "model file")
    -> BadInput("model file /tmp/fifo is a FIFO (named pipe), not a regular file; give the path of the file itself")

`writable_file` checks an output path (--csv, --plot) by creating it, before a long run.

Text is UTF-8 whatever the locale: stdin is read as bytes and decoded here, and text from
argv (which Python decodes with surrogateescape, so invalid bytes arrive as lone
surrogates) is checked the same way, so both say which byte is wrong:

    argv_text("caf\\udce9", "the prompt")   # b"caf\\xe9" on the command line
    -> BadInput("the prompt is not valid UTF-8 (byte 0xe9 at offset 3); convert it ...")

Left out: what the files hold (llama/gguf.py checks the GGUF magic, models/catalogue.py the TOML), and
a stdin that is a folder at start-up (`< /`): Python itself refuses to start then.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from pathlib import Path

from .errors import BadInput, ModelNotFound

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def kind_of(mode: int) -> str:
    """'a directory', 'a FIFO (named pipe)', ... or 'not a regular file' for a mode that is not a regular file."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def os_reason(exc: OSError) -> str:
    """The OS's reason in words, with a hint for the errors a user can fix. ENAMETOOLONG -> 'file name too long ...'."""
    if exc.errno == errno.ENAMETOOLONG:
        return "file name too long for the file system (a name holds at most 255 bytes); check the path"
    if exc.errno == errno.ELOOP:
        return "too many levels of symbolic links (a symlink loop?)"
    return exc.strerror.lower() if exc.strerror else str(exc)


def file_problem(path: Path) -> str | None:
    """Why `path` is not a regular file, as the end of a sentence ("is a FIFO (named pipe)"), or None. Never opens it."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return "does not exist"
    except OSError as exc:
        return f"cannot be looked at: {os_reason(exc)}"
    except ValueError:
        return "contains a NUL byte"
    return None if stat.S_ISREG(st.st_mode) else f"is {kind_of(st.st_mode)}"


def regular_file(path: Path, what: str) -> os.stat_result:
    """The stat of `path` if it is a regular file (symlinks followed); ModelNotFound or BadInput otherwise. Never opens it."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        raise ModelNotFound(f"{what} not found: {path}") from None
    except OSError as exc:
        raise BadInput(f"cannot look at the {what} {path}: {os_reason(exc)}") from None
    except ValueError:  # an embedded NUL byte
        raise BadInput(f"the {what} path {str(path)!r} contains a NUL byte") from None
    if not stat.S_ISREG(st.st_mode):
        raise BadInput(f"{what} {path} is {kind_of(st.st_mode)}, not a regular file; give the path of the file itself")
    return st


def read_head(path: Path, n: int, what: str) -> bytes:
    """The first `n` bytes of a regular file, opened non-blocking (in case it was swapped for a FIFO since the stat)."""
    regular_file(path, what)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            return os.read(fd, n)
        finally:
            os.close(fd)
    except OSError as exc:
        raise BadInput(f"cannot read the {what} {path}: {os_reason(exc)}") from None


def read_text_file(path: Path, what: str) -> str:
    """A regular file's text, which must be UTF-8; BadInput naming the first bad byte otherwise."""
    regular_file(path, what)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with open(fd, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise BadInput(f"cannot read the {what} {path}: {os_reason(exc)}") from None
    return decode_utf8(data, f"the {what} {path}")


def decode_utf8(data: bytes, what: str) -> str:
    """UTF-8 bytes as text (a leading BOM dropped); BadInput naming the first invalid byte and its offset."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        bad = data[exc.start : exc.start + 1]
        raise BadInput(
            f"{what} is not valid UTF-8 (byte 0x{bad.hex()} at offset {exc.start}); "
            "convert it to UTF-8, e.g. iconv -f latin1 -t utf-8"
        ) from None


def writable_file(path: Path, option: str) -> None:
    """Fail now if `path` cannot be written: its folder is missing, it is a folder, or creating it fails.

    An existing file is opened for appending (its content kept); a new one is created and removed again.
    """
    path = path.expanduser()
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise BadInput(f"{option}: cannot write {path}: {os_reason(exc)}") from None
    if st is not None and (stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode)):
        _has_reader(path, option)  # /dev/stdout, a pipe someone reads: fine
        return
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise BadInput(f"{option}: {path} is {kind_of(st.st_mode)}; give the path of a file to write")
    if st is None and not path.parent.is_dir():
        raise BadInput(f"{option}: the folder of {path} does not exist; create it first")
    try:
        with open(path, "ab"):
            pass
    except OSError as exc:
        raise BadInput(f"{option}: cannot write {path}: {os_reason(exc)}") from None
    if st is None:
        path.unlink(missing_ok=True)


def _has_reader(path: Path, option: str) -> None:
    """A FIFO or device opened for writing without blocking: ENXIO means a FIFO nobody reads (writing would hang)."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise BadInput(f"{option}: {path} is a FIFO (named pipe) with no reader; start the reader first or give a file") from None
        raise BadInput(f"{option}: cannot write {path}: {os_reason(exc)}") from None


def argv_text(text: str, what: str) -> str:
    """Text from the command line, refused if it holds bytes that are not UTF-8 (lone surrogates from surrogateescape)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        decode_utf8(text.encode("utf-8", "surrogateescape"), what)  # raises, naming the byte
        raise BadInput(f"{what} holds characters that are not valid Unicode (lone surrogates); pass UTF-8 text") from None
    return text


def read_stdin(what: str) -> str:
    """All of stdin as UTF-8 text, whatever the locale; BadInput if stdin is closed, a folder, or not UTF-8."""
    stream = sys.stdin
    if stream is None:  # started with stdin closed (<&-)
        raise BadInput(f"stdin is closed, so {what} cannot be read from it; pipe it in or pass it as an argument")
    try:
        buffer = getattr(stream, "buffer", None)
        data = buffer.read() if buffer is not None else stream.read().encode("utf-8", "surrogateescape")
    except OSError as exc:  # `< /` gives EISDIR; a closed descriptor EBADF
        raise BadInput(f"cannot read {what} from stdin: {os_reason(exc)}") from None
    except UnicodeDecodeError as exc:  # a text-only stdin that decodes by itself
        raise BadInput(f"{what} on stdin is not valid UTF-8 ({exc.reason}); convert it to UTF-8") from None
    return decode_utf8(data, f"{what} on stdin")
