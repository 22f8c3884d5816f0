"""llama.cpp's RPC backend: a model's layers on the devices of `ggml-rpc-server`s on other machines.

    specdec run --rpc 192.168.1.20:50052 "prompt"      # the target's layers there, the draft here

llama.cpp's client aborts the whole process when an endpoint does not answer or speaks another
protocol version. So before ggml ever sees an endpoint, `probe` speaks the start of the protocol
itself, in Python, with a timeout: HELLO (the server's protocol version), DEVICE_COUNT and
GET_DEVICE_MEMORY for each device. A fault is then one line that names the endpoint:

    probe("127.0.0.1:1")  -> RpcError("the RPC server at 127.0.0.1:1 does not answer: connection refused; ...")
    probe("127.0.0.1:50052") -> RpcServer(endpoint="127.0.0.1:50052", version=(7, 0, 0), devices=[(free, total)])

The wire format (ggml/src/ggml-rpc/ggml-rpc.cpp, protocol 7.0.0): a request is the command (1
byte), the payload's size (uint64, little-endian) and the payload; a response is its size
(uint64) and the payload. HELLO's request is the client's transport capabilities (24 bytes,
zeros: no upgrade) and its response the version (major, minor, patch, a pad byte) and the
server's capabilities.

Left out: registering the devices with ggml (ggml.py), loading (model.py), the options (cli/).
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

from ..errors import BadInput, SpecdecError

PROTOCOL = (7, 0, 0)  # what llama-cpp-python 0.3.36's llama.cpp speaks (ggml-rpc.h); a test checks it against its ggml-rpc-server
CMD_GET_DEVICE_MEMORY, CMD_HELLO, CMD_DEVICE_COUNT = 11, 14, 15
CAPS_SIZE = 24  # RPC_CONN_CAPS_SIZE
PROBE_SECONDS = 5.0
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
            (count,) = struct.unpack("<I", _exchange(sock, CMD_DEVICE_COUNT, b"", 4))
            devices = [struct.unpack("<QQ", _exchange(sock, CMD_GET_DEVICE_MEMORY, struct.pack("<I", i), 16)) for i in range(count)]
        except (OSError, ValueError) as exc:
            raise RpcError(f"the RPC server at {endpoint} failed while listing its devices: {exc}") from None
    if not devices:
        raise RpcError(f"the RPC server at {endpoint} offers no device")
    return RpcServer(endpoint, version, [(int(free), int(total)) for free, total in devices])


def _dotted(version) -> str:
    return ".".join(str(v) for v in version)
