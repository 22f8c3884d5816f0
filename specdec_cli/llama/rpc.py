"""llama.cpp's RPC backend: a model's layers on the devices of `ggml-rpc-server`s on other machines.

    specdec run --rpc 192.168.1.20:50052 "prompt"      # the target's layers there, the draft here

llama.cpp's client aborts the whole process when an endpoint does not answer or speaks another
protocol version. So before ggml ever sees an endpoint, `probe` speaks the start of the protocol
itself, in Python, with a timeout: HELLO (the server's protocol version), DEVICE_COUNT and
GET_DEVICE_MEMORY for each device. A fault is then one line that names the endpoint:

    probe("127.0.0.1:1")  -> RpcError("the RPC server at 127.0.0.1:1 does not answer: connection refused; ...")
    probe("127.0.0.1:50052") -> RpcServer(endpoint="127.0.0.1:50052", version=(7, 0, 0), devices=[(free, total)], round_trip=0.0001)

The wire format (ggml/src/ggml-rpc/ggml-rpc.cpp, protocol 7.0.0): a request is the command (1
byte), the payload's size (uint64, little-endian) and the payload; a response is its size
(uint64) and the payload. HELLO's request is the client's transport capabilities (24 bytes,
zeros: no upgrade) and its response the version (major, minor, patch, a pad byte) and the
server's capabilities.

When a pass stalls or llama.cpp aborts mid-generation, `unanswering` says which endpoint failed
and `blame` words it, for the server's watchdog (serve/worker.py) and the crash guard
(crashguard.py) alike. An endpoint that this process is connected to (llama.cpp keeps one
connection to each server) is not probed: ggml-rpc-server serves one client at a time, so a
healthy one would not answer a second connection either. Instead the endpoint fails when a
thread of this process is blocked on that connection (Linux's /proc/self/task/*/syscall: the
descriptor of the recv or send each one waits in), which is llama.cpp waiting for an answer;
any other endpoint is probed:

    unanswering(("127.0.0.1:50052", "127.0.0.1:50053"))   # the first stopped (kill -STOP) -> ["127.0.0.1:50052"]
    verdict(("127.0.0.1:50052", "127.0.0.1:50053"), ["127.0.0.1:50052"])
        -> "the RPC server at 127.0.0.1:50052 does not answer (127.0.0.1:50053 does); check that it is running and reachable"

Without /proc (macOS) every endpoint is probed, and one busy with this process counts as silent.

Left out: registering the devices with ggml (ggml.py), loading (model.py), the options (cli/).
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from dataclasses import dataclass

from ..errors import BadInput, SpecdecError

PROTOCOL = (7, 0, 0)  # what llama-cpp-python 0.3.36's llama.cpp speaks (ggml-rpc.h); a test checks it against its ggml-rpc-server
CMD_GET_DEVICE_MEMORY, CMD_HELLO, CMD_DEVICE_COUNT = 11, 14, 15
CAPS_SIZE = 24  # RPC_CONN_CAPS_SIZE
PROBE_SECONDS = 5.0
FIRST_PASS_ROUND_TRIPS = 5  # GET_ALLOC_SIZE requests before a pass at a new batch size (the built-in target with llama-cpp-python 0.3.36's llama.cpp: docs/rpc.md)
ANSWER_SECONDS = 2.0  # unanswering's probes, run side by side: a stalled pass's report waits about this long
BUILD_HINT = "benchmarks/build_rpc_server.sh builds ggml-rpc-server from the llama.cpp that specdec's llama-cpp-python vendors"
NO_RPC = (
    "this llama-cpp-python was built without llama.cpp's RPC backend; reinstall it with it: "
    "CMAKE_ARGS=\"-DGGML_RPC=on\" pip install --force-reinstall --no-cache-dir --no-binary llama-cpp-python llama-cpp-python"
)


class RpcError(SpecdecError):
    """An RPC endpoint that cannot serve: its message names the endpoint (exit 1)."""


@dataclass(frozen=True)
class RpcServer:
    endpoint: str
    version: tuple[int, int, int]
    devices: list[tuple[int, int]]  # (free, total) bytes per device
    round_trip: float = 0.0  # seconds: the quickest of the probe's exchanges after HELLO


def first_pass_prior(servers) -> float | None:
    """What a target pass at a batch size the process has not run yet costs beyond a later one,
    before any is timed: FIRST_PASS_ROUND_TRIPS of the slowest server's round trip (llama.cpp's
    RPC client first asks the server how much memory some of the pass's operations need, in
    requests it waits for: docs/rpc.md); None without servers. `-k auto` starts from it where no
    record carries a measured value. Example: round trips of 10 and 2 ms -> 0.05."""
    return FIRST_PASS_ROUND_TRIPS * max(s.round_trip for s in servers) if servers else None


def parse_endpoints(value: str, option: str = "--rpc") -> tuple[str, ...]:
    """HOST:PORT[,HOST:PORT...] as a tuple; BadInput for anything else.
    Example: "10.0.0.2:50052, [::1]:50053" -> ("10.0.0.2:50052", "[::1]:50053")."""
    out = []
    for part in value.split(","):
        part = part.strip()
        host, sep, port = part.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise BadInput(f"{option} takes HOST:PORT[,HOST:PORT...], got {part!r}")
        out.append(part)
    return tuple(out)


def address(endpoint: str) -> tuple[str, int]:
    """The (host, port) to connect to. Example: "[::1]:50052" -> ("::1", 50052)."""
    host, _, port = endpoint.rpartition(":")
    return host.strip("[]"), int(port)


def _exchange(sock: socket.socket, command: int, payload: bytes, size: int) -> bytes:
    sock.sendall(struct.pack("<BQ", command, len(payload)) + payload)
    header = _receive(sock, 8)
    (length,) = struct.unpack("<Q", header)
    if length != size:
        raise ValueError(f"a {size}-byte answer was due, {length} came")
    return _receive(sock, size)


def _receive(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        piece = sock.recv(n - len(data))
        if not piece:
            raise ConnectionError("the server closed the connection")
        data += piece
    return data


def probe(endpoint: str, timeout: float = PROBE_SECONDS) -> RpcServer:
    """Connect, check the protocol version, and list the devices with their memory; RpcError otherwise."""
    try:
        sock = socket.create_connection(address(endpoint), timeout=timeout)
    except OSError as exc:
        reason = (exc.strerror or str(exc) or type(exc).__name__).lower()
        raise RpcError(f"the RPC server at {endpoint} does not answer: {reason}; is ggml-rpc-server running there, and the port open?") from None
    with sock:
        try:
            hello = _exchange(sock, CMD_HELLO, bytes(CAPS_SIZE), 4 + CAPS_SIZE)
        except socket.timeout:
            raise RpcError(
                f"the RPC server at {endpoint} took the connection but did not answer within {timeout:g} s; "
                "ggml-rpc-server serves one client at a time: is another process using it?"
            ) from None
        except (OSError, ValueError) as exc:
            raise RpcError(
                f"the RPC server at {endpoint} does not speak llama.cpp's RPC protocol {_dotted(PROTOCOL)} ({exc}); "
                f"an older or newer ggml-rpc-server? {BUILD_HINT}"
            ) from None
        version = tuple(hello[:3])
        if version[0] != PROTOCOL[0] or version[1] > PROTOCOL[1]:
            raise RpcError(
                f"the RPC server at {endpoint} speaks protocol {_dotted(version)}, specdec's llama.cpp {_dotted(PROTOCOL)}; "
                f"run a ggml-rpc-server of the same llama.cpp ({BUILD_HINT})"
            )
        try:
            began = time.perf_counter()
            (count,) = struct.unpack("<I", _exchange(sock, CMD_DEVICE_COUNT, b"", 4))
            trips = [time.perf_counter() - began]
            devices = []
            for i in range(count):
                began = time.perf_counter()
                devices.append(struct.unpack("<QQ", _exchange(sock, CMD_GET_DEVICE_MEMORY, struct.pack("<I", i), 16)))
                trips.append(time.perf_counter() - began)
        except (OSError, ValueError) as exc:
            raise RpcError(f"the RPC server at {endpoint} failed while listing its devices: {exc}") from None
    if not devices:
        raise RpcError(f"the RPC server at {endpoint} offers no device")
    return RpcServer(endpoint, version, [(int(free), int(total)) for free, total in devices], min(trips))


def _dotted(version) -> str:
    return ".".join(str(v) for v in version)


def unanswering(endpoints, timeout: float = ANSWER_SECONDS) -> list[str]:
    """The endpoints that do not answer now, in their order (see the module's docstring); never raises.
    An endpoint this process holds a connection to fails when a thread waits on it; the others are
    probed side by side, each given `timeout` for its connection and for each answer."""
    endpoints = list(dict.fromkeys(endpoints))
    connections = _connections() or {}
    held = {e: set().union(*(connections.get(a, ()) for a in _addresses(e))) for e in endpoints}
    waited = _waited_descriptors() if any(held.values()) else set()
    failed: dict[str, bool] = {}
    probes = []
    for endpoint in endpoints:
        if held[endpoint]:
            failed[endpoint] = bool(held[endpoint] & waited)
        else:
            failed[endpoint] = True  # until its probe says otherwise
            probes.append(threading.Thread(target=_probe_into, args=(endpoint, timeout, failed), daemon=True))
    for thread in probes:
        thread.start()
    deadline = time.monotonic() + 3 * timeout  # a connection, HELLO and the device list, each within timeout
    for thread in probes:
        thread.join(max(0.0, deadline - time.monotonic()))
    return [e for e in endpoints if failed[e]]


def verdict(endpoints, failed) -> str:
    """What `unanswering` found, in words, with the advice for RPC; each caller adds its next step.
    Examples: (("a:1", "b:2"), ["a:1"]) -> "the RPC server at a:1 does not answer (b:2 does); check that it is running and reachable";
    (("a:1", "b:2"), ["a:1", "b:2"]) -> "the RPC servers at a:1, b:2 do not answer; check that they are running and reachable";
    (("a:1", "b:2"), []) -> "every RPC server answers (a:1, b:2)"; (("a:1",), []) -> "the RPC server at a:1 answers"."""
    endpoints = list(dict.fromkeys(endpoints))
    answering = [e for e in endpoints if e not in failed]
    if not failed:
        return f"the RPC server at {answering[0]} answers" if len(answering) == 1 else f"every RPC server answers ({', '.join(answering)})"
    if len(failed) == 1:
        found = f"the RPC server at {failed[0]} does not answer"
        pronoun = "it is"
    else:
        found = f"the RPC servers at {', '.join(failed)} do not answer"
        pronoun = "they are"
    others = f" ({', '.join(answering)} {'does' if len(answering) == 1 else 'do'})" if answering else ""
    return f"{found}{others}; check that {pronoun} running and reachable"


def blame(endpoints) -> tuple[bool, str]:
    """After a stalled pass or a crash: whether an RPC server is to blame, and `verdict`'s words for
    what `unanswering` finds now; each caller adds its next step. (False, "") without endpoints.
    Examples: one of two stopped -> (True, "the RPC server at a:1 does not answer (b:2 does); check
    that it is running and reachable"); both answer -> (False, "every RPC server answers (a:1, b:2)")."""
    if not endpoints:
        return False, ""
    failed = unanswering(endpoints)  # a few seconds at most
    return bool(failed), verdict(endpoints, failed)


def _probe_into(endpoint: str, timeout: float, failed: dict[str, bool]) -> None:
    try:
        probe(endpoint, timeout)
    except RpcError:
        return
    failed[endpoint] = False


def _addresses(endpoint: str) -> set[tuple[str, int]]:
    """The (address, port) pairs a connection to the endpoint has as its peer. Example: "127.0.0.1:5" -> {("127.0.0.1", 5)}."""
    host, port = address(endpoint)
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return set()
    return {(sockaddr[0], sockaddr[1]) for *_, sockaddr in found}


def _connections() -> dict[tuple[str, int], set[int]] | None:
    """This process's TCP connections: the peer's (address, port) -> the descriptors connected to it;
    None where /proc/self/fd is missing. Each descriptor is read through a duplicate, which is closed."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return None
    out: dict[tuple[str, int], set[int]] = {}
    for name in names:
        fd = int(name)
        try:
            if not os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                continue
            duplicate = os.dup(fd)
        except OSError:  # closed since the listing
            continue
        try:
            sock = socket.socket(fileno=duplicate)
        except OSError:
            os.close(duplicate)
            continue
        with sock:
            try:
                if sock.family in (socket.AF_INET, socket.AF_INET6):
                    peer = sock.getpeername()
                    out.setdefault((peer[0], peer[1]), set()).add(fd)
            except OSError:  # not connected (a listening socket)
                pass
    return out


def _waited_descriptors() -> set[int]:
    """The first argument of the system call each thread of this process is blocked in: the
    descriptor of a recv or send (a futex's or poll's is an address, matching no descriptor)."""
    out = set()
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return out
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/syscall") as f:
                fields = f.read().split()  # "45 0x7 0x7f... ..." in a call, "running" or "-1 ..." outside one
        except OSError:
            continue
        if len(fields) > 1 and fields[0].isdigit():
            out.add(int(fields[1], 16))
    return out
