"""tuning/pass_cost.py: the line through a model's passes, and each sequence's share of a pass."""

from __future__ import annotations

import pytest

from specdec_cli.tuning.pass_cost import PassCost, shares


def test_the_module_docstring_examples():
    cost = PassCost(decay=1.0, prior_weight=1e-9)
    for rows, sequences, seconds in [(1, 1, 0.012), (9, 1, 0.016), (4, 4, 0.0195)]:
        cost.add(rows, sequences, seconds)
    assert cost.line() == pytest.approx((0.0095, 0.0005, 0.002), abs=1e-6)
    assert shares(0.020, [1, 9], (0.0095, 0.0005, 0.0)) == pytest.approx([0.00724, 0.01276], abs=1e-5)
    assert shares(0.020, [5], (0.0095, 0.0005, 0.002)) == pytest.approx([0.020])  # alone: the whole pass
