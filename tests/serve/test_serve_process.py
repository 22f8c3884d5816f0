"""`specdec serve` as a process a supervisor runs: how it ends (SIGTERM mid-answer: exit 0; a
native crash inside llama.cpp: the crash guard's one line, exit 1) and how it refuses to start.

Each test starts its own server process (tests/serve/conftest.py's start_server), one at a time.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import REPO, SERVE, start_server

pytestmark = pytest.mark.model


def stream_in_background(url: str, body: dict) -> tuple[threading.Thread, threading.Event]:
    """POST a streaming request and read it to its end (or the connection's) in a thread; the
    event is set once the first bytes of the answer arrived (generation is under way)."""
    answering = threading.Event()

    def read() -> None:
        request = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                response.read(64)
                answering.set()
                response.read()
        except OSError:
            pass  # the server went away mid-answer: what the test is about

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread, answering


def test_sigterm_mid_answer_cancels_it_and_exits_0(builtin_paths):
    with start_server() as server:
        reader, answering = stream_in_background(server.url, {"messages": [{"role": "user", "content": "Tell me a long story."}], "max_tokens": 2000, "stream": True})
        assert answering.wait(60), server.log()
        time.sleep(1.0)  # a second of generating
        sent = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        code, lines = server.finished(timeout=60)
        reader.join(30)
    assert code == 0, "\n".join(lines[-20:])
    assert time.monotonic() - sent < 20  # the grace period (5 s) and the worker's round, not 2000 tokens
    assert not any("Traceback" in line for line in lines), "\n".join(lines)


def test_a_native_crash_in_llama_cpp_ends_the_server_with_the_guards_line_and_exit_1(builtin_paths, tmp_path):
    """llama_decode replaced by a real segfault (ctypes reads address 0) once the models are loaded."""
    code = textwrap.dedent(
        """
        import ctypes, sys
        from specdec_cli.llama import model as backend
        from specdec_cli.cli import app
        real = backend.lc.llama_decode
        calls = {"n": 0}
        def decode(ctx, batch):
            if batch.n_tokens == 1 and calls["n"] > 0:  # the first decode after a request's prefill
                ctypes.string_at(0)
            calls["n"] += batch.n_tokens > 1
            return real(ctx, batch)
        backend.lc.llama_decode = decode
        sys.argv = ["specdec", *sys.argv[1:]]
        app.main()
        """
    )
    with start_server(code=code) as server:
        body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, "draft_tokens": 1}
        request = urllib.request.Request(server.url + "/v1/chat/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        with pytest.raises(OSError):
            urllib.request.urlopen(request, timeout=60).read()
        status, lines = server.finished(timeout=60)
    assert status == 1, "\n".join(lines[-20:])
    assert lines[-1].startswith("specdec: error: llama.cpp crashed (signal 11, SIGSEGV) while decoding with the "), lines[-5:]
    assert "try --no-repack, or --gpu-layers 0; details in " in lines[-1]


def test_a_port_in_use_is_one_line_and_exit_1(builtin_paths):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        proc = subprocess.run([*SERVE[:4], "--port", str(port)], cwd=REPO, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 1, proc.stderr
    (line,) = [l for l in proc.stderr.splitlines() if l.startswith("specdec: error")]
    assert line == f"specdec: error: cannot listen on 127.0.0.1:{port}: address already in use; pass another --port (0 picks a free one)"
    assert "Traceback" not in proc.stderr and proc.stdout == ""


@pytest.mark.parametrize(
    "args, message",
    [
        (["--port", "70000"], "specdec: error: --port must be between 0 and 65535, got 70000"),
        (["--queue", "0"], "specdec: error: --queue must be at least 1, got 0"),
        (["--slots", "0"], "specdec: error: --slots must be between 1 and 64, got 0"),
        (["--max-connections", "0"], "specdec: error: --max-connections must be at least 1, got 0"),
        (["--request-timeout", "0"], "specdec: error: --request-timeout must be more than 0 seconds, got 0"),
        (["--api-key-file", "/nonexistent/keys"], "specdec: error: --api-key-file /nonexistent/keys: No such file or directory"),
        (["--api-key-file", "/dev/null"], "specdec: error: --api-key-file /dev/null: it holds no key (one per line; # starts a comment)"),
        (["--top-p", "2"], "specdec: error: --top-p must be in (0, 1], got 2.0"),
        (["--api-key", ""], "specdec: error: --api-key must not be empty (unset SPECDEC_API_KEY for no key)"),
        (["--admin-key-file", "/dev/null"], "specdec: error: --admin-key-file /dev/null: it holds no key (one per line; # starts a comment)"),
    ],
)
def test_bad_options_are_refused_before_anything_loads(args, message):
    proc = subprocess.run([sys.executable, "-m", "specdec_cli.cli", "serve", *args], cwd=REPO, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and proc.stderr.strip() == message and proc.stdout == ""


@pytest.mark.parametrize("admin", ["", "shared"])
def test_an_empty_admin_key_or_one_a_tenant_holds_is_refused(admin):
    env = {**os.environ, "SPECDEC_ADMIN_KEY": admin}
    proc = subprocess.run([sys.executable, "-m", "specdec_cli.cli", "serve", "--api-key", "shared"], cwd=REPO, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, env=env)
    message = "SPECDEC_ADMIN_KEY must not be empty (unset it for no key)" if not admin else "an admin key is also an API key; give the admin a key of its own"
    assert proc.returncode == 2 and proc.stderr.strip() == "specdec: error: " + message and proc.stdout == ""


def test_a_key_file_gives_one_tenant_per_line_and_a_public_address_without_a_key_warns(builtin_paths, tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text("# the team\nalpha-key\n\n  beta-key  # Bo's\n")
    with start_server("--api-key-file", str(keys)) as server:
        ask = lambda key: urllib.request.urlopen(urllib.request.Request(server.url + "/v1/models", headers={"Authorization": f"Bearer {key}"}), timeout=30).status  # noqa: E731
        assert ask("alpha-key") == ask("beta-key") == 200
        with pytest.raises(urllib.error.HTTPError) as refused:
            ask("the team")
        assert refused.value.code == 401
    proc = subprocess.Popen([*SERVE, "--host", "0.0.0.0"], cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in proc.stderr:  # up to the line that says the port is open
            lines.append(line)
            if "specdec: listening on" in line:
                break
        assert any(l.startswith("specdec: warning: listening on 0.0.0.0 without --api-key: anyone who reaches port ") for l in lines), lines
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
