"""The cost curve: how long one draft step and one target batch of n tokens take, measured.

Every speed-up prediction (stats.predict, adaptive.AdaptivePolicy's seed, the bench) needs the
target's cost per batch size, because verifying k drafts costs one batch of k + 1 tokens,
not one step. `measure_cost_curve` times batches of 1..max_batch tokens at the end of a
context (medians of a few repeats) and a draft step (the mean of a few in a row, as a round
drafts them), and leaves both caches as it found them. Example:
CostCurve(draft_step=0.005, target_batch=(0.012, 0.0135, 0.015)) means a draft step of 5 ms,
and target batches of 1, 2, 3 tokens of 12, 13.5, 15 ms.

A step costs more as the context grows, so where the curve is timed matters: halfway
through the generation it describes (`mid_generation`), not at the end of its prompt.

Left out: what the figures predict (decoding/stats.py), when to measure (cli/run.py, bench/run.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..causal_model import CausalModel, catch_up

DRAFT_RUN = 4  # draft steps timed in a row for the draft step's cost


@dataclass(frozen=True)
class CostCurve:
    """Measured costs in seconds: one draft step, and one target batch of n tokens (n = 1..)."""

    draft_step: float  # None only in a seed for auto that timed no draft step (tuning/record.py)
    target_batch: tuple[float, ...]  # target_batch[n - 1] = time of a batch of n tokens
    # What a batch size's first pass in a process costs beyond its later ones (over RPC some 50 ms:
    # docs/rpc.md); None where it was not measured. Only auto's record carries it (tuning/record.py).
    first_pass: float | None = None

    @property
    def target_step(self) -> float:
        return self.target_batch[0]


def mid_generation(prompt: Sequence[int], generated: Sequence[int]) -> list[int]:
    """The context halfway through a generation: the prompt, then the first half of what it generated.

    Attention reads every cached token, so a step costs more as the context grows, and a
    verify batch pays that once for each token it scores: costs timed at the end of the
    prompt understate a long generation's, the verify batch's and the draft's most. On the
    2-core machine (docs/benchmarks.md, issue 13's N = 100 target) going from 51 to 291
    tokens of context took T(1) from 86-91 to 100-110 ms, T(17) from 285-305 to 394-401 ms and
    the draft step from 9.5-10.7 to 13.7-14.6 ms. The growth is about linear in the context,
    so the mean cost over the generation is about the cost halfway through it.
    Example: prompt [5, 6], generated [7, 8, 9, 10] -> [5, 6, 7, 8].
    """
    return list(prompt) + list(generated[: len(generated) // 2])


def measure_cost_curve(
    target: CausalModel,
    draft: CausalModel | None,
    context: Sequence[int],
    max_batch: int,
    repeats: int = 3,
    draft_context: Sequence[int] | None = None,
) -> CostCurve:
    """Time target batches of 1..max_batch tokens (and a draft step) at the end of `context`.

    `draft_context` is the same text in the draft's tokens when the vocabularies differ
    (session.LoadedPair.draft_context); None: `context` itself. Both caches are rewound to
    their contexts afterwards, whatever happens; medians of `repeats`. Each repeat times
    every size in turn and then the draft step, so that a slow spell of a busy machine falls
    on all of them alike instead of on a few neighbouring sizes: a prediction depends on
    their ratios (T(k + 1) / T(1), draft step / T(1)) more than on any one of them.

    The draft step is the mean of DRAFT_RUN steps in a row (at most max_batch - 1), as a round
    drafts them: a lone step right after the target's batches may cost far more than a
    round's steps do (Gemma 3 270M drafting for its F32 self on a 2-core CPU: about twice, in
    most repeats, which halved the predicted speed-up; docs/benchmarks.md).
    """
    caches = [(target, context)]
    if draft is not None:
        caches.append((draft, context if draft_context is None else draft_context))
    jobs = [(target, context, n, 1) for n in range(1, max_batch + 1)]
    jobs += [(model, tokens, 1, max(min(DRAFT_RUN, max_batch - 1), 1)) for model, tokens in caches[1:]]  # the draft steps, if any
    samples: list[list[float]] = [[] for _ in jobs]
    for model, tokens in caches:
        catch_up(model, tokens)
    try:
        for _ in range(repeats):
            for (model, tokens, n, calls), times in zip(jobs, samples):
                filler = list(tokens[-1:]) * n
                t0 = time.perf_counter()
                for _ in range(calls):
                    model.decode(filler, n)
                times.append((time.perf_counter() - t0) / calls)
                model.rewind(len(tokens))
    finally:
        for model, tokens in caches:
            model.rewind(len(tokens))
    medians = [float(np.median(times)) for times in samples]
    return CostCurve(draft_step=medians[max_batch] if draft is not None else 0.0, target_batch=tuple(medians[:max_batch]))
