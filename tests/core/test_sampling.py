"""Statistical and exact tests of maths/ (filters.py, draw.py, residual.py, speculative.py): processing, the accept/reject rule, whole rounds.

Every statistical test uses a fixed seed and states its sample size N and its false-failure
rate: each chi-square test fails by chance with probability ALPHA = 1e-4 (stat_checks), each
binomial check at z = 4.0 with probability 6.3e-5 (two-sided normal tail). Where it matters,
a test also asserts its own power against a named bug (e.g. "on rejection, resample from p").
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from fakes import MarkovModel
from specdec_cli.maths import filters, speculative
from specdec_cli.drafting.model import ModelDrafter
from specdec_cli.decoding.engine import Engine, GenerationConfig
from specdec_cli.tuning.policy import draft_policy
from specdec_cli.events import Round, Token
from specdec_cli.errors import NumericalError
from specdec_cli.maths.draw import sample
from specdec_cli.maths.filters import probabilities
from specdec_cli.maths.residual import residual
from specdec_cli.maths.sampling import GREEDY, SamplingParams
from specdec_cli.maths.speculative import verify
from stat_checks import ALPHA, PLAIN, PROCESSED, binomial_within, chi_square_pvalue, power_against

FILTERED = SamplingParams(temperature=0.8, top_k=8, top_p=0.9, min_p=0.02)
Z = 4.0  # two-sided normal tail: false-failure rate 6.3e-5 per binomial check


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


# -- one position ----------------------------------------------------------------------


def one_position_draws(p_logits: np.ndarray, q: np.ndarray, params: SamplingParams, n: int, rng) -> tuple[np.ndarray, int]:
    """n one-position speculative steps with speculative.verify (k = 1): the emitted tokens and the acceptances."""
    rows = np.stack([p_logits, p_logits])  # row 1 (the bonus position) is never used below
    out = np.empty(n, dtype=np.int64)
    accepted = 0
    for i in range(n):
        x = sample(q, rng)
        verdict = verify(rows, [x], [q], params, rng)
        if verdict.accepted == 1:
            out[i] = x  # the draft token is the first emitted token; verdict.token is the bonus
            accepted += 1
        else:
            out[i] = verdict.token
    return out, accepted


@pytest.mark.slow
@pytest.mark.parametrize(
    "n_vocab, params, seed",
    [(10, PLAIN, 1), (27, PLAIN, 2), (50, PLAIN, 3), (50, FILTERED, 4)],
)
def test_one_position_emits_p_and_accepts_at_sum_min(n_vocab, params, seed):
    # N = 10^5 draws per case; chi-square false-failure 1e-4, binomial z = 4 (6.3e-5).
    n = 100_000
    rng = np.random.default_rng(seed)
    p_logits = rng.standard_normal(n_vocab) * 2.0
    q_logits = 0.5 * p_logits + rng.standard_normal(n_vocab) * 1.5  # related, as a draft would be
    p = probabilities(p_logits, params)
    q = probabilities(q_logits, params)
    beta = float(np.minimum(p, q).sum())
    assert 0.05 < beta < 0.95, "p and q must disagree enough for rejections to matter"

    tokens, accepted = one_position_draws(p_logits, q, params, n, rng)

    counts = np.bincount(tokens, minlength=n_vocab)
    assert chi_square_pvalue(counts, p) > ALPHA
    assert binomial_within(accepted, n, beta, Z), f"acceptance {accepted / n:.4f}, expected {beta:.4f}"
    # The test is strong enough to catch the classic bug of resampling from p (not the
    # residual) after a rejection: that emits min(p, q) + (1 - beta) p instead of p.
    wrong = np.minimum(p, q) + (1.0 - beta) * p
    assert power_against(p, wrong, n) > 0.99


@pytest.mark.slow
def test_one_position_with_one_hot_q_keeps_x_with_probability_p():
    # Deterministic drafter (q_rows=None): x is kept with probability p(x), else the residual
    # is p without x. N = 10^5; chi-square false-failure 1e-4; binomial z = 4 (6.3e-5).
    n = 100_000
    rng = np.random.default_rng(11)
    p_logits = rng.standard_normal(20) * 1.5
    p = probabilities(p_logits, PLAIN)
    rows = np.stack([p_logits, p_logits])
    x = int(np.argsort(p)[-3])  # a plausible but not the top token
    out = np.empty(n, dtype=np.int64)
    accepted = 0
    for i in range(n):
        verdict = verify(rows, [x], None, PLAIN, rng)
        accepted += verdict.accepted
        out[i] = x if verdict.accepted else verdict.token
    assert chi_square_pvalue(np.bincount(out, minlength=20), p) > ALPHA
    assert binomial_within(accepted, n, float(p[x]), Z)


@pytest.mark.slow
def test_sample_follows_the_distribution_and_skips_zeros():
    # N = 10^5 draws; chi-square false-failure 1e-4. Zeros at the start, middle and end.
    rng = np.random.default_rng(5)
    probs = np.array([0.0, 0.1, 0.0, 0.25, 0.05, 0.0, 0.6, 0.0])
    draws = np.array([sample(probs, rng) for _ in range(100_000)])
    assert chi_square_pvalue(np.bincount(draws, minlength=len(probs)), probs) > ALPHA


class FixedRandom:
    """A stand-in generator whose random() returns given values (the extremes of [0, 1))."""

    def __init__(self, values):
        self.values = list(values)

    def random(self):
        return self.values.pop(0)


def test_sample_never_returns_a_zero_probability_id_even_at_the_extremes():
    probs = np.array([0.0, 0.0, 0.3, 0.0, 0.7, 0.0, 0.0])
    # Unnormalised mass (the CDF's end is not 1) must not matter either.
    for scale in (1.0, 0.999999, 1e-30, 3.7):
        for u in (0.0, np.nextafter(1.0, 0.0), 0.3, 0.3 / 1.0000001):
            token = sample(probs * scale, FixedRandom([u]))
            assert probs[token] > 0, (scale, u, token)


# -- whole rounds with toy Markov models ---------------------------------------------


def markov_rows(table: np.ndarray, params: SamplingParams) -> np.ndarray:
    """Processed next-token distribution after each token: row a is p(. | a)."""
    return np.stack([probabilities(row, params) for row in table])


def exact_sequence_distribution(p_rows: np.ndarray, start: int, length: int) -> np.ndarray:
    """P(t1..t_length | start) of the Markov chain, flattened in itertools.product order."""
    n = p_rows.shape[0]
    probs = np.empty(n**length)
    for i, seq in enumerate(itertools.product(range(n), repeat=length)):
        prob, prev = 1.0, start
        for t in seq:
            prob *= p_rows[prev, t]
            prev = t
        probs[i] = prob
    return probs


def exact_accepted_distribution(p_rows: np.ndarray, q_rows: np.ndarray, start: int, k: int) -> np.ndarray:
    """P(the first round accepts exactly j of its k drafts), j = 0..k.

    A draft is accepted and equal to y with probability min(p(y|prev), q(y|prev)), so
    a_j(y) = P(first j drafts accepted, draft j == y) follows a_{j+1} = a_j @ min(P, Q).
    """
    both = np.minimum(p_rows, q_rows)
    at_least = [1.0]
    a = both[start]
    for _ in range(k):
        at_least.append(float(a.sum()))
        a = a @ both
    at_least.append(0.0)
    return np.array([at_least[j] - at_least[j + 1] for j in range(k + 1)])


@pytest.mark.slow
@pytest.mark.parametrize("params, seed", [(PLAIN, 21), (PROCESSED, 22)])
def test_whole_rounds_follow_the_target_markov_chain(params, seed):
    # 4-token vocabulary, k = 3: the first round emits up to 4 tokens (3 drafts + bonus);
    # the first 4 generated tokens take 4^4 = 256 values, compared against the exact target
    # chain. N = 40,000 generations; two chi-square tests at false-failure 1e-4 each.
    n, k, vocab = 40_000, 3, 4
    rng = np.random.default_rng(seed)
    target_table = rng.standard_normal((vocab, vocab)) * 1.5
    draft_table = rng.standard_normal((vocab, vocab)) * 1.5
    target, draft = MarkovModel(target_table), MarkovModel(draft_table)
    engine = Engine(target, ModelDrafter(draft))
    prompt = [2, 1]

    counts = np.zeros(vocab**4, dtype=np.int64)
    first_accepted = np.zeros(k + 1, dtype=np.int64)
    for s in range(n):
        tokens, rounds = [], []
        for event in engine.generate(prompt, GenerationConfig(max_tokens=4, sampling=params, seed=s), draft_policy(k)):
            if isinstance(event, Token):
                tokens.append(event.id)
            elif isinstance(event, Round):
                rounds.append(event)
        assert len(tokens) == 4 and rounds[0].drafted == k
        counts[np.ravel_multi_index(tokens, (vocab,) * 4)] += 1
        first_accepted[rounds[0].accepted] += 1

    p_rows = markov_rows(target.table, params)
    q_rows = markov_rows(draft.table, params)
    exact = exact_sequence_distribution(p_rows, prompt[-1], 4)
    assert chi_square_pvalue(counts, exact) > ALPHA
    accepted_exact = exact_accepted_distribution(p_rows, q_rows, prompt[-1], k)
    assert chi_square_pvalue(first_accepted, accepted_exact) > ALPHA
    assert first_accepted[0] > 0 and first_accepted[k] > 0, "both rejections and full acceptance must occur"


# -- processing: masks, temperature, greedy ------------------------------------------


def kept(logits, params) -> set[int]:
    return set(np.flatnonzero(probabilities(np.asarray(logits, dtype=np.float32), params)).tolist())


def test_top_k_keeps_the_k_largest():
    logits = [1.0, 5.0, 3.0, 4.5, 2.0, 0.0]
    only_k = lambda k: SamplingParams(temperature=1.0, top_k=k, top_p=1.0, min_p=0.0)  # noqa: E731
    assert kept(logits, only_k(1)) == {1}
    assert kept(logits, only_k(2)) == {1, 3}
    assert kept(logits, only_k(3)) == {1, 2, 3}
    assert kept(logits, only_k(6)) == set(range(6))
    assert kept(logits, only_k(0)) == set(range(6))  # 0 = off


def test_top_p_keeps_the_smallest_prefix_reaching_p():
    # Probabilities 0.5, 0.2, 0.15, 0.1, 0.05 placed at shuffled ids.
    ids = [3, 0, 4, 1, 2]
    logits = np.empty(5)
    logits[ids] = np.log([0.5, 0.2, 0.15, 0.1, 0.05])
    only_p = lambda p: SamplingParams(temperature=1.0, top_k=0, top_p=p, min_p=0.0)  # noqa: E731
    assert kept(logits, only_p(0.3)) == {3}
    assert kept(logits, only_p(0.6)) == {3, 0}
    assert kept(logits, only_p(0.8)) == {3, 0, 4}
    assert kept(logits, only_p(0.9)) == {3, 0, 4, 1}
    assert kept(logits, only_p(0.99)) == set(range(5))
    assert kept(logits, only_p(1.0)) == set(range(5))  # 1 = off


def test_min_p_keeps_tokens_above_a_share_of_the_best():
    logits = np.log([0.05, 0.5, 0.15, 0.2, 0.1])
    only_min = lambda m: SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=m)  # noqa: E731
    assert kept(logits, only_min(0.25)) == {1, 2, 3}  # threshold 0.125
    assert kept(logits, only_min(0.5)) == {1}  # threshold 0.25
    assert kept(logits, only_min(0.0)) == set(range(5))  # 0 = off


def test_filters_apply_in_llama_cpp_order_top_k_then_top_p_on_the_renormalised_rest():
    # After top-k = 2 the kept mass is renormalised to 4/7, 3/7; top-p = 0.5 then keeps one.
    logits = np.log([0.4, 0.3, 0.2, 0.1])
    assert kept(logits, SamplingParams(temperature=1.0, top_k=2, top_p=0.5, min_p=0.0)) == {0}
    assert kept(logits, SamplingParams(temperature=1.0, top_k=0, top_p=0.5, min_p=0.0)) == {0, 1}


@pytest.mark.parametrize("temperature", [0.25, 0.5, 1.0, 2.0, 4.0])
def test_temperature_scales_logits_after_the_masks(temperature):
    rng = np.random.default_rng(7)
    logits = (rng.standard_normal(30) * 2).astype(np.float32)
    plain = probabilities(logits, SamplingParams(temperature=temperature, top_k=0, top_p=1.0, min_p=0.0))
    np.testing.assert_allclose(plain, softmax(logits.astype(np.float64) / temperature), rtol=1e-9, atol=1e-15)
    # The masks are decided at temperature 1, so the kept set does not move with temperature.
    params = SamplingParams(temperature=temperature, top_k=12, top_p=0.8, min_p=0.05)
    probs = probabilities(logits, params)
    keep = np.flatnonzero(probs)
    assert set(keep.tolist()) == kept(logits, SamplingParams(temperature=1.0, top_k=12, top_p=0.8, min_p=0.05))
    np.testing.assert_allclose(probs[keep], softmax(logits[keep].astype(np.float64) / temperature), rtol=1e-9)


def test_greedy_is_one_hot_at_the_first_maximum():
    logits = np.array([0.5, 3.0, -1.0, 3.0, 2.9], dtype=np.float32)
    np.testing.assert_array_equal(probabilities(logits, GREEDY), [0, 1, 0, 0, 0])
    assert filters.argmax(logits) == 1
    # The filters do not matter at temperature 0.
    np.testing.assert_array_equal(probabilities(logits, SamplingParams(temperature=0.0, top_k=1, top_p=0.1)), [0, 1, 0, 0, 0])


def test_greedy_verify_with_tied_logits_keeps_the_lowest_id():
    rows = np.array([[0.0, 2.0, 2.0, 1.0], [1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 3.0, 3.0]], dtype=np.float32)
    rng = np.random.default_rng(0)
    # Drafting the higher of two tied ids is a rejection, corrected to the lower one.
    assert verify(rows, [2, 0], None, GREEDY, rng) == speculative.Verdict(accepted=0, token=1, bonus=False)
    assert verify(rows, [1, 1], None, GREEDY, rng) == speculative.Verdict(accepted=1, token=0, bonus=False)
    assert verify(rows, [1, 0], None, GREEDY, rng) == speculative.Verdict(accepted=2, token=2, bonus=True)


def test_p_equal_to_q_accepts_everything_and_the_residual_has_no_nan():
    rng = np.random.default_rng(3)
    logits = (rng.standard_normal((5, 12)) * 2).astype(np.float32)
    p = probabilities(logits[0], PLAIN)
    r = residual(p, p)
    assert np.all(np.isfinite(r)) and abs(r.sum() - 1.0) < 1e-12
    for params in (PLAIN, FILTERED):
        q_rows = [probabilities(row, params) for row in logits[:4]]
        for _ in range(2000):  # u < p/q = 1 always holds, so there is nothing statistical here
            drafts = [sample(q, rng) for q in q_rows]
            verdict = verify(logits, drafts, q_rows, params, rng)
            assert verdict.accepted == 4 and verdict.bonus


def test_residual_is_the_normalised_positive_part():
    p = np.array([0.5, 0.3, 0.2, 0.0])
    q = np.array([0.2, 0.4, 0.1, 0.3])
    np.testing.assert_allclose(residual(p, q), [0.75, 0.0, 0.25, 0.0])


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_or_inf_logits_raise_numerical_error(bad):
    logits = np.array([0.0, 1.0, bad, 2.0], dtype=np.float32)
    rows = np.stack([logits, logits])
    rng = np.random.default_rng(0)
    for params in (PLAIN, FILTERED, GREEDY):
        with pytest.raises(NumericalError):
            probabilities(logits, params)
        with pytest.raises(NumericalError):
            verify(rows, [1], None, params, rng)
    with pytest.raises(NumericalError):
        filters.argmax(logits)


def test_all_minus_inf_raises_but_some_minus_inf_is_a_mask():
    with pytest.raises(NumericalError):
        probabilities(np.full(4, -np.inf), PLAIN)
    probs = probabilities(np.array([-np.inf, 0.0, -np.inf, 1.0]), PLAIN)
    assert probs[0] == 0 and probs[2] == 0 and np.all(np.isfinite(probs))


def reference_nucleus(w: np.ndarray, top_p: float) -> set[int]:
    """The top-p set by a full sort: the largest weights until their share reaches top_p."""
    order = np.argsort(-w, kind="stable")
    share = np.cumsum(w[order]) / w.sum()
    return set(order[: int(np.searchsorted(share, top_p)) + 1].tolist())


@pytest.mark.parametrize("spread", [0.05, 3.0])
def test_nucleus_matches_a_full_sort_also_when_wider_than_the_candidates(spread):
    # spread 0.05: nearly flat weights over 3000 ids, so the nucleus (~2700 ids) is wider than
    # the 1024 candidates sorted first and the fallback must run; spread 3: a narrow nucleus.
    rng = np.random.default_rng(9)
    w = np.exp(rng.standard_normal(3000) * spread)
    got = set(filters._nucleus(w, 0.9).tolist())
    want = reference_nucleus(w, 0.9)
    assert got == want
    if spread < 1:
        assert len(want) > filters._TOP_P_CANDIDATES
    # The same through probabilities() on a vocabulary-sized row.
    logits = np.log(w).astype(np.float32)
    assert kept(logits, SamplingParams(temperature=1.0, top_k=0, top_p=0.9, min_p=0.0)) == reference_nucleus(
        np.exp(logits.astype(np.float64) - logits.max()), 0.9
    )
