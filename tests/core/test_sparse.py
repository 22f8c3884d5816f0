"""The sparse sampling path against a plain dense float64 reference, and numerical edges.

filters.distribution keeps only the support of a filtered distribution and selects top-k
without a full sort; these tests hold it to a dense reference written the obvious way
(full stable sort, every filter on the full row, float64) within 1e-12, on random rows for
every filter combination, with ties, all-equal logits, -inf logits and vocabularies cut by
a vocab limit. The residual and p/q are checked the same way for every sparse/dense mix.
The edge tests turn every warning into an error: numpy's RuntimeWarnings must never reach
a user. Two tests here are statistical (sample sizes and false-failure rates stated in
each): the float32 path's thinning and residual by rejection, made detectable, and a plain
target step on float32 and float64 rows; the rest of the sampling laws are tested in
test_sampling.py and test_engine_fake.py, unchanged.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

from fakes import MarkovModel
from stat_checks import ALPHA, chi_square_pvalue
from specdec_cli.maths import dense, filters, speculative
from specdec_cli.drafting.model import ModelDrafter
from specdec_cli.decoding.engine import Engine, GenerationConfig
from specdec_cli.events import Token
from specdec_cli.tuning.policy import draft_policy
from specdec_cli.errors import NumericalError
from specdec_cli.maths.distribution import BLOCK, Distribution, point_mass
from specdec_cli.maths.draw import sample
from specdec_cli.maths.filters import distribution, probabilities, proposal
from specdec_cli.maths.residual import residual
from specdec_cli.maths.sampling import GREEDY, SamplingParams
from specdec_cli.maths.speculative import verify

TOP_K = [0, 1, 3, 40, 10_000]
TOP_P = [1.0, 0.95, 0.5]
MIN_P = [0.0, 0.05, 0.5]
TEMPS = [0.3, 0.8, 1.0, 2.5]
COMBOS = list(itertools.product(TOP_K, TOP_P, MIN_P))


def reference(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """The processed distribution by the book: full stable sort (ties: lowest id first), float64."""
    x = np.asarray(logits, dtype=np.float64)
    n = len(x)
    top = x.max()
    if params.greedy:
        out = np.zeros(n)
        out[int(np.argmax(x))] = 1.0
        return out
    ids = np.argsort(-x, kind="stable")
    if 0 < params.top_k < n:
        ids = ids[: params.top_k]
    z = x[ids] - top
    w = np.exp(z)
    if params.top_p < 1.0:
        order = np.argsort(-w, kind="stable")
        cum = np.cumsum(w[order]) / w.sum()
        cut = min(int(np.searchsorted(cum, params.top_p, side="left")), len(order) - 1)
        ids, z, w = ids[order[: cut + 1]], z[order[: cut + 1]], w[order[: cut + 1]]
    if params.min_p > 0.0:
        keep = w >= params.min_p * w.max()
        ids, z = ids[keep], z[keep]
    with np.errstate(all="ignore"):  # the reference may overflow at edges; only its values matter
        tempered = np.exp((z - z.max()) / params.temperature)
    out = np.zeros(n)
    out[ids] = tempered / tempered.sum()
    return out


def rows(seed: int, n: int) -> dict[str, np.ndarray]:
    """Random float32 logit rows of the kinds a model produces, plus the awkward ones."""
    rng = np.random.default_rng(seed)
    peaked = (rng.standard_normal(n) * 3).astype(np.float32)
    peaked[rng.integers(n)] += 12
    ties = rng.integers(-3, 4, size=n).astype(np.float32)  # thousands of ties at every value
    minus_inf = (rng.standard_normal(n) * 2).astype(np.float32)
    minus_inf[rng.random(n) < 0.5] = -np.inf
    few_finite = np.full(n, -np.inf, dtype=np.float32)
    few_finite[rng.choice(n, 2, replace=False)] = [1.0, 2.0]  # fewer finite logits than top-k 3 or 40
    return {
        "flat": (rng.standard_normal(n) * 0.3).astype(np.float32),
        "llm-like": (rng.standard_normal(n) * 2).astype(np.float32),
        "peaked": peaked,
        "ties": ties,
        "all-equal": np.full(n, 1.5, dtype=np.float32),
        "minus-inf": minus_inf,
        "few-finite": few_finite,
    }


@pytest.mark.parametrize("n", [7, 300, 50_000])
def test_sparse_path_equals_the_dense_reference_for_every_filter_combination(n):
    checked = 0
    for name, row in rows(n, n).items():
        for (top_k, top_p, min_p), temperature in itertools.product(COMBOS, TEMPS):
            params = SamplingParams(temperature, top_k, top_p, min_p)
            dist = distribution(row, params)
            got, want = dist.dense(), reference(row, params)
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-12, err_msg=f"{name} {params}")
            assert (got > 0).tolist() == (want > 0).tolist(), f"{name} {params}: supports differ"
            assert len(dist) == n
            filtered = 0 < top_k < n or top_p < 1 or min_p > 0
            assert dist.sparse == filtered, "dense only without a filter"
            checked += 1
        np.testing.assert_array_equal(distribution(row, GREEDY).dense(), reference(row, GREEDY))
    assert checked == 7 * len(COMBOS) * len(TEMPS)


def test_top_k_ranking_is_exact_with_ties_at_the_boundary():
    rng = np.random.default_rng(4)
    for n, k in [(100_000, 40), (151_936, 40), (5_000, 1), (5_000, 1024), (64, 40), (1_000, 999)]:
        for row in (rng.integers(-5, 6, size=n).astype(np.float32), (rng.standard_normal(n)).astype(np.float32), np.zeros(n, np.float32)):
            want = np.sort(np.argsort(-row.astype(np.float64), kind="stable")[:k])
            np.testing.assert_array_equal(np.sort(filters._top_k_ranked(row, k)), want)


def test_nucleus_over_a_whole_row_matches_the_reference_also_when_wide():
    # Top-p with no top-k: the nucleus of a flat 50k row holds far more than the 1024
    # candidates sorted first, so the fallback runs; the peaked row stays inside them.
    rng = np.random.default_rng(8)
    for spread in (0.01, 4.0):
        row = (rng.standard_normal(50_000) * spread).astype(np.float32)
        params = SamplingParams(1.0, 0, 0.9, 0.0)
        np.testing.assert_allclose(probabilities(row, params), reference(row, params), rtol=0, atol=1e-12)
        assert (reference(row, params) > 0).sum() > filters._TOP_P_CANDIDATES if spread < 1 else True


@pytest.mark.parametrize("limit_pad", [0, 64])
@pytest.mark.parametrize("draft_law", [distribution, proposal])
def test_residual_and_ratio_equal_the_dense_reference_for_every_sparse_dense_mix(limit_pad, draft_law):
    # Target rows carry `limit_pad` padding ids (a padded vocabulary); both sides are cut to
    # the shared limit as the engine does, and the result must match the dense formulas.
    # With `proposal` the draft's dense q keeps float32 weights: the reference is then that
    # q read in float64 (the law x is drawn from), and the residual must use it exactly.
    rng = np.random.default_rng(12)
    n = 2_000
    settings = [SamplingParams(1.0, 0, 1.0, 0.0), SamplingParams(0.8), SamplingParams(1.3, 0, 0.9, 0.0), SamplingParams(0.7, 5, 1.0, 0.2)]
    for p_params, q_params in itertools.product(settings, settings):
        target_row = (rng.standard_normal(n + limit_pad) * 2).astype(np.float32)
        draft_row = (0.6 * target_row[:n] + rng.standard_normal(n)).astype(np.float32)
        p = distribution(target_row[:n], p_params)
        q = draft_law(draft_row, q_params)
        p_ref = reference(target_row[:n], p_params)
        q_ref = q.dense() if q.weights.dtype == np.float32 else reference(draft_row, q_params)
        r_ref = np.maximum(p_ref - q_ref, 0.0)
        r_ref /= r_ref.sum()
        np.testing.assert_allclose(residual(p, q).dense(), r_ref, rtol=0, atol=1e-12)
        for x in np.flatnonzero(q_ref)[:20]:
            assert abs(p.prob(int(x)) / q.prob(int(x)) - p_ref[x] / q_ref[x]) <= 1e-12 * max(1.0, p_ref[x] / q_ref[x])
        # One-hot q (a deterministic drafter): the residual is p without x.
        x = int(np.argmax(p_ref))
        one_hot = Distribution(n, np.array([x]), np.array([1.0]))
        r = np.where(np.arange(n) == x, 0.0, p_ref)
        if r.sum() > 0:
            np.testing.assert_allclose(residual(p, one_hot).dense(), r / r.sum(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("law", [distribution, proposal])
def test_dense_sampling_never_draws_a_zero_and_inverts_the_cdf_exactly(law):
    # The two-level (block) inversion must pick the same id as a plain CDF inversion of the
    # same u, at the extremes of u and across block edges, and never a zero-probability id;
    # for a float32 proposal, of the float64 CDF of its float32 weights.
    n = 3 * 1024 + 17
    rng = np.random.default_rng(2)
    row = (rng.standard_normal(n) * 2).astype(np.float32)
    row[rng.random(n) < 0.3] = -np.inf
    row[:1024] = -np.inf  # a whole block with no mass
    row[-17:] = -np.inf  # and the padded tail
    dist = law(row, SamplingParams(1.0, 0, 1.0, 0.0))
    assert not dist.sparse and dist.weights.dtype == (np.float32 if law is proposal else np.float64)
    cdf = np.cumsum(dist.dense())
    for u in [0.0, np.nextafter(1.0, 0.0), *np.random.default_rng(3).random(2000)]:
        token = sample(dist, FixedRandom([u]))
        assert dist.prob(token) > 0
        want = min(int(np.searchsorted(cdf, u * cdf[-1], side="right")), int(np.flatnonzero(cdf < cdf[-1])[-1]) + 1)
        if abs(u * cdf[-1] - cdf[min(want, n - 1)]) > 1e-12 and (want == 0 or abs(u * cdf[-1] - cdf[want - 1]) > 1e-12):
            assert token == want, u


class FixedRandom:
    def __init__(self, values):
        self.values = list(values)

    def random(self):
        return self.values.pop(0)


# -- numerical edges: no warning may reach the user ------------------------------------

EDGE_TEMPS = [5e-324, 1e-300, 1e-30, 1e-8, 0.8, 1.0, 1e8, 1e300, 1.7e308]
EDGE_FILTERS = [(0, 1.0, 0.0), (40, 0.95, 0.05), (0, 0.9, 0.0), (0, 1.0, 0.1), (2, 1.0, 0.0)]


def edge_rows() -> dict[str, np.ndarray]:
    one = np.full(64, -np.inf, dtype=np.float32)
    one[17] = 0.5
    big = np.array([3e38, -3e38, 1e38, 0.0, -np.inf], dtype=np.float32)
    return {
        "all -inf but one": one,
        "huge logits": big,
        "tiny gaps": np.array([1.0, np.nextafter(np.float32(1.0), np.float32(0.0)), 0.0], dtype=np.float32),
        "all equal": np.zeros(10, dtype=np.float32),
        "one token": np.array([2.0], dtype=np.float32),
        "float64 row": np.array([0.0, -1e10, -1e300, 5.0]),
    }


@pytest.fixture
def warnings_are_errors():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(divide="raise", over="raise", invalid="raise"):
            yield


@pytest.mark.usefixtures("warnings_are_errors")
def test_edge_temperatures_and_rows_give_valid_distributions_without_warnings():
    rng = np.random.default_rng(0)
    for (name, row), temperature, (top_k, top_p, min_p) in itertools.product(edge_rows().items(), EDGE_TEMPS, EDGE_FILTERS):
        params = SamplingParams(temperature, top_k, top_p, min_p)
        dist = distribution(row, params)
        probs = dist.dense()
        assert np.all(np.isfinite(probs)) and abs(probs.sum() - 1.0) < 1e-12, (name, params)
        q = proposal(row, params).dense()
        assert np.all(np.isfinite(q)) and abs(q.sum() - 1.0) < 1e-12 and np.all(q[~np.isfinite(row)] == 0), (name, params)
        assert np.all(probs[~np.isfinite(row)] == 0), (name, params)
        token = sample(dist, rng)
        assert probs[token] > 0
        rows2 = np.stack([row, row])
        verdict = verify(rows2, [token], [dist], params, rng)
        assert probs[verdict.token] > 0 or verdict.accepted == 1
        residual(dist, dist)


@pytest.mark.usefixtures("warnings_are_errors")
def test_tiny_temperature_is_the_greedy_limit_and_huge_is_uniform():
    row = np.array([0.5, 3.0, -1.0, 2.999, -np.inf], dtype=np.float32)
    for temperature in (1e-300, 5e-324, 1e-20):
        for top_k, top_p, min_p in EDGE_FILTERS:
            np.testing.assert_array_equal(probabilities(row, SamplingParams(temperature, top_k, top_p, min_p)), [0, 1, 0, 0, 0])
    flat = probabilities(row, SamplingParams(1e300, 0, 1.0, 0.0))
    np.testing.assert_allclose(flat, [0.25, 0.25, 0.25, 0.25, 0.0], rtol=0, atol=1e-15)


@pytest.mark.usefixtures("warnings_are_errors")
def test_engine_at_temperature_1e_300_emits_the_greedy_output_without_warnings():
    rng = np.random.default_rng(5)
    table = (rng.standard_normal((12, 12)) * 2).astype(np.float32)
    draft = table + (rng.standard_normal((12, 12)) * 0.5).astype(np.float32)

    def run(params):
        engine = Engine(MarkovModel(table), ModelDrafter(MarkovModel(draft)))
        events = engine.generate([1], GenerationConfig(max_tokens=40, sampling=params, seed=3), draft_policy(4))
        return [e.id for e in events if isinstance(e, Token)]

    greedy = run(GREEDY)
    assert len(greedy) == 40
    assert run(SamplingParams(1e-300, 40, 0.95, 0.05)) == greedy
    assert run(SamplingParams(1e-300, 0, 1.0, 0.0)) == greedy


@pytest.mark.usefixtures("warnings_are_errors")
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_or_inf_anywhere_raises_without_a_warning(bad):
    row = np.zeros(5000, dtype=np.float32)
    row[4321] = bad
    for params in (GREEDY, SamplingParams(), SamplingParams(1.0, 0, 1.0, 0.0), SamplingParams(1.0, 0, 1.0, 0.2)):
        with pytest.raises(NumericalError):
            distribution(row, params)
    with pytest.raises(NumericalError):
        distribution(np.full(5000, -np.inf, dtype=np.float32), SamplingParams())


# -- dense rows from float32 weights: the draft's proposal, the target's _DenseTarget ----------

FAST_TEMPS = [1.0 / 64.0, 0.3, 0.8, 1.0, 2.5, 64.0]


@pytest.mark.usefixtures("warnings_are_errors")
def test_float32_target_weights_are_within_their_stated_bounds_of_the_float64_ones():
    # The bound FLOAT32_EPS is derived in maths/dense.py (1.6e-5 worst case, 3.05e-5 stated).
    # Held here on every kind of row, at the temperature limits, for every id: the thinning
    # bound w64 <= w32 (1 + eps) everywhere (floored ids included), |w32 / w64 - 1| <= eps where
    # w64 >= exp(-86), and the normaliser within 1 +- eps. A row whose top is too large for the
    # float32 path (3e38) is not given one.
    checked = 0
    for n in (300, 50_000):
        for (name, row), temperature in itertools.product(rows(n + 1, n).items(), FAST_TEMPS):
            unfiltered = SamplingParams(temperature, 0, 1.0, 0.0)
            target, exact = speculative._DenseTarget.of(row, unfiltered), distribution(row, unfiltered)
            w64, w32 = exact.weights[:n], target.w32.weights[:n].astype(np.float64)
            assert np.all(w64 <= w32 * (1.0 + dense.FLOAT32_EPS)), (name, temperature)
            normal = w64 >= np.exp(-86.0)
            assert np.all(np.abs(w32[normal] / w64[normal] - 1.0) <= dense.FLOAT32_EPS), (name, temperature)
            assert abs(target.w32.total / exact.total - 1.0) <= dense.FLOAT32_EPS, (name, temperature)
            for x in np.flatnonzero(w64)[:: max(1, n // 50)]:
                assert target.weight64(int(x)) == w64[x]
            checked += 1
    huge = np.zeros(300, dtype=np.float32)
    huge[:3] = [3e38, -3e38, 1e38]
    assert speculative._DenseTarget.of(huge, SamplingParams(1.0, 0, 1.0, 0.0)) is None
    assert checked == 2 * 7 * len(FAST_TEMPS)


@pytest.mark.usefixtures("warnings_are_errors")
def test_proposal_differs_from_distribution_only_in_float32_weights_of_dense_float32_rows():
    # proposal (the draft's q) is distribution itself, except for dense rows (no filter) of
    # float32 logits at 1/64 <= T <= 64, where its weights are float32: within twice the
    # float32 bound of the float64 q everywhere (each weight and the total off by at most
    # _FLOAT32_EPS) where its weight is a normal float32 (relative to the top weight 1), and
    # the same support except ids whose weight underflows float32 (below 1e-37 of the top).
    checked_fast = 0
    for n in (300, 50_000):
        for (name, row), temperature, (top_k, top_p, min_p) in itertools.product(
            rows(n + 2, n).items(), [*FAST_TEMPS, 0.01, 100.0], [(0, 1.0, 0.0), (40, 0.95, 0.05), (0, 0.9, 0.0), (0, 1.0, 0.1)]
        ):
            params = SamplingParams(temperature, top_k, top_p, min_p)
            q, exact = proposal(row, params), distribution(row, params)
            fast = top_k == 0 and top_p == 1.0 and min_p == 0.0 and 1 / 64 <= temperature <= 64
            assert (q.weights.dtype == np.float32) == fast, (name, params)
            got, want = q.dense(), exact.dense()
            if fast:
                normal = want >= 1e-37 * want.max()
                assert np.all(got[want == 0] == 0) and np.all(got[normal] > 0), (name, params)
                assert np.all(np.abs(got[normal] / want[normal] - 1.0) <= 2 * dense.FLOAT32_EPS), (name, params)
                checked_fast += 1
            else:
                np.testing.assert_array_equal(got, want, err_msg=f"{name} {params}")
        float64_row = rows(1, n)["llm-like"].astype(np.float64)
        assert proposal(float64_row, SamplingParams(1.0, 0, 1.0, 0.0)).weights.dtype == np.float64
    assert checked_fast == 2 * 7 * len(FAST_TEMPS)


def test_docstring_examples_of_proposal_and_dense_target(monkeypatch):
    plain = SamplingParams(1.0, 0, 1.0, 0.0)
    q = proposal(np.array([0.0, np.log(3.0)], dtype=np.float32), plain)
    assert q.weights.dtype == np.float32 and np.allclose(q.weights[:2], [1 / 3, 1.0]) and np.allclose(q.dense(), [0.25, 0.75])
    spy = Float64Rows(monkeypatch)
    target = speculative._DenseTarget.of(np.zeros(2, dtype=np.float32), plain)
    assert target.w32.weights[:2].tolist() == [1.0, 1.0] and target.w32.total == 2.0
    assert target.accepts(0.4, 0, 1.0) and spy.count == 0


def test_docstring_examples_of_speculative_and_dense_weight():
    # speculative's module docstring (greedy): p = one-hot(7) keeps the draft 7; p = one-hot(3)
    # rejects it, and the residual of one-hot(3) against one-hot(7) is one-hot(3).
    rng = np.random.default_rng(0)
    rows = np.zeros((2, 10), dtype=np.float32)
    rows[0, 7] = rows[1, 2] = 1.0
    assert verify(rows, [7], None, GREEDY, rng) == speculative.Verdict(accepted=1, token=2, bonus=True)
    rows[0] = 0.0
    rows[0, 3] = 1.0
    assert verify(rows, [7], None, GREEDY, rng) == speculative.Verdict(accepted=0, token=3, bonus=False)
    np.testing.assert_array_equal(residual(point_mass(10, 3), point_mass(10, 7)).dense(), point_mass(10, 3).dense())
    # dense.dense_weight: exactly softmax_row's weight, the cap at 800 T included.
    assert dense.dense_weight(0.0, 0.0, 0.5) == 1.0
    far = np.array([0.0, -1e6], dtype=np.float32)
    assert dense.dense_weight(far[1], 0.0, 0.01) == 0.0 == dense.softmax_row(far, 0.0, 0.01).weights[1]


def test_docstring_examples_of_the_sparse_path_and_top_k():
    # filters' module docstring, Distribution and _top_k_ranked.
    row = np.array([1, 5, 3, 4.5], dtype=np.float32)
    assert filters._top_k_ranked(row, 2).tolist() == [1, 3]
    swapped = np.array([1, 4.5, 3, 5], dtype=np.float32)  # ranked largest first
    assert filters._top_k_ranked(swapped, 2).tolist() == [3, 1]
    dist = distribution(row, SamplingParams(1.0, 2, 1.0, 0.0))
    assert dist.ids.tolist() == [1, 3]
    np.testing.assert_allclose(dist.dense()[[1, 3]], [0.62, 0.38], atol=0.005)
    np.testing.assert_array_equal(Distribution(5, np.array([1, 3]), np.array([0.25, 0.75])).dense(), [0, 0.25, 0, 0.75, 0])


def test_docstring_examples_of_the_maths_modules():
    # sampling.py, distribution.py, dense.py, draw.py and residual.py, each module's example.
    assert SamplingParams(temperature=0.0).greedy and GREEDY.greedy and not SamplingParams().greedy
    np.testing.assert_array_equal(point_mass(4, 2).dense(), [0, 0, 1, 0])
    np.testing.assert_allclose(dense.softmax_row(np.array([0.0, np.log(3.0)]), np.log(3.0), 1.0).dense(), [0.25, 0.75])
    assert dense.dense_weight(-1e6, 0.0, 0.01) == 0.0
    rng = np.random.default_rng(0)
    draws = [sample(Distribution(5, np.array([1, 3]), np.array([0.25, 0.75])), rng) for _ in range(4000)]
    assert set(draws) == {1, 3} and abs(draws.count(1) / 4000 - 0.25) < 0.03  # 4.4 standard deviations
    assert sample(np.array([0.0, 2.0, 0.0]), rng) == 1
    np.testing.assert_array_equal(residual(np.array([0.5, 0.5, 0.0]), np.array([0.75, 0.0, 0.25])), [0, 1, 0])


@pytest.mark.usefixtures("warnings_are_errors")
def test_float32_weights_take_the_floor_only_where_a_logit_lies_below_it():
    # _float32_weights skips the floor pass when the row's minimum is above the floor; either
    # way its weights are exp((max(logit, floor) - top) / T) in float32, computed here the plain way.
    rng = np.random.default_rng(12)
    base = rng.standard_normal(5000).astype(np.float32)
    top = float(base.max())
    for temperature, floor_gaps, row in [
        (1.0, 86.0, base),  # nothing within 80 of the floor: no floor pass
        (0.05, 86.0, base),  # the floor 4.3 below the top: many ids raised to it
        (1.0, 128.0, np.where(np.arange(5000) % 7 == 0, np.float32(-np.inf), base)),  # -inf: raised to the floor
    ]:
        floor = np.float32(top - floor_gaps * temperature)
        want = np.exp((np.maximum(row, floor) - np.float32(top)) * np.float32(1.0 / temperature))
        got = dense._float32_weights(row, top, temperature, np.empty(5000, np.float32), floor_gaps)
        np.testing.assert_array_equal(got, want)
        assert got.min() >= np.exp(np.float32(-floor_gaps)) * (1 - 1e-6) and got.max() == 1.0


def distorted_target(row: np.ndarray, temperature: float, eps: float, seed: int) -> "speculative._DenseTarget":
    """A _DenseTarget whose float32 proposal is w64 times factors in [1 / (1 + eps), 1]: inside
    the bounds _DenseTarget relies on when _FLOAT32_EPS is eps, and far enough from p that a
    missing correction (thinning, the exact band) would show in a chi-square test."""
    unfiltered = SamplingParams(temperature, 0, 1.0, 0.0)
    target = speculative._DenseTarget.of(row, unfiltered)
    n = len(row)
    w64 = distribution(row, unfiltered).weights[:n]
    factors = np.random.default_rng(seed).uniform(1.0 / (1.0 + eps) + 1e-6, 1.0, n)
    w = np.zeros_like(target.w32.weights)
    w[:n] = (w64 * factors).astype(np.float32)
    block_sums = w.reshape(-1, BLOCK).sum(axis=1, dtype=np.float64)
    target.w32 = Distribution(n, None, w, float(block_sums.sum()), block_sums)
    return target


@pytest.mark.parametrize("tries", [speculative._THINNING_TRIES, 1])
def test_thinning_and_the_residual_by_rejection_follow_p_and_max0_p_minus_q(monkeypatch, tries):
    # The mechanisms tested where a mistake would show: _FLOAT32_EPS raised to 0.5 and the
    # proposal distorted by factors down to 2/3 (the bounds still hold), so p drawn without
    # thinning, or a residual decided from Z32 alone, would be off by up to 50% per id. With
    # tries = 1 the exact fallbacks run on most draws. 16 tokens; N = 20,000 draws of each
    # law; chi-square at false-failure 1e-4 each (stat_checks.ALPHA).
    monkeypatch.setattr(speculative, "FLOAT32_EPS", 0.5)
    monkeypatch.setattr(speculative, "_THINNING_TRIES", tries)
    rng = np.random.default_rng(40 + tries)
    n, N = 16, 20_000
    row = (rng.standard_normal(n) * 1.5).astype(np.float32)
    q = distribution((rng.standard_normal(n) * 1.5).astype(np.float32), SamplingParams(1.0, 0, 1.0, 0.0))
    p = distribution(row, SamplingParams(0.8, 0, 1.0, 0.0)).dense()
    r = np.maximum(p - q.dense(), 0.0)
    target = distorted_target(row, 0.8, 0.5, seed=tries)
    draws = np.bincount([target.draw(rng) for _ in range(N)], minlength=n)
    assert chi_square_pvalue(draws, p) > ALPHA
    target = distorted_target(row, 0.8, 0.5, seed=tries)
    residuals = np.bincount([target.draw_residual(q, rng) for _ in range(N)], minlength=n)
    assert chi_square_pvalue(residuals, r / r.sum()) > ALPHA
    assert target.z is not None, "some residual decision fell inside the band and used the float64 normaliser"


def test_a_plain_target_step_follows_p():
    # Engine.target_step (the baseline, and plain steps under auto) samples through
    # sample_row: on float32 rows by _DenseTarget.draw, on float64 rows by the float64 row.
    # 16 tokens, N = 20,000 steps each; chi-square at false-failure 1e-4 each.
    rng = np.random.default_rng(52)
    table = (rng.standard_normal((16, 16)) * 1.5).astype(np.float32)
    params = SamplingParams(0.8, 0, 1.0, 0.0)
    for dtype in (np.float32, np.float64):
        model = MarkovModel(table)
        model.table = table.astype(dtype)  # (the fake stores float32; a float64 row takes the other path)
        engine = Engine(model, None)
        assert engine.target.decode([1, 5], 1).dtype == dtype
        model.rewind(0)
        p = distribution(model.table[5], params).dense()
        counts = np.bincount([engine.target_step([1, 5], params, rng)[0] for _ in range(20_000)], minlength=16)
        assert chi_square_pvalue(counts, p) > ALPHA


class Float64Rows:
    """Counts float64 dense rows (softmax_row with float32=False) built while installed, in
    both modules that build them (filters' `distribution` and `proposal`, speculative's `_DenseTarget`)."""

    def __init__(self, monkeypatch):
        self.count = 0
        for module in (filters, speculative):
            monkeypatch.setattr(module, "softmax_row", self)

    def __call__(self, logits, top, temperature, float32=False, floor_gaps=128.0):
        self.count += not float32
        return dense_row(logits, top, temperature, float32, floor_gaps)


dense_row = dense.softmax_row


def test_verify_decides_a_ratio_too_close_to_call_in_float64(monkeypatch):
    # u exactly at the float64 ratio p(x)/q(x) must be rejected and u one ulp below it
    # accepted, as the float64 rule decides. The float32 ratio differs from the float64 one
    # (asserted), so a verify that decided from it alone would get one of the two wrong.
    rng = np.random.default_rng(21)
    n = 50_000
    params = SamplingParams(0.8, 0, 1.0, 0.0)
    target = (rng.standard_normal((2, n)) * 2).astype(np.float32)
    x = int(np.argmax(target[0]))
    p_x = distribution(target[0], params).prob(x)
    q = Distribution(n, np.array([x, x + 1]), np.array([0.5, 0.5]))
    ratio = p_x / 0.5
    assert 0.0 < ratio < 1.0
    row = speculative._DenseTarget.of(target[0], params)
    assert row.weight64(x) / row.w32.total != p_x
    after = [0.5] * 8  # the residual's draws
    assert verify(target, [x], [q], params, FixedRandom([ratio, *after])).accepted == 0
    assert verify(target, [x], [q], params, FixedRandom([np.nextafter(ratio, 0.0), *after])).accepted == 1
    # A u clearly below the ratio, or clearly above it, needs no float64 row at all (the bonus
    # and the residual are drawn from the float32 weights); a u at the ratio needs one.
    spy = Float64Rows(monkeypatch)
    assert verify(target, [x], [q], params, FixedRandom([0.5 * ratio, *after])).accepted == 1
    assert verify(target, [x], [q], params, FixedRandom([min(1.0, 2.0 * ratio) - 1e-9, *after])).accepted == 0
    assert spy.count == 0
    verify(target, [x], [q], params, FixedRandom([ratio, *after]))
    assert spy.count == 1


def test_verify_with_the_float32_path_makes_the_float64_decisions():
    # 400 rounds of k = 4 on random rows at several temperatures: the accepted count equals
    # the plain float64 rule's on a copy of the same generator (both take one uniform per
    # decision, so the decisions see the same u), and the token has positive probability
    # under the law it was drawn from. Its law is tested statistically above and, through
    # the engine, in test_sampling.py (PLAIN rows are float32 and dense).
    rng = np.random.default_rng(33)
    n, k = 3_000, 4
    for trial in range(400):
        params = SamplingParams(FAST_TEMPS[trial % len(FAST_TEMPS)], 0, 1.0, 0.0)
        target = (rng.standard_normal((k + 1, n)) * 2).astype(np.float32)
        draft = (target[:k] + rng.standard_normal((k, n)).astype(np.float32) * 0.3).astype(np.float32)
        q_rows = [proposal(r, params) for r in draft]
        tokens = [sample(q, rng) for q in q_rows]
        seed = int(rng.integers(1 << 30))
        got = verify(target, tokens, q_rows, params, np.random.default_rng(seed))
        coin = np.random.default_rng(seed)
        accepted = next((i for i, x in enumerate(tokens) if not coin.random() < distribution(target[i], params).prob(x) / q_rows[i].prob(x)), k)
        assert got.accepted == accepted, trial
        p = distribution(target[accepted], params)
        law = p if accepted == k else residual(p, q_rows[accepted])
        assert law.prob(got.token) > 0, trial
