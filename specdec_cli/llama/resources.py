"""What a model load will cost before llama.cpp allocates it: the KV cache's size and free memory.

A context too large for memory makes llama.cpp allocate (and clear) a KV cache until the
kernel kills the process; `check_kv_fits` refuses first, with the numbers:

    per_token = kv_bytes_per_token(n_layer=30, n_head_kv=3, head_k=64, head_v=64)   # 23040 bytes (f16 K and V)
    check_kv_fits("smol.gguf", n_ctx=10**9, per_token=per_token, available=8 * 2**30)
    -> BadInput: a context of 1000000000 tokens for smol.gguf needs a 23040.00 GB KV cache, but 8.59 GB
       of memory is available; at most 372736 tokens fit: pass a smaller --ctx or --draft-ctx ...

The server's default slots are as many as fit (`fit_slots`): each slot holds a context of --ctx
tokens in both models, and the slots take at most half the free memory, up to 16:

    fit_slots(per_slot=30 * 2**20, available=8 * 2**30)   # -> 16 (136 would fit in half of 8 GiB)
    fit_slots(per_slot=2 * 2**30, available=8 * 2**30)    # -> 2

Free memory is /proc/meminfo's MemAvailable (else the free pages sysconf reports), capped by
the cgroup's headroom where a container sets a limit. SPECDEC_NO_MEMORY_CHECK=1 skips the
check, for users who know better (swap, a KV cache on a GPU that this check does not see).

Left out: the weights and compute buffers (the weights are mapped from the file, the compute
buffers are small next to a KV cache of this size), GPU memory (the check is skipped when
layers are offloaded), and quantized KV caches (specdec asks llama.cpp for its default f16).
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import BadInput

F16_BYTES = 2
CTX_STEP = 256  # llama.cpp pads a context to a multiple of 256 tokens (--ctx 64 gets 256)
MAX_AUTO_SLOTS = 16  # the most slots chosen by memory (beyond, a CPU's passes gain little: docs/serving.md, "Many clients in one batch")
SLOTS_SHARE = 0.5  # of the free memory, what the default slots' KV caches may take (the rest: compute buffers, the system)


def padded_ctx(n_ctx: int) -> int:
    """The context llama.cpp will allocate for a request. Example: 64 -> 256, 300 -> 512."""
    return -(-n_ctx // CTX_STEP) * CTX_STEP


def kv_bytes_per_token(n_layer: int, n_head_kv: int, head_k: int, head_v: int, elem_bytes: int = F16_BYTES) -> int:
    """Bytes of K and V cache one token takes over all layers: n_layer x n_head_kv x (head_k + head_v) x elem."""
    return n_layer * n_head_kv * (head_k + head_v) * elem_bytes


def available_memory(meminfo: str = "/proc/meminfo", cgroup: str = "/sys/fs/cgroup") -> int | None:
    """Bytes of memory a new allocation can take now, or None when the system does not say."""
    found: int | None = None
    try:
        for line in Path(meminfo).read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError, IndexError):
        pass
    if found is None:
        try:
            found = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):
            return None
    try:
        limit = Path(cgroup, "memory.max").read_text().strip()
        if limit != "max":
            used = int(Path(cgroup, "memory.current").read_text().strip())
            found = min(found, max(int(limit) - used, 0))
    except (OSError, ValueError):
        pass
    return found


def fit_slots(per_slot: int, available: int | None) -> int:
    """How many slots of `per_slot` KV bytes (both models' caches at their contexts) fit in
    SLOTS_SHARE of `available`, from 1 to MAX_AUTO_SLOTS; MAX_AUTO_SLOTS where memory is not known."""
    if available is None or per_slot <= 0:
        return MAX_AUTO_SLOTS
    return max(1, min(MAX_AUTO_SLOTS, int(available * SLOTS_SHARE) // per_slot))


def memory_check_enabled() -> bool:
    return os.environ.get("SPECDEC_NO_MEMORY_CHECK", "") in ("", "0")


def check_kv_fits(name: str, n_ctx: int, per_token: int, available: int | None) -> None:
    """Raise BadInput when a KV cache of n_ctx tokens (padded as llama.cpp pads it) exceeds `available`."""
    if available is None or per_token <= 0:
        return
    need = padded_ctx(n_ctx) * per_token
    if need <= available:
        return
    fits = available // per_token // CTX_STEP * CTX_STEP
    advice = f"at most {fits} tokens fit: pass a smaller --ctx or --draft-ctx" if fits else "no context fits: free some memory"
    raise BadInput(
        f"a context of {n_ctx} tokens for {name} needs a {human_size(need)} KV cache, but {human_size(available)} "
        f"of memory is available; {advice} (SPECDEC_NO_MEMORY_CHECK=1 skips this check)"
    )


def human_size(size: int) -> str:
    """Bytes as text: 675710848 -> '676 MB', 4683073536 -> '4.68 GB'."""
    if size >= 1e9:
        return f"{size / 1e9:.2f} GB"
    if size >= 1e6:
        return f"{size / 1e6:.0f} MB"
    return f"{size / 1e3:.1f} kB"
