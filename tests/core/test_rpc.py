"""The target on another machine: llama.cpp's RPC backend with the built-in pair (marker `model`).

A `ggml-rpc-server` is built once from the llama.cpp that the installed llama-cpp-python
vendors (benchmarks/build_rpc_server.sh, cached under ~/.cache/specdec/rpc-server/; about 5
minutes the first time) and started on 127.0.0.1. Checked through it:

- the protocol version specdec expects (llama/rpc.PROTOCOL) is the server's;
- greedy identity: the built-in pair with the target over RPC decodes what the local target
  alone decodes;
- the first token's law at T = 1 through RPC: N = 1,000 generations (k = 4), one chi-square
  test at false-failure 1e-4 (stat_checks.ALPHA), seeds 0..999;
- faults, each one line naming the endpoint and exit 1: an endpoint that does not answer, a
  server of another protocol version (a fake one here), a server that goes away mid-generation
  (benchmarks/delay_proxy.py in between, closed while the answer streams: the crash guard's
  line, and the text already printed stays on stdout), and a llama-cpp-python built without RPC;
- a server stopped (SIGSTOP) while a pass waits for it is the one `rpc.unanswering` names, not
  another that this process holds idle (the watchdog of `specdec serve` says so).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from specdec_cli.decoding.engine import Engine, GenerationConfig
from specdec_cli.drafting.model import ModelDrafter
from specdec_cli.errors import BadInput
from specdec_cli.events import Token
from specdec_cli.llama import rpc
from specdec_cli.maths.filters import probabilities
from specdec_cli.maths.sampling import GREEDY
from specdec_cli.session import LoadedPair, check_pair
from specdec_cli.tuning.policy import draft_policy
from stat_checks import ALPHA, PLAIN, chi_square_pvalue

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from delay_proxy import DelayProxy  # noqa: E402

pytestmark = pytest.mark.model
PROMPT = "The robot picked up the brush and"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def rpc_server_binary() -> Path:
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "build_rpc_server.sh")], capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, done.stderr[-3000:]
    return Path(done.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def rpc_server(binary: Path):
    """A ggml-rpc-server on a free loopback port, ready (it answers a probe); its endpoint."""
    with rpc_server_process(binary) as (where, _):
        yield where


@contextlib.contextmanager
def rpc_server_process(binary: Path):
    """rpc_server's (endpoint, the process)."""
    port = free_port()
    server = subprocess.Popen([str(binary), "-H", "127.0.0.1", "-p", str(port), "-t", "2"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    where = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                rpc.probe(where, timeout=2)
                break
            except rpc.RpcError:
                assert server.poll() is None and time.monotonic() < deadline, "ggml-rpc-server did not start"
                time.sleep(0.2)
        yield where, server
    finally:
        server.terminate()
        server.wait(30)


@pytest.fixture(scope="module")
def endpoint(rpc_server_binary):
    """One server for the module (remote_target holds it: ggml-rpc-server serves one client at a time)."""
    with rpc_server(rpc_server_binary) as where:
        yield where


@pytest.fixture(scope="module")
def remote_target(builtin_paths, endpoint):
    from specdec_cli.llama.model import LlamaModel

    model = LlamaModel(builtin_paths[1], n_ctx=2048, rpc_servers=(endpoint,), role="target")
    yield model
    model.close()


def specdec(*args: str, code: str | None = None, **popen) -> subprocess.Popen:
    command = [sys.executable, "-m", "specdec_cli.cli", *args] if code is None else [sys.executable, "-c", code, *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("SPECDEC_NO_FORK", None)
    return subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def one_error_line(stderr: str) -> str:
    errors = [line for line in stderr.splitlines() if line.startswith("specdec: error")]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr[-2000:]
    return errors[0]


def test_endpoints_parse_as_the_docstrings_say():
    assert rpc.parse_endpoints("10.0.0.2:50052, [::1]:50053") == ("10.0.0.2:50052", "[::1]:50053")
    assert rpc.address("[::1]:50052") == ("::1", 50052)
    for bad in ("nohost", ":50052", "host:", "host:0", "host:70000", "a:1,"):
        with pytest.raises(BadInput, match="--rpc takes HOST:PORT"):
            rpc.parse_endpoints(bad)


def test_the_server_speaks_the_protocol_specdec_expects_and_lists_its_device(endpoint):
    server = rpc.probe(endpoint)
    assert server.version == rpc.PROTOCOL
    assert len(server.devices) >= 1 and all(0 < free <= total for free, total in server.devices)
    assert 0.0 < server.round_trip < 1.0


def test_greedy_decoding_with_the_target_over_rpc_is_the_local_targets_own(builtin_models, remote_target):
    draft, local = builtin_models
    limit = check_pair(draft, remote_target)
    prompt = local.tokenize(PROMPT)
    config = GenerationConfig(max_tokens=32, sampling=GREEDY, seed=0)
    alone = [e.id for e in Engine(local, None, vocab_limit=limit).generate(prompt, config) if isinstance(e, Token)]
    remote = Engine(remote_target, ModelDrafter(draft, limit), vocab_limit=limit)
    spoken = [e.id for e in remote.generate(prompt, config, draft_policy(4)) if isinstance(e, Token)]
    assert spoken == alone and len(alone) == 32


def test_the_first_token_follows_the_targets_law_through_rpc(builtin_models, remote_target):
    draft, local = builtin_models
    limit = check_pair(draft, remote_target)
    prompt = local.tokenize(PROMPT)
    local.rewind(0)
    p1 = probabilities(np.array(local.decode(prompt)[0, :limit]), PLAIN)
    local.rewind(0)
    engine = Engine(remote_target, ModelDrafter(draft, limit), vocab_limit=limit)
    n = 1000
    firsts = []
    for seed in range(n):
        config = GenerationConfig(max_tokens=1, sampling=PLAIN, seed=seed)
        firsts.append(next(e.id for e in engine.generate(prompt, config, draft_policy(4)) if isinstance(e, Token)))
    assert chi_square_pvalue(np.bincount(firsts, minlength=limit), p1) > ALPHA


def test_both_models_on_one_server_share_ggmls_connection(builtin_paths, remote_target):
    """The draft on the server the target already uses (--rpc E --draft-rpc E): it loads, although
    the server, busy with this process, would not answer a second connection (a probe's)."""
    from specdec_cli.llama.model import LlamaModel

    with LlamaModel(builtin_paths[0], n_ctx=256, rpc_servers=remote_target.rpc_servers, role="draft") as draft:
        assert draft.offloaded_layers > 0 and draft.decode(draft.tokenize("Hi")).shape[0] == 1
        assert draft.rpc_probed == []  # not probed: the target's probe found its round trip
    (probed,) = remote_target.rpc_probed
    assert probed.endpoint == remote_target.rpc_servers[0] and probed.round_trip > 0.0
    pair = LoadedPair(remote_target, None, remote_target.n_vocab)
    assert pair.first_pass_prior() == pytest.approx(rpc.FIRST_PASS_ROUND_TRIPS * probed.round_trip)


def test_a_server_busy_with_another_client_is_said_to_be_busy(remote_target):
    """ggml-rpc-server serves one client at a time: while remote_target holds it, a probe waits."""
    with pytest.raises(rpc.RpcError, match="serves one client at a time"):
        rpc.probe(remote_target.rpc_servers[0], timeout=1)


def test_an_endpoint_that_does_not_answer_is_one_line_and_exit_1(builtin_paths):
    port = free_port()
    proc = specdec("run", "--rpc", f"127.0.0.1:{port}", "-n", "4", "Hi")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1 and out == ""
    line = one_error_line(err)
    assert line.startswith(f"specdec: error: the RPC server at 127.0.0.1:{port} does not answer: connection refused"), line


class FakeServer:
    """Answers HELLO with another protocol version, as an older ggml-rpc-server would."""

    def __init__(self, version: tuple[int, int, int]) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.endpoint = "127.0.0.1:%d" % self.sock.getsockname()[1]
        self.version = version
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.recv(1 + 8 + rpc.CAPS_SIZE)
                conn.sendall(struct.pack("<Q", 4 + rpc.CAPS_SIZE) + bytes(self.version) + bytes(1 + rpc.CAPS_SIZE))


def test_a_server_of_another_protocol_version_is_one_line_and_exit_1(builtin_paths):
    fake = FakeServer((6, 0, 0))
    proc = specdec("run", "--rpc", fake.endpoint, "-n", "4", "Hi")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1 and out == ""
    line = one_error_line(err)
    assert f"the RPC server at {fake.endpoint} speaks protocol 6.0.0, specdec's llama.cpp 7.0.0" in line, line
    fake.sock.close()


def test_a_server_that_goes_away_mid_generation_ends_in_the_guards_line_and_the_text_stays(builtin_paths, rpc_server_binary):
    with rpc_server(rpc_server_binary) as endpoint, DelayProxy(rpc.address(endpoint), delay=0.002) as proxy:
        proc = specdec("run", "--rpc", proxy.endpoint, "-n", "2000", "--ctx", "4096", "--temperature", "0", "Tell a very long story about the sea.")
        first = proc.stdout.read(40)  # the answer is streaming
        assert first, proc.stderr.read()
        proxy.close()
        rest, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err[-2000:]
    line = one_error_line(err)
    assert "llama.cpp crashed" in line and f"over RPC: the RPC server at {proxy.endpoint} does not answer;" in line, line
    assert len(first + rest) >= 40


def test_a_stopped_server_is_named_while_a_pass_waits_for_it_and_a_held_idle_one_is_not(builtin_paths, rpc_server_binary):
    """The target on one server, the draft on another; the target's server stopped (SIGSTOP) before
    a pass: while the pass waits, `unanswering` names it alone, although a probe of the draft's
    server would wait too (it serves this process). Resumed, the pass returns."""
    from specdec_cli.llama.model import LlamaModel

    with rpc_server_process(rpc_server_binary) as (first, server), rpc_server(rpc_server_binary) as second:
        target = LlamaModel(builtin_paths[1], n_ctx=256, rpc_servers=(first,), role="target")
        draft = LlamaModel(builtin_paths[0], n_ctx=256, rpc_servers=(second,), role="draft")
        with target, draft:
            assert rpc.unanswering((first, second), timeout=1) == []  # both held, neither waited on
            prompt = target.tokenize(PROMPT)
            done = {}
            server.send_signal(signal.SIGSTOP)
            try:
                passing = threading.Thread(target=lambda: done.update(rows=target.decode(prompt)), daemon=True)
                passing.start()
                deadline = time.monotonic() + 30
                while not (found := rpc.unanswering((first, second), timeout=1)) and time.monotonic() < deadline:
                    time.sleep(0.05)  # until the pass waits for the server's answer
                assert found == [first]
                with pytest.raises(rpc.RpcError, match="serves one client at a time"):
                    rpc.probe(second, timeout=1)
            finally:
                server.send_signal(signal.SIGCONT)
            passing.join(120)
            assert done["rows"].shape[0] == 1


def test_a_build_without_rpc_says_how_to_get_one(builtin_paths):
    code = "import sys; import specdec_cli.llama.ggml as g; from specdec_cli.cli import app as cli; g.has_rpc = lambda: False; sys.argv = ['specdec', *sys.argv[1:]]; cli.main()"
    proc = specdec("run", "--rpc", "127.0.0.1:1", "-n", "4", "Hi", code=code)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1 and out == ""
    assert one_error_line(err) == f"specdec: error: {rpc.NO_RPC}"


def test_doctor_lists_the_endpoint_and_loads_the_target_through_it(builtin_paths, rpc_server_binary):
    with rpc_server(rpc_server_binary) as endpoint:
        proc = specdec("doctor", "--target", str(builtin_paths[1]), "--rpc", endpoint, "--tokens", "2")
        out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, out + err
    assert re.search(rf"^RPC server {re.escape(endpoint)}: protocol 7\.0\.0, device 0: \d+ of \d+ MiB free$", out, re.M), out
    assert f"target {builtin_paths[1]} through RPC {endpoint}" in out
    assert re.search(r"\(default\): ok, 2 tokens in [\d.]+ s, \d+/\d+ layers on the RPC servers", out), out
    closed = free_port()
    proc = specdec("doctor", "--target", str(builtin_paths[1]), "--rpc", f"127.0.0.1:{closed}", "--tokens", "2")
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 1 and f"RPC server 127.0.0.1:{closed}: the RPC server at 127.0.0.1:{closed} does not answer" in out, out + err
