"""Fixtures for `specdec serve`'s tests: the real server, started once per module.

`start_server(*extra)` runs `python -m specdec_cli.cli serve --port 0 --temperature 0 -n 24` (the
built-in pair), reads its stderr until `specdec: listening on http://127.0.0.1:PORT`, polls
GET /health until 200 (the models loaded) and stops it with SIGTERM at the end; `live_server` is
one of them for a whole module; `served` is the toy pair behind the app in this process
(toyserver.py), and `serve` starts more of them, each with its own arguments, stopped at the end:
`s = serve(toy_pair(), slots=2)`. The real server's
stderr keeps being read (a full pipe would stall the server) and goes into any failure.
Example: live_server.url -> "http://127.0.0.1:41237".

Only one llama.cpp process may run at a time: tests that use it carry the `model` marker.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest

from toyserver import Served, toy_pair

REPO = Path(__file__).resolve().parents[2]
SERVE = [sys.executable, "-m", "specdec_cli.cli", "serve", "--port", "0", "--temperature", "0", "-n", "24", "--slots", "4"]  # the default depends on free memory
LISTENING = re.compile(r"specdec: listening on (http://127\.0\.0\.1:\d+)")
START_SECONDS = 60  # to the "listening" line: Python's imports, before any model loads
LOAD_SECONDS = 120  # to /health 200: both models loaded (the F32 target converted on a first run)


@dataclass
class LiveServer:
    url: str
    process: subprocess.Popen
    stderr: list[str] = field(default_factory=list)
    reader: threading.Thread | None = None  # drains stderr into `stderr` until the process ends

    def log(self) -> str:
        return "".join(self.stderr[-60:])

    def finished(self, timeout: float) -> tuple[int, list[str]]:
        """Wait for the process to end: its exit code and every stderr line it wrote."""
        code = self.process.wait(timeout=timeout)
        if self.reader is not None:
            self.reader.join(timeout)
        return code, [line.rstrip("\n") for line in self.stderr]


def _health(url: str) -> int:
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


@contextlib.contextmanager
def start_server(*extra: str, code: str | None = None, wait_healthy: bool = True) -> Iterator[LiveServer]:
    """One `specdec serve` process (SERVE + extra), stopped with SIGTERM at the end if still running.

    `code` replaces `-m specdec_cli.cli`: a program that ends by calling cli.app.main, with
    the arguments as argv (a test that patches llama.cpp first).
    """
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    env.pop("SPECDEC_API_KEY", None)  # the tests talk without a key
    env.pop("SPECDEC_NO_FORK", None)  # the crash guard's fork, as users run it
    env.setdefault("SPECDEC_CACHE", str(Path.home() / ".cache" / "specdec"))
    command = [*SERVE, *extra] if code is None else [sys.executable, "-c", code, *SERVE[3:], *extra]
    process = subprocess.Popen(command, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace")  # fmt: skip
    lines: list[str] = []
    found = threading.Event()
    address: list[str] = []

    def drain() -> None:
        for line in process.stderr:
            lines.append(line)
            match = LISTENING.search(line)
            if match and not found.is_set():
                address.append(match.group(1))
                found.set()
        found.set()  # stderr closed: the process is gone

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        if not found.wait(START_SECONDS) or not address:
            pytest.fail(f"specdec serve printed no 'listening on' line in {START_SECONDS} s (exit {process.poll()}):\n{''.join(lines[-60:])}")
        server = LiveServer(address[0], process, lines, reader)
        deadline = time.monotonic() + LOAD_SECONDS
        status = _health(server.url)
        while wait_healthy and status != 200:
            if process.poll() is not None or status == 500 or time.monotonic() > deadline:
                pytest.fail(f"specdec serve never became healthy (last /health {status}, exit {process.poll()}):\n{server.log()}")
            time.sleep(0.5)
            status = _health(server.url)
        yield server
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


@pytest.fixture
def serve():
    """Start toyserver.Served apps: `s = serve(pair, **Served's keywords)`, not waited for (the test
    waits on s.worker.ready where it needs the load done). Every one started is stopped at teardown,
    the last first; a test that checks something after a stop calls s.stop() itself (stopping twice
    does no harm)."""
    with contextlib.ExitStack() as started:

        def start(pair, **options) -> Served:
            s = Served(pair, **options)
            started.callback(s.stop)
            return s

        yield start


@pytest.fixture
def served():
    """The toy pair behind the app in this process (toyserver.Served), loaded."""
    s = Served(toy_pair())
    assert s.worker.ready.wait(10)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def live_server():
    with start_server() as server:
        yield server
