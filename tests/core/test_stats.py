"""decoding/consume.consume (the one way to run a generation) and RunStats.merge / mean_k, on scripted events."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from specdec_cli.events import Finished, Prefill, Round, Source, Token
from specdec_cli.decoding import consume as consume_module
from specdec_cli.decoding.consume import consume
from specdec_cli.decoding.stats import RunStats


def round_(drafted: int, accepted: int, seconds: float = 0.01) -> Round:
    return Round(drafted=drafted, accepted=accepted, draft_seconds=0.002, draft_decode_seconds=0.001, target_seconds=0.005, seconds=seconds)


def scripted(closed: list, interrupt_after: int | None = None):
    """A generation of 3 tokens in 2 rounds; with interrupt_after, Ctrl-C after that many events."""
    events = [
        Prefill(prompt_tokens=5, seconds=0.1),
        Token(7, "a", Source.DRAFT, 1),
        Token(8, "b", Source.BONUS, 2),
        round_(1, 1),
        Token(9, "c", Source.CORRECTION, 1),
        round_(2, 0),
        Finished(reason="max_tokens", tokens=(7, 8, 9), text="abc"),
    ]
    try:
        for i, event in enumerate(events):
            if interrupt_after is not None and i == interrupt_after:
                raise KeyboardInterrupt
            yield event
    finally:
        closed.append(True)  # the engine's rollback runs here


def test_consume_folds_a_whole_generation_and_closes_it():
    closed, seen = [], []
    outcome = consume(scripted(closed), seen.append)
    assert closed == [True] and len(seen) == 7
    assert outcome.tokens == [7, 8, 9] and outcome.text == "abc" and not outcome.interrupted
    s = outcome.stats
    assert (s.prompt_tokens, s.new_tokens, s.target_passes, s.drafted, s.accepted, s.rejections) == (5, 3, 2, 3, 1, 1)
    assert s.finish_reason == "max_tokens"


def test_wall_seconds_hold_the_whole_call_the_reader_and_the_rollback_included(monkeypatch):
    """On a scripted clock: each of the 7 events takes 1 s to produce, the reader 0.25 s each, and
    the rollback in the generation's `finally` 0.5 s: 7 + 1.75 + 0.5 = 9.25 s; when Ctrl-C ends it
    after 4 events, 4 + 1 + 0.5."""
    clock = [100.0]
    monkeypatch.setattr(consume_module, "time", SimpleNamespace(perf_counter=lambda: clock[0]))

    def advance(seconds: float) -> None:
        clock[0] += seconds

    def timed(interrupt_after: int | None = None):
        events = scripted([], interrupt_after)
        try:
            for event in events:
                advance(1.0)
                yield event
        finally:
            events.close()
            advance(0.5)

    assert consume(timed(), lambda event: advance(0.25)).wall_seconds == pytest.approx(9.25)
    interrupted = consume(timed(interrupt_after=4), lambda event: advance(0.25))
    assert interrupted.interrupted and interrupted.wall_seconds == pytest.approx(5.5)


def test_ctrl_c_keeps_what_was_generated_and_closes_the_generation():
    closed = []
    outcome = consume(scripted(closed, interrupt_after=4))
    assert closed == [True] and outcome.interrupted
    assert outcome.tokens == [7, 8] and outcome.text == "ab" and outcome.stats.target_passes == 1


def test_an_error_in_the_reader_still_closes_the_generation():
    closed = []

    def broken(event):
        if isinstance(event, Round):
            raise RuntimeError("renderer failed")

    with pytest.raises(RuntimeError, match="renderer failed"):
        consume(scripted(closed), broken)
    assert closed == [True]


def test_merge_sums_two_runs_and_mean_k_counts_plain_steps_as_zero():
    a = consume(scripted([])).stats  # rounds drafting 1 and 2
    b = RunStats()
    for event in (round_(4, 4), round_(0, 0), Token(1, "x", Source.TARGET, 1)):
        b.add(event)
    both = a.merge(b)
    assert (both.new_tokens, both.target_passes, both.drafted, both.accepted, both.rejections) == (4, 4, 7, 5, 1)
    # Position i: drafted counts trials (up to the first rejection), accepted the hits.
    assert both.drafted_by_position == [3, 1, 1, 1] and both.accepted_by_position == [2, 1, 1, 1]
    assert both.generation_seconds == pytest.approx(a.generation_seconds + b.generation_seconds)
    assert b.mean_k == pytest.approx(2.0) and both.mean_k == pytest.approx(7 / 4)  # b: passes drafting 4 and 0
    assert math.isnan(RunStats().mean_k)
    assert RunStats().merge(RunStats()) == RunStats()
