"""decoding/compute_thread.py: every call on one daemon thread, results and exceptions handed back."""

from __future__ import annotations

import threading

import pytest

from specdec_cli.decoding.compute_thread import run_on_compute_thread


def test_calls_from_many_threads_run_on_one_daemon_thread_and_hand_back_results_and_errors():
    seen: list[threading.Thread] = []
    results: list[int] = []

    def from_a_thread(i: int) -> None:
        results.append(run_on_compute_thread(lambda: seen.append(threading.current_thread()) or i * i))

    callers = [threading.Thread(target=from_a_thread, args=(i,)) for i in range(6)]
    for t in callers:
        t.start()
    for t in callers:
        t.join(10)
    assert sorted(results) == [i * i for i in range(6)]
    assert len(seen) == 6 and len(set(seen)) == 1  # counted: the thread of each call
    compute = seen[0]
    assert compute.daemon and compute not in callers and compute is not threading.main_thread()
    with pytest.raises(ZeroDivisionError):
        run_on_compute_thread(lambda: 1 / 0)
    # a call made on the compute thread itself runs there at once (no wait on its own queue)
    assert run_on_compute_thread(lambda: run_on_compute_thread(lambda: threading.current_thread())) is compute
