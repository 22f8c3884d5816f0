"""A scripted pair behind the real app, for the server's tests in this process: `Served` runs
create_app under uvicorn on a free loopback port in a thread; `toy_pair` is the toy pair.

The toy pair writes letters: after letter i the target's greedy choice is i + 1, the draft's
too except after "e", where it guesses "z" (tests/fakes.py), so at temperature 0 the answer to
"a" is "bcdefghij..." with one rejection per pass over "e".

    s = Served(toy_pair()); s.post("/v1/completions", {"prompt": "a", "max_tokens": 3})
    -> (200, headers, {... "choices": [{"text": "bcd", ...}], ...}); s.stop()
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request

import uvicorn

from fakes import ToyModel, successor_table
from specdec_cli.maths.sampling import SamplingParams
from specdec_cli.serve.app import create_app
from specdec_cli.serve.guard import Access
from specdec_cli.serve.server import server_config
from specdec_cli.serve.types import Defaults
from specdec_cli.serve.worker import Worker
from specdec_cli.session import LoadedPair

JSON = {"Content-Type": "application/json"}
GREEDY = Defaults(max_tokens=9, sampling=SamplingParams(temperature=0.0), draft_tokens=3)


def toy_pair(seconds_per_decode: float = 0.0, n_ctx: int = 4096, gate: threading.Event | None = None, draft: bool = True) -> LoadedPair:
    target = ToyModel(successor_table(), seconds_per_decode=seconds_per_decode, n_ctx=n_ctx, gate=gate)
    if not draft:
        return LoadedPair(target=target, draft=None, vocab_limit=26)
    draft = ToyModel(successor_table({4: 25}), n_ctx=n_ctx)
    return LoadedPair(target=target, draft=draft, vocab_limit=26)


class Served:
    """One app on a free port in a thread; `stop()` ends it and its worker (a second call does no
    harm). The tests start one with conftest's `serve` fixture, which stops it at teardown."""

    def __init__(
        self, pair: LoadedPair, *, loaded: threading.Event | None = None, queue: int = 4, keys: tuple[str, ...] = (), max_body: int = 1 << 20,
        load=None, request_timeout: float | None = None, cors_origins: tuple[str, ...] = (), allowed_hosts: tuple[str, ...] = (), max_connections: int = 64,
        header_seconds: float = 10.0, body_seconds: float = 30.0, slots: int = 1, pass_timeout: float = 60.0, on_gone=lambda reason: None,
        admin_keys: tuple[str, ...] = (), rpc: tuple[str, ...] = (),
    ):  # fmt: skip
        self.pair = pair

        def load_pair(stack):
            if loaded is not None:
                assert loaded.wait(30), "the test never let the load finish"
            return pair if load is None else load(stack)

        self.worker = Worker(load_pair, queue_size=queue, request_timeout=request_timeout, slots=slots, pass_timeout=pass_timeout, on_gone=on_gone, rpc=rpc)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        access = Access.for_bind("127.0.0.1", self.port, keys=keys, allowed_hosts=allowed_hosts, cors_origins=cors_origins, admin_keys=admin_keys)
        app = create_app(self.worker, GREEDY, alias="toy", access=access, max_body=max_body, body_seconds=body_seconds)
        self.server = uvicorn.Server(server_config(app, max_connections, header_seconds))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.worker.start()
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.01)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.worker.stop()
        self.sock.close()

    def post(self, path: str, body, headers: dict | None = None, raw: bytes | None = None) -> tuple[int, object, dict]:
        data = raw if raw is not None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, response.headers, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers, json.loads(exc.read())

    def get(self, path: str, headers: dict | None = None) -> tuple[int, dict]:
        request = urllib.request.Request(self.url + path, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def client(self, api_key: str = "none"):
        from openai import OpenAI

        return OpenAI(base_url=self.url + "/v1", api_key=api_key, max_retries=0, timeout=30)



def wait_until(condition, what: str, seconds: float = 10.0) -> None:
    """Poll a state the test cannot be told about otherwise (the queue's length, the slots taken);
    never a sleep that orders."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.005)


def chat(content: str = "a", **fields) -> dict:
    return {"messages": [{"role": "user", "content": content}], **fields}
