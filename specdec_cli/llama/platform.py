"""What the loaded llama.cpp build can do: its report, GPU offload, AMX and repacking, its devices.

Repacking: llama.cpp copies quantized weights into "extra buffer types" laid out for the
CPU's SIMD units. Its AMX buffer type crashes on some Intel CPUs (ggml-org/llama.cpp #20824),
so `resolve_repack(None)` turns repacking off when the system info reports AMX_INT8 = 1:

    repack_default("CPU : SSE3 = 1 | AVX2 = 1 | AMX_INT8 = 1 |")  -> False
    repack_default("CPU : SSE3 = 1 | AVX2 = 1 |")                 -> True

Left out: loading a model with these choices (model.py).
"""

from __future__ import annotations

import ctypes
import functools
import logging
import re
from dataclasses import dataclass

import llama_cpp as lc

from .ggml import has_rpc, local_gpu
from .log import llama_log

log = logging.getLogger("specdec")


def gpu_offload_supported() -> bool:
    """Whether this machine has a GPU llama.cpp can offload to (not merely a build with RPC)."""
    llama_log()
    return local_gpu()


def rpc_supported() -> bool:
    """Whether this llama-cpp-python has llama.cpp's RPC client (--rpc; built with GGML_RPC on)."""
    llama_log()
    return has_rpc()


def system_info() -> str:
    """llama.cpp's one-line build report, e.g. "CPU : SSE3 = 1 | AVX2 = 1 | ... | REPACK = 1 |"."""
    llama_log()
    raw = lc.llama_print_system_info()
    return raw.decode("utf-8", errors="replace") if raw else ""


def llama_cpp_version() -> str:
    return getattr(lc, "__version__", "unknown")


_AMX = re.compile(r"\bAMX_INT8\s*=\s*1\b")


def has_amx(info: str) -> bool:
    return bool(_AMX.search(info))


def repack_default(info: str) -> bool:
    """Repack weights for the CPU unless llama.cpp reports AMX, whose buffer type can crash (#20824)."""
    return not has_amx(info)


def can_choose_repack() -> bool:
    """Whether this llama-cpp-python exposes llama_model_params.use_extra_bufts."""
    return any(name == "use_extra_bufts" for name, *_ in lc.llama_model_params._fields_)


@functools.lru_cache(maxsize=1)
def auto_repack() -> bool:
    """The repack default for the loaded llama.cpp, said once on the specdec logger (info level)."""
    repack = repack_default(system_info())
    if not repack:
        log.info("llama.cpp reports AMX_INT8 = 1: loading models without repacking (llama.cpp #20824); --repack overrides")
    return repack


def resolve_repack(requested: bool | None) -> bool:
    """None means auto: off on AMX, on elsewhere."""
    return auto_repack() if requested is None else requested


# ggml's enum ggml_backend_dev_type, in its order (ggml-backend.h)
DEVICE_KINDS = ("cpu", "gpu", "igpu", "accel", "meta")


@dataclass(frozen=True)
class Device:
    """One device llama.cpp can place layers on, e.g. Device("Vulkan0", "llvmpipe (LLVM 15.0.6, 256 bits)", "gpu", 7934, 7934)."""

    name: str
    description: str
    kind: str  # DEVICE_KINDS; "gpu" and "igpu" take offloaded layers
    free_mib: int
    total_mib: int


@functools.lru_cache(maxsize=1)
def devices() -> tuple[Device, ...]:
    """The devices of every backend compiled in, from ggml's device registry (ggml_backend_dev_*).

    Example on a CPU-only build: (Device("CPU", "Intel(R) Xeon(R) ...", "cpu", 24000, 24000),).
    Empty when this llama-cpp-python does not expose libggml (then doctor lists none)."""
    llama_log()
    try:
        from llama_cpp import _ggml

        lib = _ggml.libggml
        lib.ggml_backend_dev_count.restype = ctypes.c_size_t
        lib.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
        lib.ggml_backend_dev_get.restype = ctypes.c_void_p
        for name in ("ggml_backend_dev_name", "ggml_backend_dev_description"):
            getattr(lib, name).argtypes = [ctypes.c_void_p]
            getattr(lib, name).restype = ctypes.c_char_p
        lib.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
        lib.ggml_backend_dev_type.restype = ctypes.c_int
        lib.ggml_backend_dev_memory.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]
        lib.ggml_backend_dev_memory.restype = None
    except (ImportError, AttributeError, OSError) as exc:
        log.info("cannot list llama.cpp's devices: %s", exc)
        return ()
    found = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        kind = lib.ggml_backend_dev_type(dev)
        found.append(Device(
            name=(lib.ggml_backend_dev_name(dev) or b"?").decode("utf-8", "replace"),
            description=(lib.ggml_backend_dev_description(dev) or b"").decode("utf-8", "replace"),
            kind=DEVICE_KINDS[kind] if 0 <= kind < len(DEVICE_KINDS) else f"type {kind}",
            free_mib=free.value // 2**20,
            total_mib=total.value // 2**20,
        ))
    return tuple(found)


def resolve_gpu_layers(requested: int | None) -> int:
    """None or -1 means "all layers on the GPU if there is one"; without a GPU every request means 0
    (the command line warns about it once, in options.gpu_layers_to_load)."""
    has_gpu = gpu_offload_supported()
    if requested is None or requested < 0:
        return 999 if has_gpu else 0
    return requested if has_gpu else 0

