"""tuning/pass_cost.py: the line through a model's passes, and each sequence's share of a pass."""

from __future__ import annotations

import numpy as np
import pytest

from specdec_cli.tuning.pass_cost import PRIOR_ROW_SHARE, PassCost, aside_seconds, by_line, shares, solve3


def test_the_module_docstring_examples():
    cost = PassCost(decay=1.0, prior_weight=1e-9)
    for rows, sequences, seconds in [(1, 1, 0.012), (9, 1, 0.016), (4, 4, 0.0195)]:
        cost.add(rows, sequences, seconds)
    assert cost.line() == pytest.approx((0.0095, 0.0005, 0.002), abs=1e-6)
    assert shares(0.020, [1, 9], (0.0095, 0.0005, 0.0)) == pytest.approx([0.00724, 0.01276], abs=1e-5)
    assert shares(0.020, [5], (0.0095, 0.0005, 0.002)) == pytest.approx([0.020])  # alone: the whole pass


def test_by_line_worked_example():
    assert by_line([1, 9], (0.0095, 0.0005, 0.002)) == pytest.approx(0.0185)


def test_aside_seconds_worked_examples():
    line = (0.020, 0.0015, 0.002)
    assert aside_seconds(0.064, [1, 8, 8, 10], [1, 1, 1, 1], line) == pytest.approx(0.0322336, abs=1e-6)
    assert aside_seconds(0.055, [8], [0], line) == pytest.approx(0.055)  # a prompt's middle chunk alone: all of it
    assert aside_seconds(0.030, [1, 3, 1], [1, 3, 1], line) == 0.0  # every row kept: nothing set aside
    # a draft pass: one sequence catching up 41 rows beside two drafting steps, each keeping at most 2
    # -> 80 x (1 - (4 + 3 x 1 + 5 x 3) / (4 + 3 x 1 + 44 x 3)) = 67.34 ms
    assert aside_seconds(0.080, [2, 41, 1], [2, 2, 1], (0.004, 0.003, 0.001)) == pytest.approx(0.080 * (1 - 22 / 139))


def test_solve3_worked_example():
    assert solve3([[2.0, 0.0, 0.0], [0.0, 4.0, 0.0], [1.0, 0.0, 1.0]], [2.0, 8.0, 3.0]) == pytest.approx([1.0, 2.0, 2.0])
    assert solve3([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 2.0]], [3.0, 5.0, 4.0]) == pytest.approx([5.0, 3.0, 2.0])  # zeros on the diagonal


def test_the_line_is_the_ridged_weighted_least_squares():
    """The fit in floats against numpy's least squares on the same passes: 200 random passes
    (seed 3) of 1-40 rows over 1-8 sequences, decay 0.98, the default ridge."""
    rng = np.random.default_rng(3)
    cost, decay = PassCost(), 0.98
    x, t = [], []
    for _ in range(200):
        rows, sequences = int(rng.integers(1, 41)), int(rng.integers(1, 9))
        seconds = 0.004 + 0.0001 * rows + 0.0003 * sequences + float(rng.normal(0, 0.0005))
        cost.add(rows, sequences, seconds)
        x.append([1.0, rows, sequences])
        t.append(seconds)
    w = decay ** np.arange(len(t))[::-1]
    x, t = np.array(x), np.array(t)
    mean = float(w @ t / w.sum())
    m = x.T @ (w[:, None] * x) + np.diag([0.0, 1.0, 1.0])
    y = x.T @ (w * t) + np.array([0.0, PRIOR_ROW_SHARE * mean, 0.0])
    expected = np.maximum(np.linalg.lstsq(m, y, rcond=None)[0], 0.0)
    assert cost.line() == pytest.approx(tuple(expected), rel=1e-9, abs=1e-12)
