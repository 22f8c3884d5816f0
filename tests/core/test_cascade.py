"""Drafting for the draft (drafting/cascade.CascadeDrafter) on scripted Markov pairs.

Exactness: the first two tokens of generations follow the target's exact law at T = 1 and
T = 0.8 (filters on), with a strong and a weak draft; N = 20,000 generations each, simulated
chi-square at false-failure 1e-4, fixed seeds. The prompt repeats itself, so lookup guesses
in most rounds (asserted). A planted bug, q rows one step off, fails the same check. Greedy
decoding is the target's own, and a guessed round makes one draft call for all its drafts.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fakes import MarkovModel, random_markov
from specdec_cli.drafting.cascade import CascadeDrafter, GuessedDraft
from specdec_cli.drafting.interface import Proposal
from specdec_cli.drafting.lookup import LookupDrafter
from specdec_cli.drafting.model import ModelDrafter
from specdec_cli.decoding.engine import Engine, GenerationConfig
from specdec_cli.events import Round, Token
from specdec_cli.tuning.policy import draft_policy
from specdec_cli.maths.filters import probabilities
from specdec_cli.maths.sampling import GREEDY, SamplingParams
from stat_checks import ALPHA, PLAIN, first_two_law, first_two_pvalue

FILTERED = SamplingParams(temperature=0.8, top_k=4, top_p=0.95, min_p=0.05)
VOCAB, K, N = 6, 4, 20_000
PROMPT = [1, 2, 3, 4, 1, 2, 3, 4, 1, 2]  # ends in (1, 2): lookup guesses "3, 4, 1, 2, ..."


def pair(kind: str, seed: int) -> tuple[MarkovModel, MarkovModel]:
    rng = np.random.default_rng(seed)
    table = random_markov(VOCAB, rng, scale=1.5)
    draft = table + rng.standard_normal(table.shape) * 0.3 if kind == "strong" else random_markov(VOCAB, rng, scale=1.5)
    return MarkovModel(table), MarkovModel(draft)


def cascade(target: MarkovModel, draft: MarkovModel) -> Engine:
    return Engine(target, CascadeDrafter(ModelDrafter(draft), LookupDrafter()))


def pvalue(engine: Engine, target: MarkovModel, params: SamplingParams) -> tuple[float, float]:
    """(p-value of the first two tokens, share of first rounds that were guessed)."""
    samples, guessed = [], 0
    for s in range(N):
        got, first_round = [], None
        for event in engine.generate(PROMPT, GenerationConfig(max_tokens=K + 1, sampling=params, seed=s), draft_policy(K)):
            if isinstance(event, Token):
                got.append(event.id)
            elif isinstance(event, Round) and first_round is None:
                first_round = event
        guessed += first_round.drafter.startswith("cascade:")
        samples.append(got[:2])
    law = first_two_law(lambda prefix: probabilities(target.table[(PROMPT + list(prefix))[-1]], params), N)
    return first_two_pvalue(samples, law), guessed / N


@pytest.mark.slow
@pytest.mark.parametrize("params", [PLAIN, FILTERED], ids=["T=1", "T=0.8 filtered"])
@pytest.mark.parametrize("kind, seed", [("strong", 81), ("weak", 82)])
def test_the_first_two_tokens_follow_the_target(kind, seed, params):
    target, draft = pair(kind, seed)
    p, guessed = pvalue(cascade(target, draft), target, params)
    assert guessed == 1.0  # the first round always has a lookup guess: this tests the cascade
    assert p > ALPHA


@pytest.mark.slow
def test_the_same_check_fails_with_q_rows_from_the_wrong_step(monkeypatch):
    """A planted bug: each draft's q is the row of the step before it (the first keeps its own).
    Same N, seed and level as the exactness test (with N = 8,000 it already gave p = 5e-6)."""
    real = GuessedDraft.propose

    def shifted(self, context, k, params, rng, p_min=0.0, guide=None) -> Proposal:
        out = real(self, context, k, params, rng, p_min, guide)
        if out.q_rows and len(out.q_rows) > 1:
            out = dataclasses.replace(out, q_rows=[out.q_rows[0]] + out.q_rows[:-1])
        return out

    monkeypatch.setattr(GuessedDraft, "propose", shifted)
    target, draft = pair("strong", 81)  # a strong draft reaches its second draft often: where the bug bites
    p, _ = pvalue(cascade(target, draft), target, PLAIN)
    assert p < ALPHA


def test_greedy_cascade_is_the_targets_own_greedy_decoding():
    for kind, seed in (("strong", 5), ("weak", 6)):
        target, draft = pair(kind, seed)
        config = GenerationConfig(max_tokens=60, sampling=GREEDY)
        spec = [e.id for e in cascade(target, draft).generate(PROMPT, config, draft_policy(K)) if isinstance(e, Token)]
        alone = [e.id for e in Engine(target).generate(PROMPT, config) if isinstance(e, Token)]
        assert spec == alone


def test_a_guessed_round_is_one_draft_batch_and_its_sample_is_the_drafts_own():
    # The draft's greedy chain after 2 is 3, 4, 5, 0 (not the guessed 3, 4, 1): the sample keeps
    # 3, 4 and then takes the draft's own 5, from ONE draft call of 4 rows; the fourth token (k = 4)
    # comes from one more step, from 5 on.
    table = np.zeros((VOCAB, VOCAB), dtype=np.float32)
    for a, b in ((1, 2), (2, 3), (3, 4), (4, 5), (5, 0), (0, 1)):
        table[a, b] = 8.0
    draft = MarkovModel(table)
    drafter = CascadeDrafter(ModelDrafter(draft), LookupDrafter())
    context = [1, 2, 3, 4, 1, 2]
    drafter.prefill(context[:-1])
    calls_before = len(draft.calls)
    round_, by_model = drafter.candidates(context)  # the guessed round first, the draft model step by step after it
    assert round_.name.startswith("cascade:") and by_model.name == "model"
    out = round_.propose(context, 4, GREEDY, np.random.default_rng(0))
    assert out.tokens == [3, 4, 5, 0] and out.q_rows is None
    assert draft.calls[calls_before:] == [(4, 4), (1, 1)]  # [2, 3, 4, 1]: one batch, four rows; then [5]
    assert draft.tokens == context + [3, 4, 5]  # the cache holds the sample but its last token


def test_a_guessed_round_stops_at_an_end_of_generation():
    """The draft's greedy chain after 2 is 3, 4, 5, 0, and 4 ends generation: the sample keeps the
    guessed 3 and 4 and stops there, from the one draft call of the guess, with no step after it
    (nothing after an end of generation can be emitted); the cache holds the sample but its last
    token. Without the end (is_end absent) the same round drafts on to k = 4 as above."""
    table = np.zeros((VOCAB, VOCAB), dtype=np.float32)
    for a, b in ((1, 2), (2, 3), (3, 4), (4, 5), (5, 0), (0, 1)):
        table[a, b] = 8.0
    context = [1, 2, 3, 4, 1, 2]
    for is_end, tokens, calls in ((lambda t: t == 4, [3, 4], [(4, 4)]), (None, [3, 4, 5, 0], [(4, 4), (1, 1)])):
        draft = MarkovModel(table)
        drafter = CascadeDrafter(ModelDrafter(draft, is_end=is_end), LookupDrafter())
        drafter.prefill(context[:-1])
        calls_before = len(draft.calls)
        out = drafter.candidates(context)[0].propose(context, 4, GREEDY, np.random.default_rng(0))
        assert out.tokens == tokens and draft.calls[calls_before:] == calls
        assert draft.tokens == context + tokens[:-1]
