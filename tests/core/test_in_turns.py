"""The target-only baseline decoded in turns with the speculative run (decoding/in_turns.py).

On the fake backend with a fake clock: each model's decode moves the clock by its own cost, so
each generation's seconds can be counted from its own decodes and checked against its stats.
"""

from __future__ import annotations

import types

import numpy as np
import pytest

from fakes import MarkovModel, random_markov
from specdec_cli import clock
from specdec_cli.decoding.consume import consume
from specdec_cli.decoding.engine import Engine, GenerationConfig
from specdec_cli.decoding.in_turns import Beside
from specdec_cli.drafting.model import ModelDrafter
from specdec_cli.events import Finished, Round, Token
from specdec_cli.maths.sampling import GREEDY
from specdec_cli.tuning.policy import draft_policy

N_VOCAB = 12
PROMPT = [1, 2, 3]


class Costly(MarkovModel):
    """A decode moves the fake clock by `cost` seconds."""

    def __init__(self, table, now: list[float], cost: float) -> None:
        super().__init__(table)
        self.now, self.cost = now, cost

    def decode_rows(self, parts):
        self.now[0] += self.cost
        return super().decode_rows(parts)


@pytest.fixture
def fake_clock(monkeypatch) -> list[float]:
    now = [0.0]
    monkeypatch.setattr(clock, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))
    return now


def pair(now: list[float]) -> tuple[Costly, Costly, Costly]:
    rng = np.random.default_rng(7)
    target_table = random_markov(N_VOCAB, rng, scale=3.0)
    draft_table = target_table + rng.normal(0, 1.0, target_table.shape)  # agrees often, not always
    target, draft = Costly(target_table, now, 10.0), Costly(draft_table, now, 1.0)
    beside = target.sibling()
    beside.cost = 100.0
    return target, draft, beside


def test_each_generation_is_timed_by_its_own_decodes_and_the_baseline_keeps_pace(fake_clock):
    target, draft, sibling = pair(fake_clock)
    config = GenerationConfig(max_tokens=40, sampling=GREEDY, seed=1)
    engine = Engine(target, ModelDrafter(draft, N_VOCAB))
    beside = Beside(Engine(sibling, None).generate(PROMPT, config))
    paces = []  # the speculative run's tokens after each of its rounds
    made = 0

    def watch(event):
        nonlocal made
        made += isinstance(event, Token)
        if isinstance(event, Round):
            paces.append(made)

    outcome = consume(beside.alongside(engine.generate(PROMPT, config, draft_policy(4))), watch)
    base = beside.outcome

    # The same texts (greedy: the target's own).
    assert outcome.tokens == base.tokens and len(base.tokens) == 40
    # Each one's generation seconds are its own decodes' costs, none of the other's (the first
    # decode of each model is the prompt's, timed as the prefill).
    assert outcome.stats.generation_seconds == pytest.approx(10.0 * (len(target.calls) - 1) + 1.0 * (len(draft.calls) - 1))
    assert base.stats.generation_seconds == pytest.approx(100.0 * (len(sibling.calls) - 1))
    # Speculative rounds of several tokens; after each, the baseline had caught up (its count at
    # the moment of the round's event is behind, and its turn comes next).
    assert len(paces) < 40


def test_the_baseline_is_advanced_after_each_round_to_the_end_of_its_own_round(fake_clock):
    target, draft, sibling = pair(fake_clock)
    config = GenerationConfig(max_tokens=30, sampling=GREEDY, seed=1)
    log = []  # ("main" | "base", event)

    def tagged(name, events):
        for event in events:
            log.append((name, event))
            yield event

    beside = Beside(tagged("base", Engine(sibling, None).generate(PROMPT, config)))
    events = beside.alongside(tagged("main", Engine(target, ModelDrafter(draft, N_VOCAB)).generate(PROMPT, config, draft_policy(4))))
    consume(events)
    main_tokens = base_tokens = turns = 0
    for (name, event), (next_name, _) in zip(log, log[1:] + [(None, None)]):
        main_tokens += name == "main" and isinstance(event, Token)
        base_tokens += name == "base" and isinstance(event, Token)
        if name == "main" and next_name == "base":  # the speculative run hands over after a round (or at its end)
            assert isinstance(event, (Round, Finished)), event
        if name == "base" and next_name == "main":  # the baseline's turn ends
            assert isinstance(event, Round), f"the baseline waited for its turn in the middle of a round: {event}"
            assert base_tokens >= main_tokens
            turns += 1
    assert turns >= 3


def test_closing_early_closes_both_generations(fake_clock):
    target, draft, sibling = pair(fake_clock)
    config = GenerationConfig(max_tokens=30, sampling=GREEDY, seed=1)
    closed = []

    def watched(name, events):
        try:
            yield from events
        finally:
            closed.append(name)

    beside = Beside(watched("base", Engine(sibling, None).generate(PROMPT, config)))
    events = beside.alongside(watched("main", Engine(target, ModelDrafter(draft, N_VOCAB)).generate(PROMPT, config, draft_policy(4))))
    rounds = 0
    for event in events:
        rounds += isinstance(event, Round)
        if rounds == 2:  # the baseline has had a turn
            break
    events.close()
    assert sorted(closed) == ["base", "main"]
