"""A native crash is never silent: the `specdec` process forks, and the parent explains a crash.

A segfault inside llama.cpp cannot be caught in Python, but it can be explained by a
process that did not crash. So `guard(main)` forks once, before llama.cpp has started anything
(its libraries and numpy are loaded by then, __init__.py says why; it has no backend, thread
or model yet):

    parent: waits; forwards SIGTERM (and a SIGINT/SIGHUP sent to its pid with `kill`), SIGTSTP and SIGCONT, to the child
    child:  runs the command; marks what it is doing in a shared page (`mark("decoding with the
            draft tinydraft.gguf")`, and the RPC servers it uses, if any); faulthandler writes the
            Python stack to a log file

If the child dies by SIGSEGV, SIGBUS, SIGILL, SIGFPE or SIGABRT, the parent prints one line

    specdec: error: llama.cpp crashed (signal 11, SIGSEGV) while decoding with the draft
    tinydraft.gguf; try --no-repack, or --gpu-layers 0; details in /tmp/specdec-crash-ab12.log

and exits 1 (a runtime failure, as README's exit codes say; the line names the signal).
Where the activity used RPC servers (llama.cpp aborts when a connection to one breaks), the
parent probes them (rpc.blame: the child's connections are closed by then) and names the
failed one instead of the CPU's advice:

    specdec: error: llama.cpp crashed (signal 6, SIGABRT) while decoding with the target
    t.gguf over RPC: the RPC server at 10.0.0.2:50052 does not answer (10.0.0.3:50052 does);
    check that it is running and reachable, then try again; details in /tmp/specdec-crash-ab12.log

A SIGKILL (the kernel's out-of-memory killer) is explained the same way. Any other end is
passed on unchanged: the child's exit code, or the same signal raised on the parent (so a
shell still sees 143 after `kill`). Ctrl-C on a terminal reaches the child directly (the
terminal signals the whole foreground group), so the parent does not forward a SIGINT the
kernel sent: the child must not see it twice. stdin, stdout and stderr are inherited, not
piped: ttys, colour detection and `specdec run - < file` behave as without the fork.

Pausing: `kill -TSTP PID` stops the child and then the parent, and `kill -CONT PID` resumes
both (the parent passes SIGCONT on); Ctrl-Z and `fg` reach both already, as Ctrl-C does. A
SIGSTOP cannot be caught, so `kill -STOP PID` stops only the parent while the child goes on;
stop the whole group instead (`kill -STOP -- -PID` when specdec leads its group). A stop that
outlasts the parent's wait (half a second) ends that wait in a siginfo CPython never filled
in (`signal.sigtimedwait` after EINTR past its deadline: si_signo -757740680, say), so the
parent acts only on the signals it waits for and skips any other number.

Why a fork and not a subprocess: the child is the same interpreter with the same parsed
state and file descriptors, there is nothing to re-exec, and it costs about a millisecond.
Where there is no fork (Windows) or SPECDEC_NO_FORK=1 (for a debugger), `guard` just calls main;
so it does when the caller has replaced sys.stdout or sys.stderr (a test harness, a program
embedding specdec): a forked child would write into its own copy, which the caller never sees.
The child never returns into its caller's stack: it ends with os._exit once main is done.

Left out: the commands themselves (cli/app.py), catching anything inside the child.
"""

from __future__ import annotations

import atexit
import faulthandler
import mmap
import os
import signal
import sys
import tempfile
import traceback
from dataclasses import dataclass
from typing import Callable, NoReturn

from . import rpc

CRASH_SIGNALS = (signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT)
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_JOB_CONTROL = (signal.SIGTSTP, signal.SIGCONT)  # a pause and a resume, passed on to the child too
_WAITED = (*_FORWARDED, *_JOB_CONTROL, signal.SIGCHLD)  # blocked in the parent, which takes them with sigtimedwait
_PAGE = 4096
_SI_KERNEL = 0x80  # siginfo.si_code of a signal the kernel raised (a terminal's Ctrl-C)
HINT = "try --no-repack, or --gpu-layers 0"


@dataclass
class _Breadcrumb:
    """The shared page the child writes its current activity into, and the crash log file."""

    page: mmap.mmap
    log_path: str
    log_file: object = None
    last: tuple[str, tuple[str, ...]] = ("", ())


# The one process-wide guard, set once in the child by `guard` (like faulthandler's own
# file): `mark` must be callable from any layer without passing an object down.
_active: list[_Breadcrumb] = []


def mark(activity: str, servers: tuple[str, ...] = ()) -> None:
    """Record what the process is doing now, and the RPC servers it uses for that (no-op without a
    guard). Example: ("decoding with the target x.gguf over RPC", ("10.0.0.2:50052",))."""
    if not _active:
        return
    crumb = _active[0]
    if (activity, servers) == crumb.last:
        return
    crumb.last = (activity, servers)
    data = activity.encode("utf-8", errors="replace") + b"\0" + ",".join(servers).encode("utf-8", errors="replace")
    data = data[: _PAGE - 1]
    crumb.page[: len(data) + 1] = data + b"\0"


def read_mark(page: mmap.mmap) -> tuple[str, tuple[str, ...]]:
    """The activity and the RPC servers `mark` wrote last."""
    activity, servers, _ = (bytes(page[:_PAGE]) + b"\0\0").split(b"\0", 2)
    listed = servers.decode("utf-8", errors="replace")
    return activity.decode("utf-8", errors="replace"), tuple(listed.split(",")) if listed else ()


def describe(status: int, activity: str, log_path: str, servers: tuple[str, ...] = ()) -> str | None:
    """The one line for a child that died by `status` (a wait status), or None if it was no crash.
    With RPC servers, a crash's line says which of them answer now (rpc.blame probes them)."""
    if not os.WIFSIGNALED(status):
        return None
    number = os.WTERMSIG(status)
    doing = f" while {activity}" if activity else ""
    if number in CRASH_SIGNALS:
        crashed = f"llama.cpp crashed ({signal_name(number)}){doing}"
        blamed, found = rpc.blame(servers)
        if blamed:
            return f"{crashed}: {found}, then try again; details in {log_path}"
        if found:
            crashed += f", though {found} now"
        return f"{crashed}; {HINT}; details in {log_path}"
    if number == signal.SIGKILL:
        return f"specdec was killed (signal 9, SIGKILL){doing}; if the system ran out of memory, try a smaller --ctx"
    return None


def signal_name(number: int) -> str:
    """Example: 11 -> 'signal 11, SIGSEGV'; a number no signal has -> 'signal 99, unknown'."""
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = "unknown"
    return f"signal {number}, {name}"


def guard(main: Callable[[], object]) -> NoReturn:
    """Run `main` in a forked child and explain a native crash; exits with the child's outcome."""
    own_streams = sys.stdout is sys.__stdout__ and sys.stderr is sys.__stderr__
    if not hasattr(os, "fork") or not own_streams or os.environ.get("SPECDEC_NO_FORK", "") not in ("", "0"):
        main()
        sys.exit(0)
    page = mmap.mmap(-1, _PAGE)  # anonymous and shared: the child's writes are visible here
    fd, log_path = tempfile.mkstemp(prefix="specdec-crash-", suffix=".log")
    os.close(fd)
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:  # None: started with that descriptor closed (>&-); the command says so
            stream.flush()
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _WAITED)
    pid = os.fork()
    if pid == 0:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        crumb = _Breadcrumb(page, log_path, open(log_path, "w", encoding="utf-8"))
        _active.append(crumb)
        faulthandler.enable(file=crumb.log_file, all_threads=True)
        _exit_child(main)
    status = _wait(pid)
    activity, servers = read_mark(page)
    message = describe(status, activity, log_path, servers)
    if message is None:
        os.unlink(log_path)
        if os.WIFSIGNALED(status):  # end the same way, so a shell sees 128 + the signal
            number = os.WTERMSIG(status)
            signal.signal(number, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
            os.kill(os.getpid(), number)
        sys.exit(os.waitstatus_to_exitcode(status))
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"\ncommand: {' '.join(sys.argv)}\n{message}\n")
    sys.stderr.write(f"specdec: error: {message}\n")
    sys.stderr.flush()
    sys.exit(1)


def _exit_child(main: Callable[[], object]) -> NoReturn:
    """Run main and end the child as Python would end a process, without unwinding into the caller."""
    code = 0
    try:
        main()
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        code = -signal.SIGINT
    except BaseException:
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
    if code == -signal.SIGINT:  # as Python ends on an uncaught KeyboardInterrupt
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code & 0xFF)


def _wait(pid: int) -> int:
    """Wait for the child, passing on the signals meant for it; return its wait status."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        info = signal.sigtimedwait(_WAITED, 0.5)
        if info is None or info.si_signo not in _WAITED or info.si_signo == signal.SIGCHLD:
            continue  # not one we wait for: the unfilled siginfo of a wait a stop outlasted (see above)
        number, sent = info.si_signo, info.si_code != _SI_KERNEL  # sent: by `kill`, not by the terminal
        if number == signal.SIGCONT:
            _send(pid, number)  # resumes a child stopped by a SIGTSTP we passed on; a no-op for a running one
        elif number == signal.SIGTSTP:
            # Passed on whoever sent it: where the terminal's Ctrl-Z has stopped the child already it
            # is a no-op (the SIGCONT that resumes it discards it), and si_code is not to be trusted
            # after a stop (see above): in a long test run a `kill -TSTP` left the child running.
            _send(pid, number)
            if signal.getsignal(signal.SIGTSTP) != signal.SIG_IGN:
                os.kill(os.getpid(), signal.SIGSTOP)  # stop as SIGTSTP would have stopped us; returns on SIGCONT
        elif number == signal.SIGTERM or sent:
            _send(pid, number)


def _send(pid: int, number: int) -> None:
    try:
        os.kill(pid, number)
    except ProcessLookupError:  # the child has just ended; waitpid says how
        pass
