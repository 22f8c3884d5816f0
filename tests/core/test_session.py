"""session.LoadedPair on fake models: what its engines leave in the two caches, read back."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from fakes import MarkovModel, random_markov
from specdec_cli.causal_model import catch_up
from specdec_cli.decoding.consume import consume
from specdec_cli.decoding.engine import GenerationConfig
from specdec_cli.maths.sampling import GREEDY
from specdec_cli.session import LoadedPair
from specdec_cli.tuning.policy import draft_policy

V = 12


def pair() -> LoadedPair:
    rng = np.random.default_rng(5)
    table = random_markov(V, rng, scale=1.5)
    return LoadedPair(MarkovModel(table), MarkovModel(table + rng.standard_normal(table.shape).astype(np.float32) * 0.3), V)


def test_the_draft_models_lag_is_what_its_next_catch_up_evaluates():
    """draft_lag counts the tokens of the target's cache that the draft model has not evaluated,
    its docstring's examples first (target [1, 2, 3, 4]; draft [1, 2] -> 2, [1, 5] -> 3); then
    after a generation that lookup drafted, which the draft model sat out, and one the draft model
    drafted: each time the catch-up to the target's cache evaluates exactly draft_lag tokens."""
    for draft_tokens, lag in (([1, 2], 2), ([1, 5], 3), ([1, 2, 3, 4], 0)):
        loaded = pair()
        loaded.target.decode([1, 2, 3, 4])
        loaded.draft.decode(draft_tokens)
        assert loaded.draft_lag() == lag
        before = loaded.draft.decoded
        catch_up(loaded.draft, loaded.target.tokens, n_logits=0)
        assert loaded.draft.decoded - before == lag and loaded.draft_lag() == 0
    loaded = pair()
    for drafter, behind in (("lookup", True), ("model", False)):
        prompt = [1, 2, 3, 1, 2, 3, 1, 2] if drafter == "lookup" else [4]
        consume(loaded.engine(drafter=drafter).generate(prompt, GenerationConfig(max_tokens=24, sampling=GREEDY, seed=1), draft_policy(4)))
        lag, before = loaded.draft_lag(), loaded.draft.decoded
        assert (lag > 20) == behind, (drafter, lag)  # lookup's generation left the draft model its whole context behind
        catch_up(loaded.draft, loaded.target.tokens, n_logits=0)
        assert loaded.draft.decoded - before == lag


def test_without_a_draft_model_or_across_vocabularies_no_lag_is_counted():
    target = SimpleNamespace(tokens=[1, 2, 3, 4])
    assert LoadedPair(target, None, V).draft_lag() == 0
    assert LoadedPair(target, SimpleNamespace(tokens=[]), V, vocab_map=object()).draft_lag() == 0
