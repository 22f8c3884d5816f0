"""Endpoints for the RPC fault tests, without a ggml-rpc-server: one that answers, one that takes
connections and never answers (a stopped or busy server), and one that refuses (nothing listens).

    with AnsweringServer() as good, silent_endpoint() as stopped:
        rpc.unanswering((good.endpoint, stopped, closed_endpoint()))   # -> [stopped, the closed one]
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from typing import Iterator

from specdec_cli.llama import rpc


class AnsweringServer:
    """Speaks as much of ggml-rpc-server's protocol as `rpc.probe` asks (HELLO, DEVICE_COUNT,
    GET_DEVICE_MEMORY: one device, 1 of 2 GiB free), to one client after another, in a thread;
    each answer `delay` seconds after its request (a distant server)."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.endpoint = "127.0.0.1:%d" % self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def __enter__(self) -> "AnsweringServer":
        return self

    def __exit__(self, *exc) -> None:
        self.sock.close()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            with conn, contextlib.suppress(OSError, struct.error):
                while True:
                    command, size = struct.unpack("<BQ", rpc._receive(conn, 9))
                    rpc._receive(conn, size)
                    if command == rpc.CMD_HELLO:
                        answer = bytes(rpc.PROTOCOL) + bytes(1 + rpc.CAPS_SIZE)
                    elif command == rpc.CMD_DEVICE_COUNT:
                        answer = struct.pack("<I", 1)
                    else:
                        answer = struct.pack("<QQ", 1 << 30, 2 << 30)
                    time.sleep(self.delay)
                    conn.sendall(struct.pack("<Q", len(answer)) + answer)


@contextlib.contextmanager
def silent_endpoint() -> Iterator[str]:
    """A port that takes connections (the kernel's backlog) and never answers, as a server stopped
    with SIGSTOP does, or a ggml-rpc-server busy with another client."""
    with socket.create_server(("127.0.0.1", 0)) as sock:
        yield "127.0.0.1:%d" % sock.getsockname()[1]


def closed_endpoint() -> str:
    """A port where nothing listens: a connection is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return "127.0.0.1:%d" % sock.getsockname()[1]
