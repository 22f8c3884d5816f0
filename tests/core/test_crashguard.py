"""The crash guard (llama/crashguard.py) with real processes: a child that really segfaults, not a mock.

Each test runs a small Python program in a subprocess that calls `guard(...)`, so the fork,
the shared breadcrumb page, faulthandler's log and the parent's one line are all real. No
model is loaded (these run in well under a second each).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rpcfakes import AnsweringServer, closed_endpoint
from specdec_cli.llama.crashguard import describe

ROOT = Path(__file__).resolve().parents[2]


def guarded(body: str, tmp_path: Path, **kwargs) -> subprocess.Popen:
    """Start `guard(main)` where main runs `body` (Python source, indented by the caller's text)."""
    code = "import ctypes, os, sys, time\nfrom specdec_cli.llama.crashguard import guard, mark\ndef main():\n"
    code += "".join(f"    {line}\n" for line in body.splitlines())
    code += "guard(main)\n"
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    env.pop("SPECDEC_NO_FORK", None)
    return subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT, **kwargs
    )


def finish(proc: subprocess.Popen, input: str | None = None) -> tuple[int, str, str]:
    out, err = proc.communicate(input, timeout=60)
    return proc.returncode, out, err


def crash_logs(tmp_path: Path) -> list[Path]:
    return sorted(tmp_path.glob("specdec-crash-*.log"))


def test_a_real_segfault_gives_one_line_naming_the_activity_and_a_log(tmp_path):
    code, out, err = finish(guarded("mark('decoding with the draft tiny.gguf')\nctypes.string_at(0)", tmp_path))
    assert code == 1
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("specdec: error: llama.cpp crashed (signal 11, SIGSEGV) while decoding with the draft tiny.gguf;")
    assert "--no-repack" in lines[0] and "--gpu-layers 0" in lines[0]
    (log,) = crash_logs(tmp_path)
    assert str(log) in lines[0]
    text = log.read_text()
    assert "Segmentation fault" in text  # faulthandler's report, written by the dying child
    assert "string_at" in text or "line" in text  # with the Python stack


def test_an_abort_is_explained_too(tmp_path):
    code, _, err = finish(guarded("mark('loading the target big.gguf')\nos.abort()", tmp_path))
    assert code == 1
    assert "(signal 6, SIGABRT) while loading the target big.gguf" in err


def test_a_crash_over_rpc_names_the_server_that_does_not_answer_with_advice_for_rpc(tmp_path):
    """llama.cpp aborts when a connection to an RPC server breaks: the parent probes the servers the
    child marked (one answering, one refusing) and names the refusing one, without the CPU's advice."""
    with AnsweringServer() as good:
        closed = closed_endpoint()
        body = f"mark('decoding with the target t.gguf over RPC', ({good.endpoint!r}, {closed!r}))\nos.abort()"
        code, _, err = finish(guarded(body, tmp_path))
    (log,) = crash_logs(tmp_path)
    assert code == 1
    assert err == (
        "specdec: error: llama.cpp crashed (signal 6, SIGABRT) while decoding with the target t.gguf over RPC: "
        f"the RPC server at {closed} does not answer ({good.endpoint} does); check that it is running and reachable, "
        f"then try again; details in {log}\n"
    )


def test_a_crash_while_every_rpc_server_answers_keeps_the_cpus_advice(tmp_path):
    with AnsweringServer() as good:
        body = f"mark('decoding with the target t.gguf over RPC', ({good.endpoint!r},))\nos.abort()"
        code, _, err = finish(guarded(body, tmp_path))
    assert code == 1
    assert f"while decoding with the target t.gguf over RPC, though the RPC server at {good.endpoint} answers now; try --no-repack" in err


def test_a_normal_exit_code_passes_through_and_leaves_no_log(tmp_path):
    code, out, err = finish(guarded("print('text')\nsys.exit(3)", tmp_path))
    assert (code, out, err) == (3, "text\n", "")
    assert crash_logs(tmp_path) == []


def test_stdin_and_stdout_are_the_childs_own(tmp_path):
    proc = guarded("sys.stdout.write(sys.stdin.read().upper())", tmp_path, stdin=subprocess.PIPE)
    assert finish(proc, "piped prompt\n") == (0, "PIPED PROMPT\n", "")


def test_sigterm_to_the_parent_reaches_the_child_and_ends_both_by_sigterm(tmp_path):
    pid_file = tmp_path / "child.pid"
    proc = guarded(f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)", tmp_path)
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(pid_file.read_text())
    assert child != proc.pid
    proc.send_signal(signal.SIGTERM)
    code, _, err = finish(proc)
    assert code == -signal.SIGTERM and err == ""
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)
    assert crash_logs(tmp_path) == []


def test_sigint_sent_to_the_parent_with_kill_reaches_the_child_once(tmp_path):
    pid_file = tmp_path / "child.pid"
    body = (
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "try:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n    time.sleep(0.5)\n    print('interrupted once')\n    sys.exit(130)"
    )
    proc = guarded(body, tmp_path)
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    assert finish(proc) == (130, "interrupted once\n", "")


def test_describe_only_explains_deaths_by_a_signal():
    assert describe(0, "x", "/log") is None
    assert describe(3 << 8, "x", "/log") is None  # exit status 3
    assert describe(signal.SIGTERM, "x", "/log") is None  # passed on, not explained
    killed = describe(signal.SIGKILL, "loading the target t.gguf", "/log")
    assert killed is not None and "SIGKILL" in killed and "while loading the target t.gguf" in killed


def test_without_fork_guard_just_runs_main(tmp_path):
    env = {**os.environ, "SPECDEC_NO_FORK": "1", "TMPDIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    code = "import os\nfrom specdec_cli.llama.crashguard import guard\nguard(lambda: print(os.getpid()))"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    out, _ = proc.communicate(timeout=60)
    assert int(out) == proc.pid and proc.returncode == 0


def started_child(proc: subprocess.Popen, pid_file: Path) -> int:
    """The guarded child's pid, once its body has written it to `pid_file`."""
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    return int(pid_file.read_text())


def test_a_parent_stopped_and_continued_goes_on_and_ends_as_its_child(tmp_path):
    """Issue 73: `kill -STOP` then `kill -CONT` on specdec's pid. Stopped past the guard's wait
    (0.5 s), CPython's sigtimedwait returned an unfilled siginfo (si_signo -757740680, say), and
    the guard forwarded it: OSError (Errno 22) and exit 1 with a traceback, or a wrong signal."""
    pid_file = tmp_path / "child.pid"
    proc = guarded(f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(2.5)\nprint('done')\nsys.exit(4)", tmp_path)
    started_child(proc, pid_file)
    for _ in range(2):  # each stop outlasts the guard's 0.5 s wait
        proc.send_signal(signal.SIGSTOP)
        time.sleep(0.8)
        proc.send_signal(signal.SIGCONT)
        time.sleep(0.1)
    assert finish(proc) == (4, "done\n", "")
    assert crash_logs(tmp_path) == []


def process_state(pid: int) -> str:
    """The state letter in /proc/PID/stat: R running, S sleeping, T stopped."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def wait_for_state(pid: int, state: str) -> str:
    deadline = time.monotonic() + 10
    while process_state(pid) != state and time.monotonic() < deadline:
        time.sleep(0.02)
    return process_state(pid)


def test_a_tstp_sent_to_the_parent_pauses_the_child_and_a_cont_resumes_both(tmp_path):
    """`kill -TSTP` pauses the generation itself (the child), not only the waiting parent; `kill -CONT` resumes it."""
    pid_file = tmp_path / "child.pid"
    proc = guarded(f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(1.5)\nprint('done')", tmp_path)
    child = started_child(proc, pid_file)
    proc.send_signal(signal.SIGTSTP)
    assert wait_for_state(child, "T") == "T"
    assert wait_for_state(proc.pid, "T") == "T"
    time.sleep(2)  # longer than the child's sleep: stopped, it cannot finish meanwhile
    assert proc.poll() is None and process_state(child) == "T"
    proc.send_signal(signal.SIGCONT)
    assert finish(proc) == (0, "done\n", "")
