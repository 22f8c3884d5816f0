"""The one thread that runs every batched pass in this process (decoding/batch.py's passes).

llama.cpp's CPU backend computes with OpenMP (llama-cpp-python's build links libgomp). Every OS
thread that starts a pass gets an OpenMP pool of its own, and once a process holds more OpenMP
threads than the machine has cores, libgomp stops spinning in its barriers and sleeps in them,
and ggml meets a barrier at every operation of a pass. In a batch the sequences' threads took
turns running the passes (whoever arrived last), so after the first few every pass ran slowly,
for as long as the process lived. Measured on 2 cores, 2 llama.cpp threads, the built-in pair's
target, passes of 4 sequences' rows (`benchmarks/pass_threads.py`, medians of 2 processes
each): 29.1 ms from one thread, 83.5 ms from 4 threads taking turns, 29.2 ms handed from those
4 threads to this one (in an earlier run 23.7, 29.6 and 25.7 ms). So every pass goes through
this one thread, and the others hand it over and wait.

    run_on_compute_thread(lambda: model.decode_rows(parts))   # from any thread; returns or raises as the call does

The thread is a daemon, as the server's slot threads are: a pass that never returns (a remote
target that stopped answering) does not keep the process from ending.

Left out: the single-sequence engine (`specdec run`, bench), which decodes on the thread that
calls it, one thread in all.
"""

from __future__ import annotations

import os
import queue
import threading
from concurrent.futures import Future
from typing import Callable, TypeVar

T = TypeVar("T")

_calls: "queue.SimpleQueue[tuple[Callable[[], object], Future]]" = queue.SimpleQueue()
_thread: threading.Thread | None = None
_lock = threading.Lock()


def _serve() -> None:
    while True:
        call, future = _calls.get()
        try:
            future.set_result(call())
        except BaseException as exc:  # noqa: BLE001  raised again in the caller's thread
            future.set_exception(exc)


def run_on_compute_thread(call: Callable[[], T]) -> T:
    """call() on the process's compute thread (started at the first call), its result or its exception."""
    global _thread
    if threading.current_thread() is _thread:
        return call()
    with _lock:
        if _thread is None:
            _thread = threading.Thread(target=_serve, name="specdec-compute", daemon=True)
            _thread.start()
    future: Future = Future()
    _calls.put((call, future))
    return future.result()


def _forget_in_child() -> None:
    global _calls, _thread, _lock
    _calls, _thread, _lock = queue.SimpleQueue(), None, threading.Lock()  # a forked child starts its own


os.register_at_fork(after_in_child=_forget_in_child)
