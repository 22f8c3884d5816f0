"""A TCP proxy on loopback that adds a fixed delay each way, to stand for a network: what the RPC
tests and benchmarks/rpc.py put between specdec and a ggml-rpc-server.

    python3 benchmarks/delay_proxy.py --listen 127.0.0.1:50053 --to 127.0.0.1:50052 --delay-ms 5
    # a round trip through 50053 now takes 10 ms more than one to 50052

Every chunk read from one side is written to the other `delay` seconds after it arrived, in
order (a queue per direction, so the delay does not add up along a stream, as on a real link
whose latency is fixed and whose bandwidth is not the limit). The proxy counts the bytes each
way (`sent`, `received`: client to server and back), which is how the benchmark reports the
bytes that crossed per token.

    with DelayProxy(("127.0.0.1", 50052), delay=0.005) as proxy:
        proxy.endpoint   # "127.0.0.1:41234"
        proxy.sent, proxy.received

Left out: bandwidth limits, loss and jitter.
"""

from __future__ import annotations

import argparse
import queue
import socket
import threading
import time


class DelayProxy:
    def __init__(self, target: tuple[str, int], delay: float, listen: tuple[str, int] = ("127.0.0.1", 0)) -> None:
        self.target, self.delay = target, delay
        self.sent = self.received = 0
        self._lock = threading.Lock()
        self._server = socket.create_server(listen)
        self._closing = threading.Event()
        self._sockets: list[socket.socket] = []
        host, port = self._server.getsockname()[:2]
        self.endpoint = f"{host}:{port}"
        threading.Thread(target=self._accept, daemon=True).start()

    def __enter__(self) -> "DelayProxy":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop accepting and cut every connection (as a server that goes away)."""
        self._closing.set()
        for sock in [self._server, *self._sockets]:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sockets += [client, upstream]
            self._pipe(client, upstream, "sent")
            self._pipe(upstream, client, "received")

    def _pipe(self, source: socket.socket, sink: socket.socket, counter: str) -> None:
        chunks: queue.Queue = queue.Queue()

        def read() -> None:
            while True:
                try:
                    data = source.recv(1 << 16)
                except OSError:
                    data = b""
                chunks.put((time.monotonic() + self.delay, data))
                if not data:
                    return

        def write() -> None:
            while True:
                due, data = chunks.get()
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                if not data:
                    try:
                        sink.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                    return
                with self._lock:
                    setattr(self, counter, getattr(self, counter) + len(data))
                try:
                    sink.sendall(data)
                except OSError:
                    return

        threading.Thread(target=read, daemon=True).start()
        threading.Thread(target=write, daemon=True).start()


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT to listen on")
    parser.add_argument("--to", required=True, help="HOST:PORT of the server behind it")
    parser.add_argument("--delay-ms", type=float, required=True, help="milliseconds added each way")
    args = parser.parse_args()
    with DelayProxy(_address(args.to), args.delay_ms / 1e3, _address(args.listen)) as proxy:
        print(f"delaying {args.delay_ms:g} ms each way: {proxy.endpoint} -> {args.to}", flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
