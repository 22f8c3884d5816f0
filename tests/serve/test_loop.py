"""The worker's one scheduling loop (serve/worker.py): flags read before every pass, during a
prompt's prefill too; a cancelled job's place in the queue given back at once; a stalled pass
caught by the watchdog, whose reason names the RPC servers that do not answer (fakes of them from
tests/rpcfakes.py). The toy pair's target records every pass (tests/fakes.py), so the tests
count what the passes held after a cancel or a deadline rather than trust the worker."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest

from rpcfakes import AnsweringServer, closed_endpoint, silent_endpoint
from toyserver import GREEDY, toy_pair, wait_until
from specdec_cli.llama import rpc
from specdec_cli.serve.types import CompletionRequest, Settings
from specdec_cli.serve.jobs import Job, QueueFull

LONG = "abcdefghijklmnopqrstuvwxyz" * 40  # 1,040 prompt tokens: three passes of the toy's n_batch (512) alone


def job(prompt: str = "a", max_tokens: int = 20) -> Job:
    return Job(settings=Settings.of(CompletionRequest(prompt=prompt, max_tokens=max_tokens), GREEDY), prompt=prompt)


def passes_of(target, seq: int) -> int:
    return sum(1 for held in target.passes if any(s == seq for s, _, _ in held))


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def test_a_client_that_leaves_during_its_prefill_costs_no_more_passes(loop, serve):
    """A 1,040-token prompt goes in three passes of 512 rows alone. The client cancels while the
    first is in flight (the gate holds it): counted by the target, the sequence's rows go in no
    pass after the one in flight, and the model's cache holds what the slot's view says."""
    gate = threading.Event()
    pair = toy_pair(gate=gate, draft=False)
    s = serve(pair)
    try:
        assert s.worker.ready.wait(10)
        cancelled = s.worker.submit(job(LONG), loop)
        assert pair.target.decoding.wait(10)  # the first prefill pass is in flight
        cancelled.cancel()
        gate.set()
        wait_until(lambda: s.worker.running == 0, "the slot is free again")
        assert passes_of(pair.target, 0) == 1, [[(seq, n) for seq, n, _ in p] for p in pair.target.passes]
        assert pair.target.kv.get(0, []) == s.worker.slots[0].pair.target.tokens
        status, _, body = s.post("/v1/completions", {"prompt": "a", "max_tokens": 5})  # the slot serves the next one exactly
        assert status == 200 and body["choices"][0]["text"] == "bcdef"
    finally:
        gate.set()


def test_a_time_limit_ends_a_prefill_at_the_next_pass(serve):
    """--request-timeout of 50 ms, passes of 100 ms: the 1,040-token prompt's first pass crosses
    it, so the request ends with no tokens and finish reason length, and its rows go in no
    later pass (counted by the target)."""
    pair = toy_pair(seconds_per_decode=0.1, draft=False)
    s = serve(pair, request_timeout=0.05)
    assert s.worker.ready.wait(10)
    status, _, body = s.post("/v1/completions", {"prompt": LONG, "max_tokens": 5})
    assert status == 200 and body["choices"][0]["finish_reason"] == "length" and body["choices"][0]["text"] == ""
    assert passes_of(pair.target, 0) == 1


def test_a_cancelled_job_gives_its_place_in_the_queue_back_at_once(loop, serve):
    """--queue 1: one job generating (held by the gate), one waiting fills the queue, a third is
    refused; when the waiting one's client leaves, its place is free at once, before any slot is."""
    gate = threading.Event()
    pair = toy_pair(gate=gate)
    s = serve(pair, queue=1)
    try:
        assert s.worker.ready.wait(10)
        s.worker.submit(job(), loop)
        assert pair.target.decoding.wait(10)
        waiting = s.worker.submit(job(), loop)
        with pytest.raises(QueueFull):
            s.worker.submit(job(), loop)
        waiting.cancel()
        assert s.worker.waiting == 0
        s.worker.submit(job(), loop)  # takes the place
        assert s.worker.running == 1
    finally:
        gate.set()


def test_a_pass_that_never_returns_ends_the_server_with_503_and_the_reason(serve):
    """A target pass held past --pass-timeout (0.5 s): the watchdog fails the running request and
    the queued one with 503 and the reason, /health answers 503 with it, and on_gone is called
    (the command then exits non-zero)."""
    gate = threading.Event()
    pair = toy_pair(gate=gate)
    gone = threading.Event()
    reasons = []
    s = serve(pair, pass_timeout=0.5, on_gone=lambda reason: reasons.append(reason) or gone.set())
    results = {}
    try:
        assert s.worker.ready.wait(10)

        def ask(name):
            results[name] = s.post("/v1/completions", {"prompt": "a", "max_tokens": 5})

        first = threading.Thread(target=ask, args=("running",))
        first.start()
        assert pair.target.decoding.wait(10)
        second = threading.Thread(target=ask, args=("queued",))
        second.start()
        wait_until(lambda: s.worker.waiting == 1, "the second request waits in the queue")
        assert gone.wait(10)
        first.join(10), second.join(10)
        for name in ("running", "queued"):
            status, _, body = results[name]
            assert status == 503 and "has not returned in 0.5 s" in body["error"]["message"], (name, body)
        status, body = s.get("/health")
        assert status == 503 and body["error"]["message"] == reasons[0]
        assert reasons[0].startswith("the target model's pass has not returned in 0.5 s on this machine")
    finally:
        gate.set()


def stall_reason(serve, pair, servers: tuple[str, ...]) -> str:
    """The watchdog's reason for a pass held past --pass-timeout (0.5 s) with these RPC servers."""
    gone = threading.Event()
    reasons = []
    s = serve(pair, pass_timeout=0.5, rpc=servers, on_gone=lambda reason: reasons.append(reason) or gone.set())
    assert s.worker.ready.wait(10)
    asking = threading.Thread(target=s.post, args=("/v1/completions", {"prompt": "a", "max_tokens": 5}), daemon=True)
    asking.start()
    assert gone.wait(20)
    status, body = s.get("/health")
    assert status == 503 and body["error"]["message"] == reasons[0]
    return reasons[0]


def test_a_stalled_pass_names_the_rpc_servers_that_do_not_answer(serve):
    """Three endpoints, none connected by the pass: one that takes the connection and never answers
    (a stopped server), one that answers, one that refuses. The reason names the first and the last."""
    gate = threading.Event()
    try:
        with AnsweringServer() as good, silent_endpoint() as stopped:
            closed = closed_endpoint()
            reason = stall_reason(serve, toy_pair(gate=gate), (stopped, good.endpoint, closed))
    finally:
        gate.set()
    assert reason == (
        f"the target model's pass has not returned in 0.5 s: the RPC servers at {stopped}, {closed} do not answer "
        f"({good.endpoint} does); check that they are running and reachable, then restart specdec serve"
    )


def test_a_stalled_pass_names_the_rpc_server_it_waits_for_not_the_one_it_holds_idle(serve):
    """As llama.cpp does, the pass holds a connection to each of two servers and waits for the
    first one's answer. Neither would answer a probe (ggml-rpc-server serves one client at a time,
    and these never answer), yet only the first is named: the second is held, not waited on."""
    pair = toy_pair()
    held: list[socket.socket] = []
    decode_rows = pair.target.decode_rows

    def waiting_for_the_first(parts):
        if not held:
            for endpoint in (first, second):
                conn = socket.create_connection(rpc.address(endpoint))
                conn.settimeout(None)  # a plain blocking recv, as llama.cpp's
                held.append(conn)
            held[0].recv(1)  # no answer comes until the test shuts the connection
        return decode_rows(parts)

    pair.target.decode_rows = waiting_for_the_first
    with silent_endpoint() as first, silent_endpoint() as second:
        try:
            reason = stall_reason(serve, pair, (first, second))
            with pytest.raises(rpc.RpcError, match="did not answer"):
                rpc.probe(second, timeout=0.2)  # a probe would have failed it
        finally:
            for conn in held:
                conn.shutdown(socket.SHUT_RDWR)  # the pass's recv returns: the pass ends
    assert reason == (
        f"the target model's pass has not returned in 0.5 s: the RPC server at {first} does not answer ({second} does); "
        "check that it is running and reachable, then restart specdec serve"
    )


def test_a_stalled_pass_while_every_rpc_server_answers_is_said_to_stall_here(serve):
    gate = threading.Event()
    try:
        with AnsweringServer() as good:
            reason = stall_reason(serve, toy_pair(gate=gate), (good.endpoint,))
    finally:
        gate.set()
    assert reason == (
        f"the target model's pass has not returned in 0.5 s, though the RPC server at {good.endpoint} answers: "
        "the stall is on this machine, which may be out of memory or overloaded; restart specdec serve"
    )


def test_a_bug_while_handling_one_requests_events_fails_that_request_alone(monkeypatch, serve):
    """A planted bug: handing over the first Round of the request whose prompt is "k" raises. That
    request gets 500 and its slot is emptied; the other, generating beside it, gets its greedy
    answer; /health stays 200 and the next request is answered exactly."""
    from specdec_cli.events import Round
    from specdec_cli.serve.worker import Worker

    real = Worker._handle

    def planted(self, slot, item):
        if isinstance(item, Round) and slot.run.ids[:1] == [10]:  # "k"
            raise ZeroDivisionError("planted")
        return real(self, slot, item)

    monkeypatch.setattr(Worker, "_handle", planted)
    s = serve(toy_pair(seconds_per_decode=0.002), slots=2)
    assert s.worker.ready.wait(10)
    results = {}

    def ask(name, prompt):
        results[name] = s.post("/v1/completions", {"prompt": prompt, "max_tokens": 12})

    threads = [threading.Thread(target=ask, args=(p, p)) for p in ("a", "k")]
    [t.start() for t in threads]
    [t.join(30) for t in threads]
    assert results["k"][0] == 500 and "ZeroDivisionError: planted" in results["k"][2]["error"]["message"]
    assert results["a"][0] == 200 and results["a"][2]["choices"][0]["text"] == "bcdefghijklm"
    assert s.get("/health")[0] == 200
    status, _, body = s.post("/v1/completions", {"prompt": "b", "max_tokens": 5})
    assert status == 200 and body["choices"][0]["text"] == "cdefg"
