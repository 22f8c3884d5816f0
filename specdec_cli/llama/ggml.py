"""ggml's device registry, through ctypes over the libraries llama-cpp-python ships (no second llama.cpp).

llama-cpp-python binds llama.h, not ggml-backend.h or ggml-rpc.h; the few functions specdec
needs from those are bound here, looked up in the package's lib/ folder (libggml-rpc, libggml,
libggml-base: wherever this build put them):

    local_gpu() -> True when a GPU (or integrated GPU) device is registered
    rpc_add_server("192.168.1.20:50052") -> the endpoint's devices, for llama_model_params.devices
    device_array([dev0, dev1]) -> a NULL-terminated ggml_backend_dev_t array

`rpc_add_server` exists only in a build with GGML_RPC on; `has_rpc()` says whether this is one.
It aborts the process when the endpoint does not answer or speaks another protocol, so callers
probe the endpoint first (rpc.py does, in Python).

Left out: the RPC protocol itself (rpc.py), loading models (model.py).
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import llama_cpp as lc

DEVICE_TYPE_GPU, DEVICE_TYPE_IGPU = 1, 2  # enum ggml_backend_dev_type (CPU 0, GPU 1, IGPU 2, ACCEL 3)
LIBRARIES = ("libggml-rpc.so", "libggml.so", "libggml-base.so", "libggml-rpc.dylib", "libggml.dylib", "libggml-base.dylib", "ggml-rpc.dll", "ggml.dll", "ggml-base.dll")  # fmt: skip


@functools.cache
def _libraries() -> tuple[ctypes.CDLL, ...]:
    folder = Path(getattr(lc.llama_cpp, "_base_path", Path(lc.__file__).parent / "lib"))
    found = []
    for name in LIBRARIES:
        path = folder / name
        if path.exists():
            found.append(ctypes.CDLL(str(path)))  # the same handle llama.cpp already loaded
    return tuple(found)


def _function(name: str, restype, argtypes):
    for library in _libraries():
        function = getattr(library, name, None)
        if function is not None:
            function.restype, function.argtypes = restype, argtypes
            return function
    return None


def has_rpc() -> bool:
    """Whether this llama-cpp-python was built with GGML_RPC on (the RPC client is in it)."""
    return bool(lc.llama_supports_rpc()) and _function("ggml_backend_rpc_add_server", ctypes.c_void_p, [ctypes.c_char_p]) is not None


def local_gpu() -> bool:
    """Whether a GPU device is registered on this machine (llama_supports_gpu_offload also says
    True for any build with RPC, where there may be no GPU at all)."""
    by_type = _function("ggml_backend_dev_by_type", ctypes.c_void_p, [ctypes.c_int])
    if by_type is None:  # an unusual build: trust llama.cpp's own answer
        return bool(lc.llama_supports_gpu_offload())
    lc.llama_backend_init()
    return bool(by_type(DEVICE_TYPE_GPU) or by_type(DEVICE_TYPE_IGPU))


_CONNECTED: set[str] = set()  # endpoints this process's ggml holds a connection to


def rpc_connected(endpoint: str) -> bool:
    """Whether ggml in this process already talks to endpoint (ggml-rpc-server serves one client at a
    time, so a second connection, a probe's, would wait; ggml shares its own among models)."""
    return endpoint in _CONNECTED


def rpc_add_server(endpoint: str) -> list[int]:
    """The devices of the RPC server at endpoint, registered with ggml (ggml_backend_rpc_add_server).
    The endpoint must answer (rpc.probe first): ggml aborts otherwise."""
    add = _function("ggml_backend_rpc_add_server", ctypes.c_void_p, [ctypes.c_char_p])
    count = _function("ggml_backend_reg_dev_count", ctypes.c_size_t, [ctypes.c_void_p])
    get = _function("ggml_backend_reg_dev_get", ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t])
    assert add is not None and count is not None and get is not None, "rpc_add_server needs a build with RPC (has_rpc)"
    registry = add(endpoint.encode())
    if not registry:
        return []
    _CONNECTED.add(endpoint)
    return [get(registry, i) for i in range(count(registry))]


def device_array(devices: list[int]) -> ctypes.Array:
    """A NULL-terminated ggml_backend_dev_t array, as llama_model_params.devices takes it (keep it
    alive until the model has loaded)."""
    return (ctypes.c_void_p * (len(devices) + 1))(*devices, None)
