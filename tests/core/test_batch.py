"""Several sequences in one batch (decoding/batch.py), on fake models: each exact as if alone.

The fakes (tests/fakes.MarkovModel) hold several sequences, check that each part starts where
its sequence ends, and record every pass, so the tests count what the passes held rather than
trust the batcher. Each sequence runs the one engine, all of them in one scheduler loop
(decoding/scheduler.py), on the test's own thread.
"""

from __future__ import annotations

import math
import threading
import time

import numpy as np
import pytest

from fakes import MarkovModel, ToyModel, random_markov
from stat_checks import ALPHA, PLAIN, first_two_law, first_two_pvalue
from specdec_cli.decoding import engine as engine_module
from specdec_cli.decoding.batch import CATCH_UP_FREE, BatchedPolicy, Batcher
from specdec_cli.decoding.consume import consume
from specdec_cli.decoding.engine import Engine, GenerationConfig
from specdec_cli.decoding.scheduler import Ended, Scheduler
from specdec_cli.drafting.lookup import LookupDrafter, LookupOptions
from specdec_cli.errors import ContextOverflow
from specdec_cli.events import Finished, Round
from specdec_cli.drafting.model import ModelDrafter
from specdec_cli.maths.filters import probabilities
from specdec_cli.maths.sampling import GREEDY, SamplingParams
from specdec_cli.tuning.adaptive import AdaptivePolicy
from specdec_cli.tuning.cost_curve import CostCurve
from specdec_cli.tuning.policy import draft_policy
from specdec_cli.tuning.switch import DraftingSwitch

V = 12
HOT = SamplingParams(temperature=0.8, top_k=6, top_p=0.95, min_p=0.02)


def tables(seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    target = random_markov(V, rng, scale=1.5)
    draft = target + rng.standard_normal(target.shape).astype(np.float32) * 0.7
    return target, draft


def shared_pair(target_model=MarkovModel, n_batch: int = 512):
    t, d = tables()
    target, draft = target_model(t, n_batch=n_batch), MarkovModel(d, n_batch=n_batch)
    batcher = Batcher([draft, target], names=["draft", "target"], prefill_chunk=8)
    return batcher, target, draft


def engine_for(batcher, target, draft, seq: int, drafter: str) -> Engine:
    t, d = batcher.sequence(target, seq), batcher.sequence(draft, seq)
    if drafter == "none":
        return Engine(t, None, vocab_limit=V)
    if drafter == "lookup":
        return Engine(t, LookupDrafter(LookupOptions(), vocab_limit=V), vocab_limit=V)
    return Engine(t, ModelDrafter(d), vocab_limit=V)


# (drafter, k, verify) per sequence: every batch below mixes them
SETTINGS = [("model", 3, "token"), ("model", 1, "block"), ("none", 0, "token"), ("lookup", 4, "token"), ("model", 6, "auto")]


def together(
    batcher, target, draft, runs, rounds: list[list[Round]] | None = None, batched: bool = False, lag: bool = False
) -> tuple[list, list]:
    """Run each sequence's list of (prompt, config, drafter, k) as one request of a scheduler, all
    added before any starts; returns each sequence's token tuples and the exception it met (or None).
    `rounds`, if given, gets each sequence's Round events; `batched`: each policy goes through
    BatchedPolicy (the server's way: the drafting switch decides too), told where `lag` that the
    draft model lags behind (so every round asks whether its catch-up pays)."""
    outputs: list[list] = [[] for _ in runs]
    errors: list = [None] * len(runs)

    def work(i: int, emit) -> None:
        for prompt, config, drafter, k in runs[i]:
            engine = engine_for(batcher, target, draft, i, drafter)
            policy = draft_policy(k) if drafter != "none" else None
            if batched and policy is not None:
                policy = BatchedPolicy(policy, batcher, lag=(lambda: CATCH_UP_FREE + 1) if lag else None)
            events = list(engine.generate(prompt, config, policy))
            outputs[i].append([e.tokens for e in events if isinstance(e, Finished)][0])
            if rounds is not None:
                rounds[i] += [e for e in events if isinstance(e, Round)]

    scheduler = Scheduler(batcher)
    for i in range(len(runs)):
        scheduler.add(i, lambda emit, i=i: work(i, emit))
    for i, item in scheduler.run():
        if isinstance(item, Ended):
            errors[i] = item.error
    return outputs, errors


def alone(prompt, config) -> tuple[int, ...]:
    """Target-only decoding of the prompt on a fresh target, no batch."""
    t, _ = tables()
    events = Engine(MarkovModel(t), None, vocab_limit=V).generate(prompt, config)
    return [e for e in events if type(e).__name__ == "Finished"][0].tokens


def prompts(n: int) -> list[list[int]]:
    rng = np.random.default_rng(11)
    return [list(rng.integers(0, V, size=3 + 5 * i)) for i in range(n)]


def test_every_sequence_is_its_greedy_self_and_the_target_passes_hold_several():
    batcher, target, draft = shared_pair()
    config = GenerationConfig(max_tokens=40, sampling=GREEDY)
    runs = [[(p, GenerationConfig(max_tokens=40, sampling=GREEDY, verify=v), d, k)] for p, (d, k, v) in zip(prompts(5), SETTINGS)]
    outputs, errors = together(batcher, target, draft, runs)
    assert errors == [None] * 5
    for run, out in zip(runs, outputs):
        assert out[0] == alone(run[0][0], config)
    # counted by the fake: passes of the target that held rows of several sequences, and no pass beyond n_batch
    sizes = [len(p) for p in target.passes]
    assert max(sizes) >= 4 and sum(s > 1 for s in sizes) > len(sizes) / 2, sizes
    # each sequence's cache holds exactly what its view says
    for seq in range(5):
        assert target.kv[seq] == batcher.sequence(target, seq).tokens


def test_every_pass_of_both_models_runs_on_the_loops_thread_and_no_thread_is_started():
    """llama.cpp's OpenMP gives each thread that starts a pass a pool of its own; more pools than
    cores make every pass slow. Counted: the thread of each pass, and the threads alive."""
    batcher, target, draft = shared_pair()
    seen: list[tuple[str, int]] = []
    for name, model in (("target", target), ("draft", draft)):
        own = model.decode_rows
        model.decode_rows = lambda parts, own=own, name=name: seen.append((name, threading.get_ident(), threading.active_count())) or own(parts)
    runs = [[(p, GenerationConfig(max_tokens=20, sampling=GREEDY), "model", 3)] for p in prompts(4)]
    before = threading.active_count()
    outputs, errors = together(batcher, target, draft, runs)
    assert errors == [None] * 4 and all(outputs)
    assert {name for name, _, _ in seen} == {"target", "draft"} and len(seen) >= 20
    assert {ident for _, ident, _ in seen} == {threading.get_ident()}
    assert {alive for _, _, alive in seen} == {before}


def test_the_log_times_the_passes_and_the_spans_between_them():
    """PassLog.busy and .between against the fakes' own timing: each model's passes took at least
    what the model measured inside them, one span lies between each two passes while the
    sequences stay joined, and passes and spans, disjoint, fit in the run's wall time."""
    batcher, target, draft = shared_pair()
    timed = {"target": 0.0, "draft": 0.0}
    for name, model in (("target", target), ("draft", draft)):
        own = model.decode_rows

        def slow(parts, own=own, name=name):
            start = time.perf_counter()
            time.sleep(0.001)
            out = own(parts)
            timed[name] += time.perf_counter() - start
            return out

        model.decode_rows = slow
    runs = [[(p, GenerationConfig(max_tokens=12, sampling=GREEDY), "model", 3)] for p in prompts(3)]
    start = time.perf_counter()
    outputs, errors = together(batcher, target, draft, runs)
    wall = time.perf_counter() - start
    assert errors == [None] * 3 and all(outputs)
    passes = len(target.passes) + len(draft.passes)  # counted by the fakes
    assert batcher.log.spans == passes - 1 and batcher.log.between > 0
    for name, seconds in timed.items():
        assert batcher.log.busy[name] >= seconds > 0
    assert sum(batcher.log.busy.values()) + batcher.log.between <= wall
    assert batcher.active == 0 and batcher._last_end is None  # all left: the idle time after is no span


def test_caches_end_exact_per_sequence():
    batcher, target, draft = shared_pair()
    views = [(batcher.sequence(target, i), batcher.sequence(draft, i)) for i in range(3)]
    outs = [[] for _ in range(3)]

    def work(i, emit):
        engine = Engine(views[i][0], ModelDrafter(views[i][1]), vocab_limit=V)
        events = list(engine.generate(prompts(3)[i], GenerationConfig(max_tokens=30, sampling=GREEDY), draft_policy(4)))
        outs[i] = list(prompts(3)[i]) + list(events[-1].tokens)

    scheduler = Scheduler(batcher)
    for i in range(3):
        scheduler.add(i, lambda emit, i=i: work(i, emit))
    assert [item.error for _, item in scheduler.run() if isinstance(item, Ended)] == [None] * 3
    for i, (t_view, d_view) in enumerate(views):
        assert target.kv[i] == t_view.tokens and draft.kv[i] == d_view.tokens  # the model's own record
        assert outs[i][: len(t_view.tokens)] == t_view.tokens  # the accepted prefix, nothing stale


@pytest.mark.parametrize("temperature", [1.0, 0.8])
def test_first_two_law_of_each_sequence_with_different_settings_in_one_batch(temperature):
    """N = 1,500 generations of two tokens per sequence, three sequences with different settings
    sharing every pass (fixed seeds); each sequence's first two tokens against the exact law at
    ALPHA = 1e-4, so a false failure has probability at most 3e-4 per temperature."""
    n = 1500
    batcher, target, draft = shared_pair()
    t, _ = tables()
    params = [SamplingParams(temperature=temperature), PLAIN if temperature == 1.0 else HOT, SamplingParams(temperature=temperature, top_k=4)]
    settings = [("model", 3, "token"), ("model", 2, "block"), ("lookup", 3, "token")]
    ps = prompts(3)
    runs = [
        [(ps[i], GenerationConfig(max_tokens=2, sampling=params[i], seed=1000 * i + j, verify=settings[i][2]), settings[i][0], settings[i][1]) for j in range(n)]
        for i in range(3)
    ]
    outputs, errors = together(batcher, target, draft, runs)
    assert errors == [None] * 3
    assert sum(len(p) > 1 for p in target.passes) > n, "the sequences did not share passes"
    for i in range(3):
        law = first_two_law(lambda prefix: probabilities(t[(ps[i] + list(prefix))[-1]], params[i]), n)
        assert first_two_pvalue(outputs[i], law) > ALPHA


class CoinSwitch(DraftingSwitch):
    """A switch that starts an epoch at every pass holding every sequence, its mode a coin's (own generator)."""

    def __init__(self, seed: int) -> None:
        super().__init__(epoch_seconds=0.0)
        self.coin = np.random.default_rng(seed)
        self.declined = 0  # catch-ups the coin said would not pay

    def _next_way(self, n: int, begin: bool) -> tuple[bool, bool]:
        return bool(self.coin.integers(2)), False

    def saving_per_token(self, n: int) -> float:
        """By a coin too: a lagging sequence's catch-up pays (1 s a token saved, 3 times in 4) or
        does not (0)."""
        saving = float(self.coin.random() < 0.75)
        self.declined += saving == 0.0
        return saving


def test_first_two_law_holds_while_the_switch_turns_drafting_on_and_off():
    """N = 1,500 generations of two tokens per sequence at T = 0.8, two sequences with different
    filters and verify rules, their policies through BatchedPolicy, and a switch that turns the
    draft model on or off by a coin at every pass that holds both (the costs' line is told that
    drafting can pay), and whether a draft model said to lag behind may catch up by another coin
    (BatchedPolicy's catch-up rule).
    Which rounds draft then depends on anything but the round's own draws.
    Each sequence's first two tokens against the exact law at ALPHA = 1e-4 (fixed seeds): a false
    failure has probability at most 2e-4."""
    n = 1500
    batcher, target, draft = shared_pair()
    batcher.switch = CoinSwitch(seed=5)
    batcher.draft_model_can_pay = lambda: True
    t, _ = tables()
    params = [HOT, SamplingParams(temperature=0.8, top_k=4)]
    verify = ["token", "block"]
    ps = prompts(2)
    runs = [[(ps[i], GenerationConfig(max_tokens=2, sampling=params[i], seed=500 * i + j, verify=verify[i]), "model", 3) for j in range(n)] for i in range(2)]
    rounds: list[list[Round]] = [[], []]
    outputs, errors = together(batcher, target, draft, runs, rounds, batched=True, lag=True)
    assert errors == [None, None]
    assert batcher.switch.declined > n / 10  # counted: the catch-up rule turned drafting off that often
    for i in range(2):
        drafted = sum(r.drafter == "model" for r in rounds[i])
        plain = sum(r.drafter == "" for r in rounds[i])
        assert drafted > n / 4 and plain > n / 4, (drafted, plain, batcher.switch.declined)  # counted: both modes ran often
        law = first_two_law(lambda prefix: probabilities(t[(ps[i] + list(prefix))[-1]], params[i]), n)
        assert first_two_pvalue(outputs[i], law) > ALPHA


def test_where_drafting_makes_the_batch_slower_the_switch_turns_it_off_and_outputs_stay_exact():
    """Two greedy sequences whose draft steps take 15 ms each while a target pass takes 1 ms, the
    costs' line told that drafting can pay: after the switch explored both ways (epochs of 20 ms),
    only its probes draft (every 8th epoch). Counted: rounds the draft model drafted, in the first and in the
    second half of each sequence's rounds. Each output is still the target's greedy decoding."""
    t, d = tables()
    target, draft = ToyModel(t, seconds_per_decode=0.001), ToyModel(d, seconds_per_decode=0.015)
    batcher = Batcher([draft, target], names=["draft", "target"], prefill_chunk=8)
    batcher.switch = DraftingSwitch(epoch_seconds=0.02)
    batcher.draft_model_can_pay = lambda: True
    config = GenerationConfig(max_tokens=400, sampling=GREEDY)
    ps = prompts(2)
    rounds: list[list[Round]] = [[], []]
    outputs, errors = together(batcher, target, draft, [[(p, config, "model", 4)] for p in ps], rounds, batched=True)
    assert errors == [None, None]
    for i in range(2):
        assert outputs[i][0] == alone(ps[i], config)
        half = len(rounds[i]) // 2
        early = sum(r.drafter == "model" for r in rounds[i][:half])
        late = sum(r.drafter == "model" for r in rounds[i][half:])
        assert early >= 1 and late <= 0.2 * (len(rounds[i]) - half), (early, late, len(rounds[i]))
    assert batcher.switch.rates[2, False].value > batcher.switch.rates[2, True].value


def test_each_sequence_draws_from_its_own_rng():
    """At T = 0.8 with fixed k (the fake's rows do not depend on the batch), every sequence gives
    exactly the tokens its seed gives alone. A planted shared RNG fails it."""
    config = lambda seed: GenerationConfig(max_tokens=30, sampling=HOT, seed=seed)  # noqa: E731

    def batch_outputs():
        batcher, target, draft = shared_pair()
        runs = [[(p, config(7 + i), "model", 3)] for i, p in enumerate(prompts(4))]
        outputs, errors = together(batcher, target, draft, runs)
        assert errors == [None] * 4
        return [o[0] for o in outputs]

    def alone_outputs():
        out = []
        for i, p in enumerate(prompts(4)):
            t, d = tables()
            events = Engine(MarkovModel(t), ModelDrafter(MarkovModel(d)), vocab_limit=V).generate(p, config(7 + i), draft_policy(3))
            out.append([e for e in events if type(e).__name__ == "Finished"][0].tokens)
        return out

    assert batch_outputs() == alone_outputs()
    shared = np.random.default_rng(0)
    real = engine_module.np.random.default_rng
    try:
        engine_module.np.random.default_rng = lambda seed=None: shared  # the planted bug: one RNG for all
        assert batch_outputs() != alone_outputs()
    finally:
        engine_module.np.random.default_rng = real


class SwappingModel(MarkovModel):
    """A planted bug: the first two parts of a pass that ask for as many rows get each other's rows."""

    def decode_rows(self, parts):
        out = super().decode_rows(parts)
        same = [i for i, p in enumerate(parts) if p[3] and p[3] == parts[0][3]]
        if len(same) >= 2:
            a, b = same[:2]
            out[a], out[b] = out[b], out[a]
        return out


def test_rows_handed_to_the_wrong_sequence_fail_the_identity():
    batcher, target, draft = shared_pair(SwappingModel)
    runs = [[(p, GenerationConfig(max_tokens=30, sampling=GREEDY), "model", 3)] for p in prompts(3)]
    outputs, _ = together(batcher, target, draft, runs)
    assert any(out[:1] != [alone(run[0][0], GenerationConfig(max_tokens=30, sampling=GREEDY))] for run, out in zip(runs, outputs))


class FailingDrafter(ModelDrafter):
    def __init__(self, model, after: int):
        super().__init__(model)
        self.after = after

    def propose(self, *args, **kw):
        self.after -= 1
        if self.after < 0:
            raise AssertionError("planted")
        return super().propose(*args, **kw)


def test_a_sequence_that_fails_or_is_cancelled_midway_leaves_the_others_exact():
    batcher, target, draft = shared_pair()
    ps = prompts(4)
    greedy = GenerationConfig(max_tokens=40, sampling=GREEDY)
    results: dict[int, object] = {}

    def work(i, emit):
        tv, dv = batcher.sequence(target, i), batcher.sequence(draft, i)
        drafter = FailingDrafter(dv, after=3) if i == 1 else ModelDrafter(dv)
        try:
            events = Engine(tv, drafter, vocab_limit=V).generate(ps[i], greedy, draft_policy(3))
            if i == 2:  # the client leaves after a few events: the generator is closed
                for n, _ in enumerate(events):
                    if n == 6:
                        events.close()
                        break
                results[i] = "cancelled"
            else:
                results[i] = [e for e in events if type(e).__name__ == "Finished"][0].tokens
        except AssertionError as exc:
            results[i] = exc

    scheduler = Scheduler(batcher)
    for i in range(4):
        scheduler.add(i, lambda emit, i=i: work(i, emit))
    assert all(item.error is None for _, item in scheduler.run())
    assert isinstance(results[1], AssertionError) and results[2] == "cancelled"
    for i in (0, 3):
        assert results[i] == alone(ps[i], greedy)
    for i in range(4):  # every sequence's cache, the failed and the cancelled too, holds what its view says
        assert target.kv[i] == batcher.sequence(target, i).tokens and draft.kv[i] == batcher.sequence(draft, i).tokens
        assert target.kv[i][: len(ps[i]) - 1] == list(ps[i][:-1])


class PoisonModel(MarkovModel):
    """Fails any pass that holds token 11 in sequence 1 (as llama_decode fails a whole batch)."""

    def decode_rows(self, parts):
        if any(seq == 1 and 11 in list(tokens) for seq, _, tokens, _ in parts):
            raise RuntimeError("planted decode failure")
        return super().decode_rows(parts)


def test_a_pass_that_fails_for_one_sequence_fails_that_sequence_alone():
    batcher, target, draft = shared_pair(PoisonModel)
    ps = prompts(3)
    ps[1] = ps[1][:-1] + [11]  # sequence 1's first round holds 11
    greedy = GenerationConfig(max_tokens=30, sampling=GREEDY)
    runs = [[(p, greedy, "model", 3)] for p in ps]
    outputs, errors = together(batcher, target, draft, runs)
    assert isinstance(errors[1], RuntimeError) and errors[0] is None and errors[2] is None
    for i in (0, 2):
        assert outputs[i][0] == alone(ps[i], greedy)
    for i in range(3):
        assert target.kv.get(i, []) == batcher.sequence(target, i).tokens


def test_a_long_prompt_goes_in_chunks_beside_the_generating_sequences():
    batcher, target, draft = shared_pair()
    ps = [prompts(1)[0], list(np.random.default_rng(5).integers(0, V, size=60))]
    greedy = GenerationConfig(max_tokens=60, sampling=GREEDY)

    outputs: list = [None, None]

    def work(i, emit):
        engine = engine_for(batcher, target, draft, i, "model")
        outputs[i] = tuple(consume(engine.generate(ps[i], greedy, draft_policy(2)), emit).tokens)

    scheduler = Scheduler(batcher)
    scheduler.add(0, lambda emit: work(0, emit))
    for i, item in scheduler.run():
        if i == 0 and isinstance(item, Round) and scheduler.running == 1 and outputs[1] is None:
            scheduler.add(1, lambda emit: work(1, emit))  # sequence 0 is generating: now the long prompt arrives
        assert not isinstance(item, Ended) or item.error is None
    assert outputs[0] == alone(ps[0], greedy) and outputs[1] == alone(ps[1], greedy)
    # counted from the target's passes: the 59 prompt tokens never went in a pass beside sequence 0's
    # rows more than prefill_chunk (8) at a time
    beside = [dict((seq, n) for seq, n, _ in p) for p in target.passes if len(p) == 2]
    assert sum(p[1] for p in beside) >= 59 - 8 and all(p[1] <= 8 for p in beside), beside


class RecordingSwitch(DraftingSwitch):
    """Records what every target pass told it (the sequences joined, the seconds set aside for
    prompts) and every draft pass (the seconds of catch-up)."""

    def __init__(self) -> None:
        super().__init__()
        self.told: list[tuple[int, float]] = []
        self.caught: list[float] = []
        self._aside = 0.0

    def set_aside(self, seconds: float) -> None:
        self._aside += seconds
        super().set_aside(seconds)

    def catch_up(self, seconds: float) -> None:
        self.caught.append(seconds)
        super().catch_up(seconds)

    def after_pass(self, n: int, held_all: bool, now: float) -> None:
        self.told.append((n, self._aside))
        self._aside = 0.0
        super().after_pass(n, held_all, now)


def test_the_switch_is_told_each_join_and_leave_what_each_pass_spent_on_prompts_and_on_catch_ups():
    """Two sequences, one with a prompt of 60 tokens that goes in chunks of 8 beside the other's
    rounds: every target pass that held a row wanting no logits (a prompt's) tells the switch
    some seconds for it, and only those; every draft pass that held more than CATCH_UP_FREE rows
    of a sequence (the long prompt's catch-up when it first drafts) tells some seconds of
    catch-up, and only those; two joins and two leaves make four turns."""
    batcher, target, draft = shared_pair()
    batcher.switch = switch = RecordingSwitch()
    batcher.costs[-1].line = lambda: (0.010, 0.001, 0.001)  # the fakes' passes take microseconds: lines fixed, not fitted to noise
    batcher.costs[0].line = lambda: (0.002, 0.0005, 0.0005)
    ps = [prompts(1)[0], list(np.random.default_rng(5).integers(0, V, size=60))]
    greedy = GenerationConfig(max_tokens=20, sampling=GREEDY)
    outputs, errors = together(batcher, target, draft, [[(p, greedy, "model", 2)] for p in ps])
    assert errors == [None, None] and outputs == [[alone(p, greedy)] for p in ps]
    assert len(switch.told) == len(target.passes)
    for held, (_, spent) in zip(target.passes, switch.told):
        assert (spent > 0) == any(rows > n_logits for _, rows, n_logits in held), (held, spent)
    assert sum(1 for held in target.passes if any(rows > n for _, rows, n in held)) >= 60 // 8
    assert len(switch.caught) == len(draft.passes)
    for held, spent in zip(draft.passes, switch.caught):
        assert (spent > 0) == any(rows > CATCH_UP_FREE for _, rows, _ in held), (held, spent)
    assert any(seq == 1 and rows >= 59 for held in draft.passes for seq, rows, _ in held)  # the long prompt caught up
    assert switch.turns == 4


def test_auto_starts_from_the_costs_a_sequence_pays_at_its_batch_size():
    batcher, target, draft = shared_pair()
    assert batcher.cost_curve(2, 4) is None  # nothing timed yet
    for rows, seqs, seconds in [(1, 1, 0.010), (9, 1, 0.014), (4, 4, 0.018)] * 3:  # the target's passes
        batcher.costs[1].add(rows, seqs, seconds)
    for rows, seqs, seconds in [(1, 1, 0.002), (4, 4, 0.006), (2, 1, 0.0025)] * 3:  # the draft's
        batcher.costs[0].add(rows, seqs, seconds)
    a, b, c = batcher.costs[1].line()
    curve = batcher.cost_curve(4, 3)
    assert curve.target_batch == pytest.approx(tuple(a / 4 + c + b * n for n in (1, 2, 3)))
    da, db, dc = batcher.costs[0].line()
    assert curve.draft_step == pytest.approx(da / 4 + dc + db)
    assert batcher.cost_curve(1, 1).target_batch[0] == pytest.approx(a + b + c)  # alone: a whole one-row pass


class Choosing:
    p_min = 0.0
    probing = True

    def __init__(self):
        self.offered = []

    def choose(self, sources, budget):
        self.offered.append(list(sources))
        return (sources[0], 3) if sources else (None, 0)


def test_the_draft_model_is_left_out_where_it_cannot_pay_at_the_batch_size():
    """Target passes cost 10 ms + 1 ms a row + 0 a sequence; a draft step 1 ms + 3 ms a row. Alone
    (a / N = 10 ms > 4 ms) the draft model may draft; among four (2.5 ms < 1 / 4 + 3 ms, all four
    drafting together) it may not, while lookup, which takes no draft pass, still may."""
    batcher, target, draft = shared_pair()
    for rows, seqs in [(1, 1), (5, 1), (4, 4), (8, 4), (2, 2)] * 3:
        batcher.costs[1].add(rows, seqs, 0.010 + 0.001 * rows)
        batcher.costs[0].add(rows, seqs, 0.001 + 0.003 * rows)
    inner = Choosing()
    policy = BatchedPolicy(inner, batcher)
    with batcher.joined():
        assert batcher.draft_model_can_pay()
        batcher._drafting_together = 1.0  # as if the recent draft passes each held one sequence: alone it still pays
        assert batcher.draft_model_can_pay()
        batcher._drafting_together = None
        assert policy.choose(["model", "lookup:2"], 8) == ("model", 3)
    for _ in range(4):  # four joined
        batcher.join()
    assert not batcher.draft_model_can_pay()
    assert policy.choose(["model", "lookup:2"], 8) == ("lookup:2", 3)
    assert policy.choose(["cascade:2"], 8) == (None, 0)
    assert inner.offered == [["model", "lookup:2"], ["lookup:2"], []]
    assert not inner.probing  # no probes while others share the passes


def test_a_sequence_beyond_its_context_is_refused_as_the_model_refuses():
    t, _ = tables()
    target = MarkovModel(t, n_ctx=8)
    view = Batcher([target]).sequence(target, 1)
    view.decode([1, 2, 3, 4, 5], 1)
    with pytest.raises(ContextOverflow, match=r"^the context holds 8 tokens but 9 are needed; pass a larger --ctx$"):
        view.decode([1, 2, 3, 4], 1)
    assert view.tokens == [1, 2, 3, 4, 5] and target.kv[1] == view.tokens  # nothing was decoded


def test_a_draft_model_far_behind_catches_up_only_where_the_tokens_left_pay_for_it():
    """Two sequences joined; the switch measured 30 tokens/s without drafting and drafting 1.6x
    ahead (saving (1 - 1 / 1.6) / 30 = 12.5 ms a token); a draft pass costs 1 ms + 5 ms a row, so
    catching up 80 tokens costs 0.5 + 5 + 79 * 5 = 400.5 ms: worth it for 48 tokens to go (600 ms
    saved), not for 20 (250 ms). A lag of CATCH_UP_FREE tokens is drafting along and always drafts;
    alone, or where the switch has paired nothing yet, the policy's own estimate stands in."""
    batcher = shared_pair()[0]
    for rows, seqs in [(1, 1), (5, 1), (4, 4), (8, 4), (2, 2)] * 3:
        batcher.costs[1].add(rows, seqs, 0.040 + 0.001 * rows)
        batcher.costs[0].add(rows, seqs, 0.001 + 0.005 * rows)
    switch = batcher.switch
    switch.tried[2, True] = switch.tried[2, False] = 1  # explored: the choice is made on the gain
    switch.rates[2, False].add(30.0)
    switch.gain[2].add(math.log(1.6))
    assert switch.saving_per_token(2) == pytest.approx(0.0125)
    lag = [80]
    inner = Choosing()
    policy = BatchedPolicy(inner, batcher, lag=lambda: lag[0])
    with batcher.joined():  # alone
        assert batcher.catch_up_seconds(80) == pytest.approx(0.001 + 0.005 * 80, rel=0.02)
        assert batcher.draft_model_drafts(80, 20, own_saving=lambda: 0.0125)[0] is False
        assert batcher.draft_model_drafts(80, 48, own_saving=lambda: 0.0125)[0] is True
        assert batcher.draft_model_drafts(80, 20, own_saving=lambda: None)[0] is True  # nothing to judge by yet
    with batcher.joined(), batcher.joined():  # two joined
        assert batcher.catch_up_seconds(80) == pytest.approx(0.0005 + 0.005 * 80, rel=0.02)
        assert policy.choose(["model", "lookup:2"], 19) == ("lookup:2", 3)  # 20 tokens to go
        assert policy.choose(["model", "lookup:2"], 47) == ("model", 3)  # 48
        lag[0] = CATCH_UP_FREE
        assert policy.choose(["model", "lookup:2"], 3) == ("model", 3)
        batcher.switch = DraftingSwitch()  # nothing paired: the sequence's own estimate decides
        assert batcher.draft_model_drafts(80, 20, own_saving=lambda: 0.0125)[0] is False
        assert batcher.draft_model_drafts(80, 48, own_saving=lambda: 0.0125)[0] is True
        assert batcher.draft_model_drafts(80, 20, own_saving=lambda: None)[0] is True
    assert inner.offered == [["lookup:2"], ["model", "lookup:2"], ["model", "lookup:2"]]


def test_alone_a_sequence_catches_up_where_its_own_policys_plan_repays_the_catch_up():
    """Alone (the switch pairs nothing), a draft model 80 tokens behind catches up only where the
    tokens left, at what its policy's own plan saves a token, repay the catch-up (about 400 ms by
    the draft passes' line, as above). The plan, by hand (test_policy.py's worked example):
    a = 0.8, a draft step 5 ms, T_batch(n) = 12 + 1.5 (n - 1) ms -> k = 2, 2.44 tokens in 25 ms,
    so a token costs 10.25 ms against a plain step's 12: 1.75 ms saved, and some 230 tokens to go
    repay the catch-up. A pair whose drafts are mostly rejected (a = 0.3) saves nothing: it never
    catches up."""
    batcher = shared_pair()[0]
    for rows, seqs in [(1, 1), (5, 1), (4, 4), (8, 4), (2, 2)] * 3:
        batcher.costs[1].add(rows, seqs, 0.040 + 0.001 * rows)
        batcher.costs[0].add(rows, seqs, 0.001 + 0.005 * rows)

    def policy(acceptance: float) -> BatchedPolicy:
        costs = CostCurve(draft_step=0.005, target_batch=tuple((12 + 1.5 * n) * 1e-3 for n in range(17)))
        inner = AdaptivePolicy(costs=costs, learn_costs=False)
        inner.record("model").acceptance.resume([100 * acceptance] * 16, [100.0] * 16)
        return BatchedPolicy(inner, batcher, lag=lambda: 80)

    good, poor = policy(0.8), policy(0.3)
    saving = 0.012 - 0.025 / 2.44
    assert good.own_saving(["model"], 1000) == pytest.approx(saving, rel=0.01)
    assert poor.own_saving(["model"], 1000) < 0
    assert BatchedPolicy(Choosing(), batcher).own_saving(["model"], 8) is None  # a fixed k: no estimates
    with batcher.joined():
        cost = batcher.catch_up_seconds(80)
        assert cost == pytest.approx(0.4005, rel=0.02)
        repaid = math.ceil(cost / saving)  # the fewest tokens to go that repay it
        assert good.choose(["model"], repaid - 1)[0] == "model"  # a budget of n tokens has n + 1 to go
        assert good.choose(["model"], repaid - 2) == (None, 0)
        assert poor.choose(["model"], 10_000) == (None, 0)
