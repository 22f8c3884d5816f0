"""A memory match the draft model drafts on from (drafting/combined.MemoryThenModel), on Markov fakes.

Its worked example; greedy output is the target's own; and exactness at T = 1 and T = 0.8
(filters on): the first two tokens of N = 20,000 generations (seed = generation number) follow
the target's law, chi-square simulated at false-failure rate 1e-4 (stat_checks.ALPHA). In every
first round the memory proposes one token and the draft model three more (asserted), so the
check covers a one-hot q followed by the draft model's. A planted bug, the memory's token
verified with a draft model's q row, fails the same check.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import pytest

from fakes import MarkovModel, random_markov
from specdec_cli.decoding.engine import Engine, GenerationConfig
from specdec_cli.drafting.combined import MemoryThenModel, ModelAndLookup
from specdec_cli.drafting.interface import Proposal
from specdec_cli.drafting.lookup import LookupDrafter
from specdec_cli.drafting.memory import DraftMemory
from specdec_cli.drafting.model import ModelDrafter
from specdec_cli.events import Round, Token
from specdec_cli.maths.sampling import GREEDY, SamplingParams, probabilities
from specdec_cli.tuning.policy import FixedPolicy
from stat_checks import ALPHA, PLAIN, first_two_law, first_two_pvalue

FILTERED = SamplingParams(temperature=0.8, top_k=4, top_p=0.95, min_p=0.05)
VOCAB, K, N = 6, 4, 20_000
PROMPT = [1, 2, 3, 4, 1, 2]
EARLIER = [0, 3, 4, 1, 2, 5]  # an earlier call that ends like the prompt for 4 tokens, then wrote 5


@dataclasses.dataclass
class Extending(FixedPolicy):
    """k tokens a round, from the memory match the draft model drafts on from where there is one."""

    def choose(self, sources, budget):
        k = min(self.k, budget)
        name = next((s for s in sources if s.startswith("model:")), sources[-1] if sources else None)
        return (name, k) if name is not None and k > 0 else (None, 0)


def models(seed: int = 37) -> tuple[MarkovModel, MarkovModel]:
    rng = np.random.default_rng(seed)
    table = random_markov(VOCAB, rng, scale=1.5)
    return MarkovModel(table), MarkovModel(table + rng.standard_normal(table.shape).astype(np.float32) * 0.8)


def drafter(draft: MarkovModel) -> ModelAndLookup:
    memory = DraftMemory(1000)
    memory.add(EARLIER)
    return ModelAndLookup(ModelDrafter(draft), LookupDrafter(memory=memory))


def test_the_match_then_the_draft_models_tokens_with_their_q_rows():
    target, draft = models()
    both = drafter(draft)
    found = both.candidates(PROMPT)
    assert [c.name for c in found] == ["lookup:2", "lookup:memory:3-5", "model:lookup:memory:3-5", "model"]
    extended = found[2]
    assert isinstance(extended, MemoryThenModel)
    greedy = extended.propose(PROMPT, K, GREEDY, np.random.default_rng(0))
    chain, last = [], 5  # the draft model's greedy chain after the memory's 5
    for _ in range(K - 1):
        last = int(np.argmax(draft.table[last]))
        chain.append(last)
    assert greedy.tokens == [5] + chain and greedy.q_rows is None
    assert draft.tokens == PROMPT + [5] + chain[:-1]  # one catch-up over the prompt and the 5, then steps; the last draft unevaluated
    sampled = extended.propose(PROMPT, K, PLAIN, np.random.default_rng(0))
    assert sampled.tokens[0] == 5 and len(sampled.tokens) == K
    assert sampled.q_rows[0].dense().tolist() == [0, 0, 0, 0, 0, 1]  # the memory's token: its one-hot q
    expected = probabilities(draft.table[5], PLAIN)
    assert np.allclose(sampled.q_rows[1].dense(), expected)  # the draft model's q after context + [5]
    assert extended.propose(PROMPT, 1, GREEDY, np.random.default_rng(0)).tokens == [5]  # k reached: nothing added


def test_greedy_output_is_the_targets_own():
    target, draft = models()
    config = GenerationConfig(max_tokens=40, sampling=GREEDY)
    events = list(Engine(target, drafter(draft)).generate(PROMPT, config, Extending(K)))
    assert any(isinstance(e, Round) and e.drafter == "model:lookup:memory:3-5" for e in events)
    assert events[-1].tokens == list(Engine(target).generate(PROMPT, config))[-1].tokens


def pvalue(params: SamplingParams, policy_k: int = K) -> float:
    target, draft = models()
    engine = Engine(target, drafter(draft))
    samples, opened = [], Counter()
    for s in range(N):
        got, first = [], None
        for event in engine.generate(PROMPT, GenerationConfig(max_tokens=5, sampling=params, seed=s), Extending(policy_k)):
            if isinstance(event, Token):
                got.append(event.id)
            elif isinstance(event, Round) and first is None:
                first = event
        opened[(first.drafter, first.drafted)] += 1
        samples.append(got[:2])
    assert opened == {("model:lookup:memory:3-5", K): N}, opened  # the memory's 5, then three of the draft model's
    law = first_two_law(lambda prefix: probabilities(target.table[(PROMPT + list(prefix))[-1]], params), N)
    return first_two_pvalue(samples, law)


@pytest.mark.slow
@pytest.mark.parametrize("params", [PLAIN, FILTERED], ids=["T=1", "T=0.8 filtered"])
def test_the_first_two_tokens_follow_the_target(params):
    assert pvalue(params) > ALPHA


@pytest.mark.slow
def test_the_same_check_fails_when_the_memorys_token_is_verified_as_sampled(monkeypatch):
    """The planted bug: the memory's token handed on with a draft model's q (the row after it)
    instead of its one-hot q, so verification accepts it with probability p(x) / q(x), not p(x).
    (Handing the whole proposal on as deterministic, without q rows, would be no bug: a draft drawn
    independently of the target's coins may be verified as certain; it is only accepted less often.)"""
    real = MemoryThenModel.propose

    def misread(self, context, k, params, rng, p_min=0.0) -> Proposal:
        out = real(self, context, k, params, rng, p_min)
        return dataclasses.replace(out, q_rows=[out.q_rows[1]] + out.q_rows[1:])

    monkeypatch.setattr(MemoryThenModel, "propose", misread)
    assert pvalue(PLAIN) < ALPHA
