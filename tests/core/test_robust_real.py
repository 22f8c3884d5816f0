"""Issue 9 with the real built-in pair, through real `specdec` subprocesses (marker `model`).

A native crash inside llama.cpp (the AMX repack segfault of llama.cpp #20824) kills the
process it happens in; here that process is always a child of pytest, so a crash fails the
one test that met it, with the crash guard's line in the message, and the suite goes on.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.model


def specdec(*args: str, code: str | None = None, env: dict | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    """`python -m specdec_cli.cli ARGS`, or `code` (which ends by calling cli.app.main) with ARGS as argv."""
    command = [sys.executable, "-m", "specdec_cli.cli", *args] if code is None else [sys.executable, "-c", code, *args]
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    full_env.pop("SPECDEC_NO_FORK", None)
    return subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=full_env, timeout=timeout, cwd=ROOT)


def explain(proc: subprocess.CompletedProcess) -> str:
    if proc.returncode < 0:
        return f"specdec died by signal {-proc.returncode} with no explanation (crash guard missing?); stderr:\n{proc.stderr}"
    return f"exit {proc.returncode}; stderr:\n{proc.stderr}"


def test_default_settings_decode_the_quantized_draft_in_a_subprocess(builtin_paths):
    """The README's command at its defaults (repack left to auto) on the Q4_1 draft: a crash fails here, clearly."""
    proc = specdec("run", "--temperature", "0", "-n", "16", "-k", "4", "--json", "Write a haiku about the sea")
    assert proc.returncode == 0, "specdec run with default settings failed: " + explain(proc)
    out = json.loads(proc.stdout)
    assert out["stats"]["new_tokens"] >= 1 and out["stats"]["drafted"] >= 1  # the Q4_1 draft really decoded


def llama_cpp_reports_amx() -> bool:
    """What the installed llama.cpp says of this CPU (`AMX_INT8 = 1` in its system info)."""
    from specdec_cli.llama.platform import has_amx, system_info

    return has_amx(system_info())


@pytest.mark.parametrize("flag", ["--repack", "--no-repack"])
def test_both_repack_settings_run_end_to_end(builtin_paths, flag):
    """Both settings decode, except --repack where llama.cpp reports AMX.

    There its AMX buffer type crashes (llama.cpp #20824; SIGSEGV on one Intel CPU, SIGILL on
    another), and what is asserted is that the crash is explained: exit 1 (no signal exit),
    nothing on stdout, the crash guard's one line last, no Python traceback.
    """
    proc = specdec("run", "--temperature", "0", "-n", "8", "-k", "4", "--json", flag, "Hello", env={"SPECDEC_LLAMA_LOG": "1"})
    if flag == "--repack" and llama_cpp_reports_amx():
        assert proc.returncode == 1, "on an AMX CPU --repack should crash and be explained: " + explain(proc)
        assert proc.stdout == "" and "Traceback" not in proc.stderr, proc.stderr[-2000:]
        line = proc.stderr.strip().splitlines()[-1]
        assert re.fullmatch(
            r"specdec: error: llama\.cpp crashed \(signal \d+, SIG[A-Z]+\) while [a-z]+ with the (draft|target) \S+\.gguf; "
            r"try --no-repack, or --gpu-layers 0; details in \S+", line
        ), line  # fmt: skip
        return
    assert proc.returncode == 0, explain(proc)
    assert json.loads(proc.stdout)["stats"]["new_tokens"] >= 1
    # llama.cpp's log (echoed by SPECDEC_LLAMA_LOG=1) names the CPU_REPACK buffer type only when
    # extra buffer types are on: it puts tensors there, or says they "cannot be used with" it.
    assert ("CPU_REPACK" in proc.stderr) is (flag == "--repack"), proc.stderr[-2000:]


def test_a_crash_inside_llama_decode_names_the_model_and_what_to_try(builtin_paths, tmp_path):
    """llama_decode replaced by a real segfault (ctypes reads address 0) in the real code path."""
    code = textwrap.dedent(
        """
        import ctypes, sys
        from specdec_cli.llama import model as backend
        from specdec_cli.cli import app as cli
        backend.lc.llama_decode = lambda ctx, batch: ctypes.string_at(0)
        sys.argv = ["specdec", *sys.argv[1:]]
        cli.main()
        """
    )
    proc = specdec("run", "--temperature", "0", "-n", "4", "Hello", code=code, env={"TMPDIR": str(tmp_path)})
    assert proc.returncode == 1, explain(proc)
    (line,) = proc.stderr.strip().splitlines()[-1:]
    assert line.startswith("specdec: error: llama.cpp crashed (signal 11, SIGSEGV) while decoding with the target SmolLM2-135M-Instruct.F32.gguf")
    assert "try --no-repack, or --gpu-layers 0; details in " in line
    log = Path(line.rsplit("details in ", 1)[1])
    assert log.parent == tmp_path and "Segmentation fault" in log.read_text()


def test_ctx_8_with_16_draft_tokens_runs_in_the_padded_context(builtin_paths):
    proc = specdec("run", "--temperature", "0", "-n", "8", "-k", "16", "--ctx", "8", "--json", "Hi")
    assert proc.returncode == 0, explain(proc)
    stats = json.loads(proc.stdout)["stats"]
    assert stats["ctx_requested"] == 8 and stats["ctx"] >= 8 and stats["draft_ctx"] == stats["ctx"]
    assert stats["ctx"] == 256  # llama.cpp pads to 256 (if that changes, the report still says what it did)


def test_a_context_too_large_for_memory_is_refused_before_allocating(builtin_paths):
    proc = specdec("run", "--temperature", "0", "-n", "4", "--ctx", "4294967295", "Hi", timeout=120)
    assert proc.returncode == 2, explain(proc)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("specdec: error: a context of 4294967295 tokens for SmolLM2-135M-Instruct.F32.gguf needs a ")
    assert "tokens fit: pass a smaller --ctx or --draft-ctx" in lines[0]


def test_ctrl_c_inside_llama_cpps_log_callback_during_a_load_exits_130(builtin_paths):
    """The SIGINT arrives while llama.cpp is inside the load and logging (the callback's own echo).

    Before the fix ctypes printed the KeyboardInterrupt and dropped it, and the run went on.
    """
    code = textwrap.dedent(
        """
        import os, signal, sys
        class Interrupting:
            def __init__(self, inner): self.inner, self.sent = inner, False
            def write(self, text):
                if not self.sent and "llama_model_loader" in text:
                    self.sent = True
                    os.kill(os.getpid(), signal.SIGINT)  # handled at the next bytecode: inside the callback
                return self.inner.write(text)
            def __getattr__(self, name): return getattr(self.inner, name)
        sys.stderr = Interrupting(sys.stderr)
        sys.argv = ["specdec", *sys.argv[1:]]
        from specdec_cli.cli import app as cli
        cli.main()
        """
    )
    proc = specdec("run", "--temperature", "0", "-n", "4", "--no-stats", "Hi", code=code, env={"SPECDEC_LLAMA_LOG": "1"})
    assert proc.returncode == 130, explain(proc)
    assert proc.stdout == ""
    assert proc.stderr.strip().splitlines()[-1] == "specdec: interrupted"
    assert "Exception ignored" not in proc.stderr


def test_a_conversion_killed_outright_leaves_a_partial_that_the_next_start_removes(builtin_paths, tmp_path):
    """A conversion killed outright (SIGKILL; SIGTERM cleans up, test_faults) cannot clean up; the
    next conversion into that folder does. Without the crash guard's fork, so that the process
    killed is the one whose pid names the partial file."""
    from specdec_cli.models.cache import converted_path, ensure_converted

    draft = builtin_paths[0]
    cache = tmp_path / "cache"
    proc = subprocess.Popen(
        [sys.executable, "-m", "specdec_cli.cli", "run", "-n", "1", "Hi"],
        env={**os.environ, "PYTHONPATH": str(ROOT), "SPECDEC_CACHE": str(cache), "SPECDEC_NO_FORK": "1"},
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
    )  # fmt: skip
    try:
        import time

        deadline = time.monotonic() + 120
        while not list(cache.glob(".*.partial")) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        partials = list(cache.glob(".*.partial"))
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert partials, "the conversion never started"
    assert proc.returncode == -signal.SIGKILL
    left = list(cache.glob(".*.partial"))
    dst = converted_path(draft, "F32", cache)
    assert left and not dst.exists(), "SIGKILL came too late to leave a half-written file"
    ensure_converted(draft, "F32", directory=cache)
    assert dst.exists() and list(cache.glob(".*.partial")) == []
