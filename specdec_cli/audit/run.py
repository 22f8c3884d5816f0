"""The exactness audit: does speculative decoding leave this pair's output law unchanged?

Three checks on one loaded pair, with the engines `run` uses (the caller builds them and the
draft-length policy, exactly as `run` does). One policy serves every draw, so `auto` learns
across the draws as it does across the rounds of one long run: its first rounds draft on its
priors, its measurements of T(1) are plain target steps, and the rest draft the k it settled on.
That keeps the output exact: k is chosen from earlier draws only (see tuning/policy.py).

  1. first token   N speculative generations (draw i seeded seed + i) give N first tokens;
                   their counts are tested against the target's EXACT processed law
                   p(x1) = filters.distribution(target logits after the prompt)
  2. first pair    the same N generations' first two tokens against p(x1) p(x2 | x1), with
                   one target pass per x1 that expects at least MIN_EXPECTED draws; a rarer
                   x1 stands for "x1, then anything"
  3. greedy        at temperature 0, speculative and target-only decoding of GREEDY_TOKENS
                   tokens must agree token for token (no statistics: any difference is a bug)

Tests 1 and 2 are Pearson chi-square tests over pooled cells (audit/gof.py), each at level
alpha / 2 (Bonferroni), their statistic set against exact samplers simulated from the law
(gof.simulated_test; the chi-square law's own tail is too thin at these counts), so an exact
engine is rejected with probability at most alpha. Each
also reports the total variation distance of the draws from the exact law with its interval.
Comparing with the exact law is stronger than a two-sample test against target-only draws:
only one side is noisy. The end of generation (any end-of-generation token) is one outcome,
END: the engine emits no Token for it. At temperature 0 tests 1 and 2 are skipped (the law
is one-hot: test 3 covers it).

Example: a 6-token toy target, N = 2000, alpha 0.001. A correct engine passes with probability
at least 0.999; with the residual max(0, p - q) replaced by p, the first-token law becomes
min(p, q) + (1 - sum min(p, q)) p, and tests/test_audit.py shows the audit rejects it.

A draw reads its generation only until it holds two tokens (or END) and round 1's figures,
then closes it; both KV caches keep the prompt, so a draw costs one or two rounds. The
token budget of a draw (DRAW_BUDGET) is above any k, so round 1 drafts exactly what it would
in `run`. Whether round 1 drafted at all is counted: with a drafter that proposed nothing
(e.g. prompt lookup without a match) the audit would compare the target with itself, and
the verdict says "inconclusive".

Left out: loading the pair and building the policy (cli/audit.py), printing (audit/render.py),
the statistics themselves (audit/gof.py).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ..causal_model import catch_up
from ..decoding.consume import consume
from ..decoding.engine import Engine, GenerationConfig
from ..errors import ContextOverflow
from ..events import DraftPolicy, Finished, Round, Token
from ..grammar.compile import Grammar
from ..grammar.guide import Guide
from ..maths.masking import masked_row
from ..maths.distribution import Distribution
from ..maths.filters import distribution
from ..maths.sampling import GREEDY, SamplingParams
from ..options import DEFAULT_VERIFY
from .gof import MIN_EXPECTED, TV_LEVEL, ChiSquare, SimulatedTest, TotalVariation, chi_square, simulated_test, total_variation

END = -1  # the outcome "generation ended" (any end-of-generation token)
REST = -2  # in a pair (x1, REST): x1, then one of the second tokens too rare to stand alone
DRAW_BUDGET = 65  # tokens a draw may generate: more than any k (options.MAX_DRAFT_TOKENS), so round 1 is never capped
TIMING_DRAWS = 10  # draws timed before the estimate
GREEDY_TOKENS = 128
DEFAULT_SAMPLES = 2000
DEFAULT_ALPHA = 1e-3
SAMPLED_TESTS = 2  # first token, first pair: the Bonferroni divisor

Outcome = tuple[int, ...]


@dataclass(frozen=True)
class AuditConfig:
    samples: int = DEFAULT_SAMPLES
    alpha: float = DEFAULT_ALPHA
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int = 0  # draw i uses seed + i
    greedy_tokens: int = GREEDY_TOKENS
    verify: str = DEFAULT_VERIFY  # the rule that keeps drafts (options.VERIFY_RULES)
    grammar: Grammar | None = None  # a constraint (--json-schema, --grammar): the law tested is then p' (the masked rows)

    @property
    def sampled(self) -> bool:
        """Whether the first-token and pair tests run (not at temperature 0)."""
        return not self.sampling.greedy and self.samples > 0

    @property
    def level(self) -> float:
        """The level of each chi-square test (Bonferroni)."""
        return self.alpha / SAMPLED_TESTS


class Law:
    """An exact law over outcomes, as cells: cell i has probability probs[i]; `cell(outcome)` is
    the cell an observed outcome counts in, or None for an outcome of probability zero."""

    def __init__(self, labels: list[Outcome], probs: np.ndarray, locate: Callable[[Outcome], int | None]) -> None:
        self.labels = labels
        self.probs = probs
        self.cell = locate

    def counts(self, outcomes: Sequence[Outcome]) -> tuple[np.ndarray, int]:
        """Counts per cell and the number of impossible outcomes."""
        counts = np.zeros(len(self.probs))
        impossible = 0
        for o in outcomes:
            i = self.cell(o)
            if i is None:
                impossible += 1
            else:
                counts[i] += 1
        return counts, impossible


def token_cells(p: Distribution, is_end: Callable[[int], bool]) -> dict[int, float]:
    """A processed distribution as {token: probability}, every end-of-generation token merged into END.

    Example: p = {3: 0.5, 7: 0.3, 9: 0.2} with 7 and 9 ending generation -> {3: 0.5, END: 0.5}.
    """
    ids = np.arange(p.n) if p.ids is None else p.ids
    probs = p.probs_at(ids)
    keep = probs > 0
    out: dict[int, float] = {}
    for token, prob in zip(ids[keep].tolist(), probs[keep].tolist()):
        key = END if is_end(token) else token
        out[key] = out.get(key, 0.0) + prob
    return out


def first_token_law(p1: dict[int, float]) -> Law:
    labels = [(x,) for x in p1]
    index = {label: i for i, label in enumerate(labels)}
    return Law(labels, np.array([p1[x] for x in p1]), lambda o: index.get(o[:1]))


def first_pair_law(p1: dict[int, float], p2: dict[int, dict[int, float]], n: int) -> Law:
    """The law of the first two outcomes. p2[x1] is the law after x1 for every x1 followed up
    (END never is); any other x1 is the cell (x1,). A pair expecting fewer than MIN_EXPECTED
    of n draws goes into its x1's (x1, REST) cell. Example: p1 = {0: 0.5, END: 0.5},
    p2 = {0: {0: 0.6, 1: 0.4}}, n = 20 -> cells (0, 0): 0.3, (0, REST): 0.2, (END,): 0.5."""
    labels: list[Outcome] = []
    probs: list[float] = []
    index: dict[Outcome, int] = {}
    rest_of: dict[int, float] = {}  # x1 -> mass of the pairs in (x1, REST)

    def add(label: Outcome, prob: float) -> None:
        index[label] = len(labels)
        labels.append(label)
        probs.append(prob)

    for x1, prob1 in p1.items():
        if x1 not in p2:
            add((x1,), prob1)
            continue
        rest = 0.0
        for x2, prob2 in p2[x1].items():
            if n * prob1 * prob2 >= MIN_EXPECTED:
                add((x1, x2), prob1 * prob2)
            else:
                rest += prob1 * prob2
        if rest > 0.0:
            rest_of[x1] = rest
            add((x1, REST), rest)

    def locate(o: Outcome) -> int | None:
        if (o[0],) in index:
            return index[(o[0],)]
        if o[0] not in p2 or len(o) < 2:
            return None
        if o[:2] in index:
            return index[o[:2]]
        return index[(o[0], REST)] if p2[o[0]].get(o[1], 0.0) > 0.0 else None

    return Law(labels, np.array(probs), locate)


@dataclass(frozen=True)
class SampledTest:
    chi2: ChiSquare  # the statistic, its cells, and the chi-square law's p-value (for reference)
    exact: SimulatedTest  # the decision: the same statistic against simulated exact samplers
    tv: TotalVariation

    @property
    def rejects(self) -> bool:
        return self.exact.rejects


@dataclass(frozen=True)
class GreedyCheck:
    tokens: int  # compared (the shorter output's length, if one ended first)
    identical: bool
    position: int | None = None  # first differing position (0-based), if any
    speculative: int | None = None  # the tokens there (None: that output had ended)
    target_only: int | None = None


@dataclass
class Drafting:
    """What round 1 of the draws did: were the sampled tests testing speculation at all?"""

    draws: int = 0
    drafted_draws: int = 0  # draws whose round 1 drafted at least one token
    drafted: int = 0
    accepted: int = 0

    def add(self, first_round: Round | None) -> None:
        self.draws += 1
        if first_round is not None and first_round.drafted:
            self.drafted_draws += 1
            self.drafted += first_round.drafted
            self.accepted += first_round.accepted


@dataclass(frozen=True)
class Progress:
    """Handed to the caller's callback: a stage, and draws done of total once drawing started."""

    stage: str  # "law", "timing", "drawing", "greedy"
    done: int = 0
    total: int = 0
    estimate_seconds: float | None = None  # the whole audit's, once the timing draws are done
    elapsed_seconds: float = 0.0


@dataclass(frozen=True)
class AuditResult:
    config: AuditConfig
    first_token: SampledTest | None
    first_pair: SampledTest | None
    greedy: GreedyCheck
    drafting: Drafting
    target_passes: int  # the exact law's cost: target passes beyond the prompt
    estimate_seconds: float | None
    seconds: float

    def to_dict(self) -> dict:
        """Everything in the report, as plain values (--json)."""

        def sampled(t: SampledTest | None) -> dict | None:
            if t is None:
                return None
            c, tv = t.chi2, t.tv
            return {
                "statistic": c.statistic, "dof": c.dof, "p_value": t.exact.p_value, "simulations": t.exact.simulations,
                "p_value_chi2_law": c.p_value, "rejects": t.rejects,
                "cells": c.cells, "cells_before_pooling": c.outcomes, "pooled_cells": c.pooled, "impossible_draws": c.impossible,
                "tv": tv.estimate, "tv_interval": [tv.low, tv.high], "tv_level": TV_LEVEL, "tv_exact_engine_95": tv.noise,
            }  # fmt: skip

        c = self.config
        return {
            "verdict": self.verdict,
            "alpha": c.alpha,
            "false_alarm_rate": c.alpha if c.sampled else 0.0,
            "level_per_test": c.level if c.sampled else None,
            "samples": c.samples if c.sampled else 0,
            "seed": c.seed,
            "sampling": dataclasses.asdict(c.sampling),
            "first_token": sampled(self.first_token),
            "first_pair": sampled(self.first_pair),
            "greedy": dataclasses.asdict(self.greedy),
            "drafting": dataclasses.asdict(self.drafting),
            "target_passes": self.target_passes,
            "estimate_seconds": self.estimate_seconds,
            "seconds": self.seconds,
        }

    @property
    def verdict(self) -> str:
        """'rejected' if a test rejects, 'inconclusive' if sampled draws never drafted, else 'consistent'."""
        tests = [t for t in (self.first_token, self.first_pair) if t is not None]
        if any(t.rejects for t in tests) or not self.greedy.identical:
            return "rejected"
        if tests and self.drafting.drafted_draws == 0:
            return "inconclusive"
        return "consistent"


def draw(
    engine: Engine, prompt: Sequence[int], params: SamplingParams, seed: int, policy: DraftPolicy, verify: str = DEFAULT_VERIFY,
    grammar: Grammar | None = None,
) -> tuple[Outcome, Round | None]:
    """The first two outcomes of one generation (fewer only after END), and its round 1."""
    config = GenerationConfig(max_tokens=DRAW_BUDGET, sampling=params, seed=seed, verify=verify, grammar=grammar)
    events = engine.generate(prompt, config, policy)
    out: list[int] = []
    first_round = None
    try:
        for event in events:
            if isinstance(event, Token):
                out.append(event.id)
            elif isinstance(event, Round) and first_round is None:
                first_round = event
            elif isinstance(event, Finished):
                if event.reason == "eog":
                    out.append(END)
                break
            if (len(out) >= 2 and first_round is not None) or END in out:
                break
    finally:
        events.close()  # the engine rolls both caches back to the prompt and what was read
    if len(out) < 2 and END not in out:
        raise AssertionError(f"a draw ended after {len(out)} tokens without end of generation (the caller checks the context has room)")
    return tuple(out[:2]), first_round


def target_law(
    target: Engine, prompt: Sequence[int], params: SamplingParams, n: int, grammar: Grammar | None = None
) -> tuple[dict[int, float], dict[int, dict[int, float]]]:
    """p(x1) after the prompt, and p(x2 | x1) for every x1 (not END) expecting >= MIN_EXPECTED of n draws;
    under a constraint p', each row masked by the grammar's mask after the output so far."""

    def after(context: list[int]) -> dict[int, float]:
        row = catch_up(target.target, context)[0, : target.vocab_limit]
        if grammar is not None:
            guide = Guide.over(grammar.matcher(target.grammar_tokenizer()), target.grammar_tokenizer())
            for token in context[len(prompt) :]:
                guide.push(token)
            row = masked_row(row, guide.mask())
        return token_cells(distribution(row, params), target.is_end)

    p1 = after(list(prompt))
    p2 = {x1: after(list(prompt) + [x1]) for x1, prob in p1.items() if x1 != END and n * prob >= MIN_EXPECTED}
    return p1, p2


def greedy_check(
    speculative: Engine, target: Engine, prompt: Sequence[int], tokens: int, policy: DraftPolicy, verify: str = DEFAULT_VERIFY,
    grammar: Grammar | None = None,
) -> GreedyCheck:
    """Speculative against target-only decoding at temperature 0, token for token."""
    config = GenerationConfig(max_tokens=tokens, sampling=GREEDY, seed=0, verify=verify, grammar=grammar)
    a = consume(speculative.generate(prompt, config, policy)).tokens
    b = consume(target.generate(prompt, config)).tokens
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return GreedyCheck(i, False, i, x, y)
    if len(a) != len(b):
        i = min(len(a), len(b))
        return GreedyCheck(i, False, i, a[i] if i < len(a) else None, b[i] if i < len(b) else None)
    return GreedyCheck(len(a), True)


def sampled_test(law: Law, outcomes: Sequence[Outcome], level: float, rng: np.random.Generator) -> SampledTest:
    counts, impossible = law.counts(outcomes)
    # Impossible outcomes get a cell of probability 0, so that chi_square and the TV see them.
    counts = np.append(counts, impossible)
    probs = np.append(law.probs, 0.0)
    return SampledTest(chi_square(counts, probs), simulated_test(counts, probs, level, rng), total_variation(counts, probs, rng))


def run_audit(
    speculative: Engine,
    target: Engine,
    prompt: Sequence[int],
    config: AuditConfig,
    policy: DraftPolicy,
    progress: Callable[[Progress], None] = lambda p: None,
) -> AuditResult:
    """The three checks above, all drafting under `policy` (draft_policy(k) or `auto`, as run
    builds it); `target` is the target-only engine on the same loaded target."""
    if len(prompt) + 2 > target.target.n_ctx:
        raise ContextOverflow(
            f"prompt is {len(prompt)} tokens but the context holds {target.target.n_ctx}: no room for two tokens; "
            f"pass --ctx {len(prompt) + config.greedy_tokens}"
        )
    start = time.perf_counter()
    n = config.samples
    first_token = first_pair = None
    drafting = Drafting()
    passes = 0
    estimate = None
    if config.sampled:
        progress(Progress("law"))
        p1, p2 = target_law(target, prompt, config.sampling, n, config.grammar)
        passes = len(p2)
        law_seconds = time.perf_counter() - start
        outcomes: list[Outcome] = []
        for i in range(n):
            if i == min(TIMING_DRAWS, n):
                per_draw = (time.perf_counter() - start - law_seconds) / i
                step = law_seconds / (passes + 1)  # the prompt's pass counts as one: a rough upper bound of a step
                estimate = time.perf_counter() - start + per_draw * (n - i) + config.greedy_tokens * (per_draw + step)
            progress(Progress("drawing" if estimate is not None else "timing", i, n, estimate, time.perf_counter() - start))
            outcome, first_round = draw(speculative, prompt, config.sampling, config.seed + i, policy, config.verify, config.grammar)
            outcomes.append(outcome)
            drafting.add(first_round)
        progress(Progress("drawing", n, n, estimate, time.perf_counter() - start))
        rng = np.random.default_rng(config.seed)
        first_token = sampled_test(first_token_law(p1), [o[:1] for o in outcomes], config.level, rng)
        first_pair = sampled_test(first_pair_law(p1, p2, n), outcomes, config.level, rng)
    progress(Progress("greedy", 0, 0, estimate, time.perf_counter() - start))
    greedy = greedy_check(speculative, target, prompt, config.greedy_tokens, policy, config.verify, config.grammar)
    return AuditResult(config, first_token, first_pair, greedy, drafting, passes, estimate, time.perf_counter() - start)
