"""The one thread that runs every batched pass in this process (decoding/batch.py's passes).

llama.cpp's CPU backend computes with OpenMP (llama-cpp-python's build links libgomp). Every OS
thread that starts a pass gets an OpenMP pool of its own, and once a process holds more OpenMP
threads than the machine has cores, libgomp stops spinning in its barriers and sleeps in them,
and ggml meets a barrier at every operation of a pass. In a batch the sequences' threads took
turns running the passes (whoever arrived last), so after the first few every pass ran slowly,
for as long as the process lived. Measured on 2 cores, 2 llama.cpp threads, the built-in pair's
target, passes of 4 sequences' rows (`benchmarks/pass_threads.py`, medians of 2 processes
each): 23.7 ms from one thread, 29.6 ms from 4 threads taking turns, 25.7 ms handed from those
4 threads to this one; in one process, one row a pass took 14-19 ms from the thread that had
run every pass and 27-66 ms from a second thread once the first had run some. So every pass
goes through this one thread, and the others hand it over and wait.

    run_on_compute_thread(lambda: model.decode_rows(parts))   # from any thread; returns or raises as the call does

Left out: the single-sequence engine (`specdec run`, bench), which decodes on the thread that
calls it, one thread in all.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, TypeVar

T = TypeVar("T")

_executor: ThreadPoolExecutor | None = None
_lock = threading.Lock()


def run_on_compute_thread(call: Callable[[], T]) -> T:
    """call() on the process's compute thread (started at the first call), its result or its exception."""
    global _executor
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="specdec-compute")
    return _executor.submit(call).result()


def _forget_in_child() -> None:
    global _executor
    _executor = None  # a forked child has no compute thread: its first pass starts its own


os.register_at_fork(after_in_child=_forget_in_child)
