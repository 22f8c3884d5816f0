"""What the first target pass at each batch size costs over RPC, against a later one at that size.

The built-in target loads on a ggml-rpc-server on 127.0.0.1 behind delay_proxy.py (5 ms each
way by default: a 10 ms round trip), 41 prompt tokens are prefilled, and then passes of n tokens
with n rows of logits (a verify batch of k = n - 1 drafts), each rolled back after it:

  1. one pass at 17 tokens (the largest verify batch `-k auto` uses: AUTO_MAX_K + 1), then the
     first pass at each of 1 to 16 tokens: whether one pass at the largest size makes the smaller
     first passes cheap (it does not; the 1-token shape is cheap from the start, as llama.cpp
     reserves it, with the largest prefill batch, when it creates the context);
  2. three more passes at each size, in shuffled order (so that no pass has the shape of the one
     before it, which llama.cpp would run again without rebuilding), the median reported;
  3. one more pass at each size after 300 more tokens in the cache: whether a longer cache makes
     a shape new again (it does not: no GET_ALLOC_SIZE request).

For each pass the proxy reads the client's requests (the RPC wire format, llama/rpc.py) and counts
them by command, which shows where a first pass's time goes: GET_ALLOC_SIZE requests (the client
asks the server how much memory some operations' tensors need, once per shape and process),
each a round trip that the client waits for.

    flock /tmp/llama.lock python3 benchmarks/rpc_shapes.py

Produces docs/rpc.md, "The first pass at each batch size": its table.
"""

from __future__ import annotations

import argparse
import collections
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
import specdec_cli  # noqa: E402,F401  before numpy: see specdec_cli/__init__.py

import delay_proxy  # noqa: E402
from rpc import start_server  # noqa: E402
from specdec_cli.llama import rpc  # noqa: E402
from specdec_cli.llama.model import LlamaModel  # noqa: E402
from specdec_cli.models.cache import builtin_pair  # noqa: E402
from specdec_cli.tuning.adaptive import AUTO_MAX_K  # noqa: E402

# ggml-rpc.cpp's enum rpc_cmd, protocol 7.0.0 (HELLO = 14 is checked by llama/rpc.py)
COMMANDS = (
    "ALLOC_BUFFER GET_ALIGNMENT GET_MAX_SIZE BUFFER_GET_BASE FREE_BUFFER BUFFER_CLEAR SET_TENSOR SET_TENSOR_HASH GET_TENSOR "
    "COPY_TENSOR GRAPH_COMPUTE GET_DEVICE_MEMORY INIT_TENSOR GET_ALLOC_SIZE HELLO DEVICE_COUNT GRAPH_RECOMPUTE MEMSET_TENSOR"
).split()


class CountingProxy(delay_proxy.DelayProxy):
    """The delay proxy, also counting the client's requests by command: a request is the command
    (1 byte), the payload's size (uint64, little-endian) and the payload."""

    def __init__(self, *args, **kwargs) -> None:
        self.commands: collections.Counter = collections.Counter()
        self._pending = bytearray()
        self._left = 0  # payload bytes of the current request still to come
        super().__init__(*args, **kwargs)

    def _pipe(self, source, sink, counter: str) -> None:
        if counter == "sent":
            source = Tap(source, self._feed)
        super()._pipe(source, sink, counter)

    def _feed(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            if self._left:
                take = min(self._left, len(view))
                self._left -= take
                view = view[take:]
                continue
            need = 9 - len(self._pending)
            self._pending += view[:need]
            view = view[need:]
            if len(self._pending) == 9:
                command = self._pending[0]
                self.commands[COMMANDS[command] if command < len(COMMANDS) else str(command)] += 1
                self._left = int.from_bytes(self._pending[1:], "little")
                self._pending.clear()


class Tap:
    """A socket's recv that hands what it read to `feed` too."""

    def __init__(self, sock, feed) -> None:
        self.sock, self.feed = sock, feed

    def recv(self, n: int) -> bytes:
        data = self.sock.recv(n)
        self.feed(data)
        return data


def measure(model: LlamaModel, proxy: CountingProxy, tokens: list[int], n: int) -> tuple[float, dict]:
    """(milliseconds, requests by command) of one pass of n tokens with n rows of logits, rolled back."""
    keep = len(model.tokens)
    time.sleep(0.03)  # the proxy has forwarded everything before the pass
    proxy.commands.clear()
    start = time.perf_counter()
    model.decode(tokens[:n], n)
    elapsed = time.perf_counter() - start
    time.sleep(0.03)
    sent = dict(proxy.commands)
    model.rewind(keep)
    return 1e3 * elapsed, sent


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delay-ms", type=float, default=5.0, help="milliseconds added each way (default 5: a 10 ms round trip)")
    args = parser.parse_args(argv)
    _, target = builtin_pair()
    binary = Path(subprocess.run(["bash", str(ROOT / "benchmarks" / "build_rpc_server.sh")], capture_output=True, text=True, check=True).stdout.split()[-1])
    server, endpoint = start_server(binary)
    sizes = list(range(1, AUTO_MAX_K + 2))
    try:
        with CountingProxy(rpc.address(endpoint), args.delay_ms / 1e3) as proxy:
            with LlamaModel(target, n_ctx=2048, rpc_servers=(proxy.endpoint,), role="target") as model:
                text = "The quick brown fox jumps over the lazy dog. " * 60
                tokens = model.tokenize(text, add_special=True, parse_special=False)
                model.decode(tokens[:41], 1)
                batch = tokens[41:]
                first = {n: measure(model, proxy, batch, n) for n in [sizes[-1], *sizes[:-1]]}
                rng = random.Random(0)
                later: dict[int, list] = {n: [] for n in sizes}
                for _ in range(3):
                    for n in rng.sample(sizes, len(sizes)):
                        later[n].append(measure(model, proxy, batch, n))
                # one row of logits, so that the pass is waited for: without one, llama_decode returns
                # while the server still computes, and the next pass would wait for it
                model.decode(tokens[41:341], 1)
                deeper = {n: measure(model, proxy, tokens[341:], n) for n in rng.sample(sizes, len(sizes))}
    finally:
        server.terminate()
        server.wait(30)
    print(f"{2 * args.delay_ms:g} ms round trip; passes of n tokens with n rows of logits, milliseconds")
    print("| n | first pass | later (median of 3) | first - later | 300 tokens on: a pass (its GET_ALLOC_SIZE requests) | first pass's requests beyond a later one's |")
    print("|---|---|---|---|---|---|")
    for n in sizes:
        ms, sent = first[n]
        runs = sorted(later[n], key=lambda r: r[0])
        median, usual = runs[1][0], runs[1][1]
        extra = ", ".join(f"{c} {sent[c] - usual.get(c, 0):+d}" for c in sorted(sent) if sent[c] != usual.get(c, 0))
        extra += "".join(f", {c} {-usual[c]:+d}" for c in sorted(usual) if c not in sent)
        label = f"{n} (first of all)" if n == sizes[-1] else str(n)
        print(f"| {label} | {ms:.0f} | {median:.0f} | {ms - median:+.0f} | {deeper[n][0]:.0f} ({deeper[n][1].get('GET_ALLOC_SIZE', 0)}) | {extra} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
