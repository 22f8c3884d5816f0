"""Exactness of a whole generation on a toy Markov target, tested from its transitions.

The target is a `fakes.MarkovModel`: the law of each token given the past is
p(. | previous token), processed by the sampling settings. An exact decoder keeps that law at
every position *given anything decided before the token is drawn* — in particular the
token's position inside its round (1 = first draft or plain step, 2 = after one accepted
draft, ...), which depends on the drafter, the policy and earlier verdicts only. So the
counts of token x after token s at round position j must follow p(x | s) in every stratum
(s, j). Each stratum with enough tokens gives a chi-square statistic; their sum is
chi-square with the summed degrees of freedom (the strata are conditionally independent
multinomials given the visit counts), and one p-value comes out.

A biased rule shows up in some stratum: e.g. a drafter that drops a drawn token whose
q(x) is small proposes from q restricted to likely tokens while verify divides by q.
With by_rule, the strata are also split by the rule that verified the token's round
(Round.rule, which `--verify auto` fixes before the round's draws: so the law holds in each).

    result = transition_test(events, prompt, table, params)
    assert result.p_value > 1e-3
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
from scipy import stats

from specdec_cli.events import Round, Token
from specdec_cli.maths.filters import probabilities
from specdec_cli.maths.sampling import SamplingParams
from stat_checks import chi_square_statistic

MIN_STRATUM = 200  # tokens a stratum needs before it is tested


@dataclass(frozen=True)
class TransitionResult:
    statistic: float
    dof: int
    p_value: float
    strata: int
    tokens: int


def target_rows(table: np.ndarray, params: SamplingParams) -> np.ndarray:
    """p(. | s) for every previous token s, processed as the engine processes them."""
    return np.stack([probabilities(row, params) for row in np.asarray(table, dtype=np.float32)])


def transition_test(events: Iterable, prompt: Sequence[int], table: np.ndarray, params: SamplingParams, by_rule: bool = False) -> TransitionResult:
    p = target_rows(table, params)
    counts: dict[tuple, np.ndarray] = defaultdict(lambda: np.zeros(p.shape[1]))
    previous = prompt[-1]
    n = 0
    waiting: list[tuple[int, int, int]] = []  # (previous, position, id) of a round's tokens until its Round comes
    for event in events:
        if isinstance(event, Token):
            waiting.append((previous, min(event.position, 3), event.id))
            previous = event.id
            n += 1
        elif isinstance(event, Round):
            for s, j, x in waiting:
                counts[(s, j, event.rule) if by_rule else (s, j)][x] += 1
            waiting = []
    for s, j, x in waiting:  # a stream without its last Round
        counts[(s, j, "") if by_rule else (s, j)][x] += 1
    statistic, dof, strata = 0.0, 0, 0
    for (s, *_), observed in counts.items():
        total = observed.sum()
        support = p[s] > 0
        assert observed[~support].sum() == 0, f"a token with target probability 0 was emitted after {s}"
        if total < MIN_STRATUM:
            continue
        chi2, df = chi_square_statistic(observed, p[s])  # bins pooled as in every chi-square test here
        statistic += chi2
        dof += df
        strata += 1
    return TransitionResult(statistic, dof, float(stats.chi2.sf(statistic, dof)), strata, n)
