"""`--verify auto` (tuning/rule_choice.py): the decision rule on its worked example, what it learns from
rounds and when it probes, what the engine reports, and (statistically, on toy Markov models)
that the rules it switches between keep the target's law at every position.

The law of the first two tokens under auto, and a chooser that peeks at the round's outcome
failing it, are in test_block_verify.py (with the block rule's own law tests).
"""

from __future__ import annotations

import numpy as np
import pytest

from fakes import MarkovModel, random_markov
from specdec_cli.drafting.lookup import LookupDrafter
from specdec_cli.drafting.model import ModelDrafter
from specdec_cli.decoding.engine import Engine, GenerationConfig
from specdec_cli.events import Round
from specdec_cli.tuning.policy import FixedPolicy
from specdec_cli.tuning.rule_choice import AutoRule, BLOCK, FixedRule, PROBE_EVERY, TOKEN, block_pays, rule_chooser
from specdec_cli.maths.sampling import GREEDY, SamplingParams
from specdec_cli.decoding.consume import consume
from stat_checks import PLAIN
from transitions import transition_test

MS = 1e-3
FILTERED = SamplingParams(temperature=0.8, top_k=4, top_p=0.95, min_p=0.05)


def verified(rule: str, accepted: int, rule_ms: float, token_ms: float, gain: float | None = None, k: int = 4) -> Round:
    """A round of k sampled drafts verified by `rule` in rule_ms, taking token_ms per token it makes."""
    tokens = accepted + 1
    return Round(k, accepted, 0.0, 0.0, 0.0, tokens * token_ms * MS, drafter="model", k=k, rule=rule, rule_seconds=rule_ms * MS, block_gain=gain)


def learn(chooser: AutoRule, token_ms: float) -> list[str]:
    """The module's example: rounds of 4 drafts, block keeping 0.2 more in expectation (0.05 per
    draft) and verifying in 1.5 ms per draft, the token rule in 0.2 ms. The rules it chose."""
    chosen = []
    for _ in range(3):
        rule = chooser.choose(sampled=True, drafts=4)
        chosen.append(rule)
        if rule == BLOCK:
            chooser.observe(verified(BLOCK, 2, 4 * 1.5, token_ms, gain=0.2))
        else:
            chooser.observe(verified(TOKEN, 2, 4 * 0.2, token_ms))
    return chosen


def test_the_decision_rule_on_the_modules_example():
    assert not block_pays(0.05, 20 * MS, 1.5 * MS, 0.2 * MS)  # the gain is worth 1.0 ms per draft, block costs 1.3 ms more
    assert block_pays(0.05, 40 * MS, 1.5 * MS, 0.2 * MS)  # at 40 ms a token it is worth 2.0 ms

    at_20, at_40 = AutoRule(), AutoRule()
    # Round 1: token, its timing left out (after a prefill); round 2 block, round 3 token: each measured.
    assert learn(at_20, token_ms=20) == learn(at_40, token_ms=40) == [TOKEN, BLOCK, TOKEN]
    assert at_20.seconds_per_token == pytest.approx(20 * MS) and at_20.gain.value == pytest.approx(0.05)
    assert at_20.seconds[BLOCK].value == pytest.approx(1.5 * MS) and at_20.seconds[TOKEN].value == pytest.approx(0.2 * MS)
    assert at_20.choose(sampled=True, drafts=4) == TOKEN
    assert at_40.choose(sampled=True, drafts=4) == BLOCK


def test_where_the_rules_coincide_it_takes_token_and_learns_nothing():
    chooser = AutoRule()
    learn(chooser, token_ms=40)
    assert chooser.planned == BLOCK
    before = (chooser.gain.weight, dict(chooser.since))
    for sampled, drafts in ((False, 4), (True, 1), (True, 0)):  # lookup or T = 0; one draft; none
        assert chooser.choose(sampled=sampled, drafts=drafts) == TOKEN
        chooser.observe(verified(TOKEN, 0, 0.1, 40, k=max(drafts, 1)))
    assert (chooser.gain.weight, dict(chooser.since)) == before and chooser.planned == BLOCK
    plain = AutoRule()
    plain.observe(Round(0, 0, 0.0, 0.0, 0.01, 0.02))  # a plain step: no choice was made
    assert plain.planned == TOKEN and plain.seconds[TOKEN].value is None


def test_the_rule_not_chosen_verifies_one_round_in_probe_every_plus_one():
    chooser = AutoRule()
    learn(chooser, token_ms=20)  # token pays; block is probed
    chosen = []
    for _ in range(3 * (PROBE_EVERY + 1)):
        rule = chooser.choose(sampled=True, drafts=4)
        chosen.append(rule)
        chooser.observe(verified(rule, 2, 4 * (1.5 if rule == BLOCK else 0.2), 20, gain=0.2 if rule == BLOCK else None))
    assert [i for i, rule in enumerate(chosen) if rule == BLOCK] == [PROBE_EVERY - 1, 2 * PROBE_EVERY, 3 * PROBE_EVERY + 1]
    # The token rule gets dearer (1.4 ms a draft, e.g. a loaded machine): block pays from about the
    # tenth round on (the estimates weigh about the last ten samples, each held within twice its estimate).
    chosen = []
    for _ in range(PROBE_EVERY):
        rule = chooser.choose(sampled=True, drafts=4)
        chosen.append(rule)
        chooser.observe(verified(rule, 2, 4 * (1.5 if rule == BLOCK else 1.4), 20, gain=0.2 if rule == BLOCK else None))
    assert chosen[:2] == [TOKEN, TOKEN] and chosen[-4:] == [BLOCK] * 4, chosen


def test_a_fixed_rule_is_the_rule_asked_for():
    assert isinstance(rule_chooser("auto"), AutoRule)
    fixed = rule_chooser("block")
    assert isinstance(fixed, FixedRule) and fixed.choose(sampled=False, drafts=1) == BLOCK
    with pytest.raises(AssertionError):
        rule_chooser("tree")


def pair(seed: int, vocab: int = 6, noise: float = 0.5) -> tuple[MarkovModel, MarkovModel]:
    rng = np.random.default_rng(seed)
    table = random_markov(vocab, rng, scale=1.5)
    return MarkovModel(table, n_ctx=40_000), MarkovModel(table + (rng.standard_normal(table.shape) * noise).astype(np.float32), n_ctx=40_000)


def rounds_of(engine: Engine, verify: str, params: SamplingParams, k: int = 4, n: int = 60) -> tuple[list[Round], dict]:
    outcome_rounds: list[Round] = []
    events = engine.generate([0, 1], GenerationConfig(max_tokens=n, sampling=params, seed=3, verify=verify), FixedPolicy(k))
    outcome = consume(events, lambda e: outcome_rounds.append(e) if isinstance(e, Round) else None)
    return outcome_rounds, outcome.stats.rounds_by_rule


def test_each_round_says_which_rule_verified_it_and_the_stats_count_them():
    target, draft = pair(1)
    rounds, by_rule = rounds_of(Engine(target, ModelDrafter(draft)), "auto", PLAIN)
    rounds = [r for r in rounds if r.drafted]  # the last round may be a plain step (no room left to draft)
    assert [r.rule for r in rounds[:3]] == [TOKEN, BLOCK, TOKEN]
    assert all(r.rule_seconds > 0 for r in rounds)
    assert all((r.block_gain is not None) == (r.rule == BLOCK) for r in rounds)
    assert by_rule == {rule: sum(r.rule == rule for r in rounds) for rule in (TOKEN, BLOCK)} and by_rule[BLOCK] >= 1
    # Where the rules coincide auto takes token: temperature 0, a deterministic draft (lookup).
    assert {r.rule for r in rounds_of(Engine(target, ModelDrafter(draft)), "auto", GREEDY)[0] if r.drafted} == {TOKEN}
    lookup_rounds, _ = rounds_of(Engine(target, LookupDrafter()), "auto", PLAIN)
    assert {r.rule for r in lookup_rounds if r.drafted} == {TOKEN}
    # A fixed rule is named in every drafting round; a plain step names none.
    assert {r.rule for r in rounds_of(Engine(target, ModelDrafter(draft)), "block", PLAIN)[0] if r.drafted} == {BLOCK}
    assert {r.rule for r in rounds_of(Engine(target, ModelDrafter(draft)), "auto", PLAIN, k=0)[0]} == {""}


N_TOKENS = 30_000
ALPHA = 1e-3  # false-failure rate of the transition test, as in test_policy.py


@pytest.mark.slow
@pytest.mark.parametrize("params", [PLAIN, FILTERED], ids=["T=1", "T=0.8 filtered"])
def test_auto_keeps_the_law_at_every_position_while_it_switches(params):
    """N = 30,000 tokens at k = 4, chi-square over (previous token, round position, rule) strata
    (tests/transitions.py), false failure 1e-3, fixed seed. Which rule wins here depends on this
    machine's timings; the probes make sure both verify a good share of the rounds."""
    target, draft = pair(11, vocab=5, noise=0.8)
    events = list(Engine(target, ModelDrafter(draft)).generate([0], GenerationConfig(max_tokens=N_TOKENS, sampling=params, seed=5, verify="auto"), FixedPolicy(4)))
    rounds = [e for e in events if isinstance(e, Round)]
    share = {rule: sum(r.rule == rule for r in rounds) / len(rounds) for rule in (TOKEN, BLOCK)}
    assert min(share.values()) > 0.9 / (PROBE_EVERY + 1), share
    result = transition_test(events, [0], target.table, params, by_rule=True)
    assert result.tokens == N_TOKENS and result.strata >= 10
    assert result.p_value > ALPHA, result
