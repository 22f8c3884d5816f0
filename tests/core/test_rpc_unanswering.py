"""Which RPC endpoints do not answer (llama/rpc.py's `unanswering`, `verdict` and `blame`), with fake
servers (tests/rpcfakes.py) and no model: a probe for an endpoint this process is not connected
to; for one it holds a connection to (as llama.cpp does), whether a thread waits on that
connection, since a ggml-rpc-server busy with this process would not answer a probe.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest

from rpcfakes import AnsweringServer, closed_endpoint, silent_endpoint
from specdec_cli.llama import rpc


def test_verdicts_read_as_the_docstring_says():
    assert rpc.verdict(("a:1", "b:2"), ["a:1"]) == "the RPC server at a:1 does not answer (b:2 does); check that it is running and reachable"
    assert rpc.verdict(("a:1", "b:2"), ["a:1", "b:2"]) == "the RPC servers at a:1, b:2 do not answer; check that they are running and reachable"
    assert rpc.verdict(("a:1", "b:2"), []) == "every RPC server answers (a:1, b:2)"
    assert rpc.verdict(("a:1",), []) == "the RPC server at a:1 answers"
    assert rpc.verdict(("a:1", "a:1"), []) == "the RPC server at a:1 answers"  # --rpc and --draft-rpc naming one server


def test_a_silent_and_a_refusing_endpoint_are_named_and_the_answering_one_is_not():
    with AnsweringServer() as good, silent_endpoint() as stopped:
        closed = closed_endpoint()
        assert rpc.unanswering((stopped, good.endpoint, closed), timeout=0.5) == [stopped, closed]


def test_blame_words_what_the_probes_find_and_says_nothing_without_rpc():
    """`blame`'s examples on fake servers: one of two closed, both answering, no endpoints."""
    assert rpc.blame(()) == (False, "")
    with AnsweringServer() as good, AnsweringServer() as other:
        closed = closed_endpoint()
        assert rpc.blame((closed, good.endpoint)) == (True, rpc.verdict((closed, good.endpoint), [closed]))
        assert rpc.blame((good.endpoint, other.endpoint)) == (False, f"every RPC server answers ({good.endpoint}, {other.endpoint})")


def test_a_probe_times_the_round_trip_and_a_first_pass_is_five_of_the_slowest():
    """rpc.first_pass_prior's example, and a probe's round trip through a server that answers
    20 ms after each request: at least 20 ms, and well below the 3 exchanges' 60 (the quickest)."""
    assert rpc.first_pass_prior([]) is None
    assert rpc.first_pass_prior([rpc.RpcServer("a:1", rpc.PROTOCOL, [], 0.010), rpc.RpcServer("b:2", rpc.PROTOCOL, [], 0.002)]) == pytest.approx(0.05)
    with AnsweringServer(delay=0.02) as far:
        server = rpc.probe(far.endpoint)
    assert 0.02 <= server.round_trip < 0.05 and rpc.first_pass_prior([server]) == pytest.approx(5 * server.round_trip)


def test_silent_endpoints_are_probed_side_by_side():
    """Six silent endpoints at 0.5 s each: 3 s one after the other, about 0.5 s side by side."""
    with silent_endpoint() as a, silent_endpoint() as b, silent_endpoint() as c, silent_endpoint() as d, silent_endpoint() as e, silent_endpoint() as f:
        began = time.monotonic()
        assert rpc.unanswering((a, b, c, d, e, f), timeout=0.5) == [a, b, c, d, e, f]
        assert time.monotonic() - began < 2.5


def test_a_held_endpoint_fails_only_while_a_thread_waits_on_it():
    with silent_endpoint() as first, silent_endpoint() as second:
        held = [socket.create_connection(rpc.address(e)) for e in (first, second)]
        try:
            for conn in held:
                conn.settimeout(None)  # a plain blocking recv, as llama.cpp's
            assert rpc.unanswering((first, second), timeout=0.5) == []  # held and idle: not probed
            waiter = threading.Thread(target=held[0].recv, args=(1,), daemon=True)
            waiter.start()
            deadline = time.monotonic() + 10
            while not (found := rpc.unanswering((first, second), timeout=0.5)) and time.monotonic() < deadline:
                time.sleep(0.01)  # until the thread is in its recv
            assert found == [first]
        finally:
            for conn in held:
                conn.shutdown(socket.SHUT_RDWR)
                conn.close()
        waiter.join(10)
        assert not waiter.is_alive()
