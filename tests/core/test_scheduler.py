"""decoding/scheduler.py on the fake pair: events come out tagged, each request ends once,
`end` raises inside a request where it waits (a prompt's prefill too), a request that joins
mid-run shares the passes, and a caller that stops iterating leaves every cache exact. The
fakes record every pass (tests/fakes.MarkovModel), so the tests count what the passes held."""

from __future__ import annotations

import numpy as np

from fakes import MarkovModel
from test_batch import V, alone, prompts, shared_pair, tables
from specdec_cli.decoding.batch import Batcher
from specdec_cli.decoding.consume import EndEarly, consume
from specdec_cli.decoding.engine import Engine, GenerationConfig
from specdec_cli.decoding.scheduler import Ended, Scheduler
from specdec_cli.drafting.model import ModelDrafter
from specdec_cli.events import Prefill, Round, Token
from specdec_cli.maths.sampling import GREEDY
from specdec_cli.tuning.policy import draft_policy

GREEDY_30 = GenerationConfig(max_tokens=30, sampling=GREEDY)


def generation(batcher, target, draft, seq, prompt, config=GREEDY_30):
    engine = Engine(batcher.sequence(target, seq), ModelDrafter(batcher.sequence(draft, seq)), vocab_limit=V)
    return lambda emit: consume(engine.generate(prompt, config, draft_policy(3)), emit)


def test_each_requests_events_come_out_tagged_and_it_ends_once_with_its_outcome():
    batcher, target, draft = shared_pair()
    scheduler = Scheduler(batcher)
    ps = prompts(3)
    for i, p in enumerate(ps):
        scheduler.add(f"r{i}", generation(batcher, target, draft, i, p))
    seen: dict[str, list] = {f"r{i}": [] for i in range(3)}
    for tag, item in scheduler.run():
        seen[tag].append(item)
    for i, p in enumerate(ps):
        items = seen[f"r{i}"]
        assert isinstance(items[0], Prefill) and [type(x) for x in items].count(Ended) == 1 and isinstance(items[-1], Ended)
        outcome = items[-1].result
        assert tuple(outcome.tokens) == alone(p, GREEDY_30) and [x.id for x in items if isinstance(x, Token)] == outcome.tokens
    assert batcher.active == 0 and max(len(held) for held in target.passes) == 3  # all three shared target passes


def test_end_raises_inside_a_request_waiting_in_its_prefill_and_its_rows_leave_the_passes():
    """A 60-token prompt in chunks of 8 beside a generating sequence: ended after its second
    chunk, it ends with that error, its rows go in no later pass (counted by the fakes), both
    caches hold what its views say, and the other sequence is its greedy self."""
    batcher, target, draft = shared_pair()
    long = list(np.random.default_rng(5).integers(0, V, size=60))
    scheduler = Scheduler(batcher)
    scheduler.add("short", generation(batcher, target, draft, 0, prompts(1)[0]))
    ended, added, sent = {}, False, False
    for tag, item in scheduler.run():
        if tag == "short" and isinstance(item, Round) and not added:
            scheduler.add("long", generation(batcher, target, draft, 1, long))
            added = True
        if isinstance(item, Ended):
            ended[tag] = item
        if not sent and sum(1 for held in target.passes if any(seq == 1 for seq, _, _ in held)) == 2:
            scheduler.end("long", EndEarly("time_limit"))
            sent = True
    assert sum(1 for held in target.passes if any(seq == 1 for seq, _, _ in held)) == 2
    assert ended["long"].result.tokens == [] and ended["long"].result.stats.finish_reason == "time_limit"
    assert tuple(ended["short"].result.tokens) == alone(prompts(1)[0], GREEDY_30)
    for model in (target, draft):
        assert model.kv.get(1, []) == batcher.sequence(model, 1).tokens


def test_a_caller_that_stops_iterating_ends_every_request_with_its_caches_exact():
    batcher, target, draft = shared_pair()
    scheduler = Scheduler(batcher)
    for i, p in enumerate(prompts(3)):
        scheduler.add(i, generation(batcher, target, draft, i, p))
    events = scheduler.run()
    for n, _ in enumerate(events):
        if n == 10:
            break
    events.close()
    assert batcher.active == 0 and not batcher.waiting
    for i in range(3):
        for model in (target, draft):
            assert model.kv.get(i, []) == batcher.sequence(model, i).tokens


def test_a_figure_that_fails_after_a_pass_costs_no_sequence_its_rows():
    """A planted bug in the switch's bookkeeping after every target pass: each sequence still gets
    its rows and ends as its greedy self."""
    batcher, target, draft = shared_pair()

    def broken(*args):
        raise ZeroDivisionError("planted")

    batcher.switch.after_pass = broken
    scheduler = Scheduler(batcher)
    for i, p in enumerate(prompts(2)):
        scheduler.add(i, generation(batcher, target, draft, i, p))
    results = {tag: item for tag, item in scheduler.run() if isinstance(item, Ended)}
    for i, p in enumerate(prompts(2)):
        assert results[i].error is None and tuple(results[i].result.tokens) == alone(p, GREEDY_30)


def test_a_decode_outside_any_scheduler_runs_its_own_pass():
    t, _ = tables()
    target = MarkovModel(t)
    view = Batcher([target]).sequence(target, 2)
    rows = view.decode([1, 2, 3], 2)
    assert rows.shape == (2, V) and target.kv[2] == [1, 2, 3] and len(target.passes) == 1
