"""Block verification (speculative.verify_block, Sun et al. 2025) and `--verify auto` on scripted Markov pairs.

Exactness: the first two tokens of generations follow the target's exact law at T = 1 and
T = 0.8 (filters on), with a strong and a weak draft, under block and under auto (whose first
round is verified by the token rule and the second by block: a second token drawn after a
first-round rejection comes from the other rule); N = 20,000 generations each, simulated
chi-square at false-failure 1e-4 (stat_checks.ALPHA), fixed seeds. The same check fails with a
planted bug (one weight wrong), and with a chooser that peeks (verifies by both rules and keeps
the verdict that kept more drafts), so it can see both. Greedy decoding is the target's own.
In expectation block keeps at least as many drafts as the token rule, and as many more as
expected_kept predicts: compared on 20,000 rounds of one fixed context, at 4 standard errors
(a false failure about 6e-5), where the predicted gain is over 6 standard errors (so the token
rule in block's place fails). The expected counts that auto learns from (speculative.expected_kept) are each
rule's mean on fixed drafts: 20,000 verifications each, within 4 standard errors.
"""

from __future__ import annotations

import numpy as np
import pytest

from fakes import MarkovModel, random_markov
from specdec_cli.maths import speculative
from specdec_cli.drafting.model import ModelDrafter
from specdec_cli.decoding.engine import Engine, GenerationConfig
from specdec_cli.events import Round, Token
from specdec_cli.tuning.policy import draft_policy
from specdec_cli.maths.distribution import Distribution
from specdec_cli.maths.draw import sample
from specdec_cli.maths.filters import distribution, probabilities, proposal
from specdec_cli.maths.sampling import GREEDY, SamplingParams
from stat_checks import ALPHA, PLAIN, first_two_law, first_two_pvalue

FILTERED = SamplingParams(temperature=0.8, top_k=4, top_p=0.95, min_p=0.05)
VOCAB, K, N = 6, 4, 20_000
PROMPT = [3, 0]


def pair(kind: str, seed: int) -> tuple[MarkovModel, MarkovModel]:
    rng = np.random.default_rng(seed)
    table = random_markov(VOCAB, rng, scale=1.5)
    if kind == "strong":
        draft = table + rng.standard_normal(table.shape) * 0.3
    else:  # weak: unrelated to the target
        draft = random_markov(VOCAB, rng, scale=1.5)
    return MarkovModel(table), MarkovModel(draft)


def first_two(engine: Engine, n: int, params: SamplingParams, verify: str = "block") -> list[list[int]]:
    samples = []
    for s in range(n):
        config = GenerationConfig(max_tokens=K + 1, sampling=params, seed=s, verify=verify)
        got = [e.id for e in engine.generate(PROMPT, config, draft_policy(K)) if isinstance(e, Token)]
        samples.append(got[:2])
    return samples


def pvalue(kind: str, params: SamplingParams, seed: int, verify: str = "block") -> float:
    target, draft = pair(kind, seed)
    samples = first_two(Engine(target, ModelDrafter(draft)), N, params, verify)
    law = first_two_law(lambda prefix: probabilities(target.table[(PROMPT + list(prefix))[-1]], params), N)
    return first_two_pvalue(samples, law)


@pytest.mark.slow
@pytest.mark.parametrize("verify", ["block", "auto"])
@pytest.mark.parametrize("params", [PLAIN, FILTERED], ids=["T=1", "T=0.8 filtered"])
@pytest.mark.parametrize("kind, seed", [("strong", 61), ("weak", 62)])
def test_the_first_two_tokens_follow_the_target(kind, seed, params, verify):
    assert pvalue(kind, params, seed, verify) > ALPHA


def test_under_auto_the_first_round_is_verified_by_token_and_the_second_by_block():
    """What the auto law test above exercises (rule_choice.AutoRule's schedule)."""
    target, draft = pair("weak", 62)
    config = GenerationConfig(max_tokens=3 * (K + 1), sampling=PLAIN, seed=0, verify="auto")
    rules = [e.rule for e in Engine(target, ModelDrafter(draft)).generate(PROMPT, config, draft_policy(K)) if isinstance(e, Round)]
    assert rules[:3] == ["token", "block", "token"]


@pytest.mark.slow
def test_the_same_check_fails_with_a_weight_wrong(monkeypatch):
    """A planted bug: w_i = min(1, p(X_i) / q(X_i)), the running product's w_{i-1} left out
    (same N, seed and level as the exactness test)."""

    def forgetful(p, q, drafts):
        return [1.0] + [min(1.0, p[i][x] / q[i][x]) for i, x in enumerate(drafts)]

    monkeypatch.setattr(speculative, "block_weights", forgetful)
    assert pvalue("weak", PLAIN, 62) < ALPHA


@pytest.mark.slow
def test_the_same_check_fails_with_a_chooser_that_peeks_at_the_outcome(monkeypatch):
    """A planted bug: whichever rule auto chose, the round is verified by both from the same
    random state, and the verdict that kept more drafts is the one used (ties: token), its
    random state carried on. Same N, seed and level as the auto exactness test."""
    real = dict(speculative.VERIFIERS)

    def peeking(logits, drafts, q_rows, params, rng):
        start, tried = rng.bit_generator.state, []
        for rule in ("token", "block"):
            rng.bit_generator.state = start
            tried.append((real[rule](logits, drafts, q_rows, params, rng), rng.bit_generator.state))
        verdict, state = max(tried, key=lambda t: t[0].accepted)
        rng.bit_generator.state = state
        return verdict

    for rule in real:
        monkeypatch.setitem(speculative.VERIFIERS, rule, peeking)
    assert pvalue("weak", PLAIN, 62, "auto") < ALPHA


@pytest.mark.parametrize("verify", ["block", "auto"])
def test_greedy_verification_is_the_targets_own_greedy_decoding(verify):
    target, draft = pair("weak", 7)
    config = GenerationConfig(max_tokens=40, sampling=GREEDY, verify=verify)
    spec = [e.id for e in Engine(target, ModelDrafter(draft)).generate(PROMPT, config, draft_policy(K)) if isinstance(e, Token)]
    alone = [e.id for e in Engine(target).generate(PROMPT, config) if isinstance(e, Token)]
    assert spec == alone and len(spec) == 40


def test_one_draft_is_decided_as_the_token_rule_decides_it():
    # k = 1: w_1 = h_1 = min(1, p(x) / q(x)) and the residual max(0, p - q): exactly the token rule.
    p = [np.array([0.2, 0.5, 0.3]), np.array([0.6, 0.2, 0.2])]
    q = [np.array([0.4, 0.4, 0.2])]
    w = speculative.block_weights(p, q, [0])
    assert w == [1.0, 0.5] and speculative.block_acceptance(p, q, w, 1) == 0.5
    assert speculative.expected_kept(p, q, [0], [0.5]) == (0.5, 0.5)


def test_expected_kept_docstring_example():
    p = [np.array([0.25, 0.75]), np.array([0.8, 0.2]), np.array([0.5, 0.5])]
    q = [np.array([0.5, 0.5]), np.array([0.4, 0.6])]
    w = speculative.block_weights(p, q, [0, 0])
    h = [speculative.block_acceptance(p, q, w, i) for i in (1, 2)]
    assert w == [1.0, 0.5, 1.0] and h == [0.0, 1.0]
    assert speculative.expected_kept(p, q, [0, 0], h) == (1.0, 2.0)


@pytest.mark.slow
@pytest.mark.parametrize("kind, seed", [("strong", 73), ("weak", 74)])
def test_expected_kept_is_each_rules_mean_on_fixed_drafts(kind, seed):
    """One drafted block of K tokens (T = 1), verified 20,000 times by each rule."""
    target, draft = pair(kind, seed)
    rng = np.random.default_rng(seed)
    context, drafts, q_rows = list(PROMPT), [], []
    for _ in range(K):
        q = proposal(draft.table[context[-1]], PLAIN)
        drafts.append(sample(q, rng))
        q_rows.append(q)
        context.append(drafts[-1])
    rows = target.table[np.asarray(context[len(PROMPT) - 1 :])]
    n = 20_000
    kept = {rule: np.array([speculative.VERIFIERS[rule](rows, drafts, q_rows, PLAIN, rng).accepted for _ in range(n)]) for rule in ("token", "block")}
    p = [distribution(row, PLAIN).dense() for row in rows]  # as verify_block computes them
    q = [row.dense() if isinstance(row, Distribution) else np.asarray(row, dtype=np.float64) for row in q_rows]
    w = speculative.block_weights(p, q, drafts)
    expected = speculative.expected_kept(p, q, drafts, [speculative.block_acceptance(p, q, w, i) for i in range(1, K + 1)])
    for rule, mean in zip(("token", "block"), expected):
        assert abs(kept[rule].mean() - mean) <= 4 * max(kept[rule].std(), 1e-3) / np.sqrt(n), (rule, kept[rule].mean(), mean)
    gain = speculative.verify_block(rows, drafts, q_rows, PLAIN, rng).block_gain
    assert gain == pytest.approx(expected[1] - expected[0], abs=1e-6)


@pytest.mark.parametrize("kind, seed", [("strong", 71), ("weak", 72)])
def test_it_keeps_the_drafts_expected_kept_predicts_and_more_than_the_token_rule(kind, seed):
    """20,000 rounds from one context, the same drafts for both rules (T = 1). Besides "never
    fewer", the measured gain of block over token must be the gain expected_kept predicts for
    these drafts (within 4 standard errors), and that gain is large enough here (over 6 standard
    errors) that a verify_block which were the token rule would fail."""
    target, draft = pair(kind, seed)
    rng = np.random.default_rng(seed)
    n, k = 20_000, K
    kept = {"token": [], "block": []}
    predicted = []
    for _ in range(n):
        context, drafts, q_rows = list(PROMPT), [], []
        for _ in range(k):
            q = proposal(draft.table[context[-1]], PLAIN)
            x = sample(q, rng)
            drafts.append(x)
            q_rows.append(q)
            context.append(x)
        rows = target.table[np.asarray(context[len(PROMPT) - 1 :])]
        for rule in kept:
            kept[rule].append(speculative.VERIFIERS[rule](rows, drafts, q_rows, PLAIN, rng).accepted)
        p = [distribution(row, PLAIN).dense() for row in rows]
        q = [row.dense() if isinstance(row, Distribution) else np.asarray(row, dtype=np.float64) for row in q_rows]
        w = speculative.block_weights(p, q, drafts)
        token_e, block_e = speculative.expected_kept(p, q, drafts, [speculative.block_acceptance(p, q, w, i) for i in range(1, k + 1)])
        predicted.append(block_e - token_e)
    token, block = np.mean(kept["token"]), np.mean(kept["block"])
    se = np.sqrt((np.var(kept["token"]) + np.var(kept["block"])) / n)
    gain = float(np.mean(predicted))
    assert block >= token - 4 * se, (token, block)
    assert gain > 6 * se, f"this pair shows no gain to test ({gain:.4f} against a standard error of {se:.4f})"
    assert abs((block - token) - gain) <= 4 * se, (token, block, gain, se)
