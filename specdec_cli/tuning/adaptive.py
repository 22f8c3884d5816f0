"""`--draft-tokens auto`: before each round, the drafter and k with the most expected tokens per second.

`AdaptivePolicy` learns from the run's own rounds (their Round events) and chooses the proposer
and the cap k that maximise E(k) / (k x T_draft + T_batch(k + 1)), E(k) the expected tokens of a
round from the acceptance a_i per draft position (Leviathan et al. 2022, Theorem 3.8, generalised:
speedup.best_draft_length); a plain target step (k = 0) yields 1 token in T_batch(1). Worked
example, a = 0.8 at every position, a draft step of 5 ms, T_batch(n) = 12 + 1.5 (n - 1) ms:

    k = 0: 1 / 12 = 0.0833 tokens/ms      k = 1: 1.8 / 18.5 = 0.0973
    k = 2: 2.44 / 25 = 0.0976 (chosen)    k = 3: 2.952 / 31.5 = 0.0937

What it learns (estimates.py): a_i, exponentially weighted per round (DECAY) and shrunk toward the
rate pooled over all positions, so a position not tried yet inherits it; per proposer, T_draft,
a draft step without the draft model's catch-up, and the catch-up apart; T_batch(n), a round's
seconds less its draft seconds, per batch size, with a line through the sizes seen.

Before anything is timed. Round 1 runs slow after the prefill and teaches no costs, so rounds 1
and 2 draft on the priors (proposers.py) in units of T_batch(1), which need not be known: a = 0.8,
T_draft = 0.2, T_batch(n) = 1 + 0.05 (n - 1) give a draft model k = 3. A prior draft step counts
as PRIOR_DRAFT_WEIGHT of a measured round, so the first measurements soon outweigh it.

The yardstick T_batch(1). Every plan is weighed against a plain step, which measures T_batch(1)
but forgoes a round's gain. Until the first one, T_batch(1) is estimated from the drafting rounds
(estimates.estimate_step: the line through two sizes or more, at n = 1); the first plain step
comes once two sizes have been seen, unless drafting then promises REFRESH_MARGIN times
target-only's speed or more (round 4 at the latest). Later plain steps re-measure it when the
last measurement is REFRESH_ROUNDS rounds old, or STALE_ROUNDS old while drafting promises
REFRESH_MARGIN or more (`stale`).

Fallback and probes. When no k >= 1 beats target-only and the drafter has had its fair trial
(proposers.MIN_TRIALS drafted positions), the round is a plain step; where a batch size's first
pass costs more (over RPC), on the passes' costs once run again (`BatchCost.settled`). After
FIRST_BACKOFF such rounds the drafter is tried once more at its best k >= 1, and the back-off
doubles, up to MAX_BACKOFF, until drafting pays again; a drafter passed over for another is
probed the same way. A draft model's probe first catches up on every token it sat out, so such
catch-ups may take at most PROBE_BUDGET of the run's time (`affordable`). A match from the
memory is not held to the fair trial within a call (its record goes on from call to call), and a
draft model is not displaced before its trial by a short match that has not had one either
(`unproven`).

Rounds the draft model sits out. A round that lookup or the memory drafts leaves the draft model
behind by its tokens, which its next catch-up evaluates. Where the draft model is in use, their
plans pay that per token (`sitting_out`), and a round from the memory must beat the model's
marginal cost per token, a draft step and a row of the pass, since it mostly shortens the model's
next round rather than replacing one (`memory_or_model`).

Across calls: `continued()` hands the next call on the same models everything this one learnt
(chain.py); `resume` starts each proposer from the record earlier calls earned (carried.py). How
close `auto` comes to the best fixed k: docs/auto.md, "`-k auto` against the best fixed k".

Left out: the estimators (estimates.py), the priors (proposers.py), the drafters (drafting/), the
loop that consults the policy (decoding/engine.py), and why none of this bends the output's law
(policy.py, "Why the output stays exact").
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ..events import Earned, Round
from .carried import carried_record
from .cost_curve import CostCurve
from .estimates import DECAY, PRIOR_BATCH_SLOPE, Acceptance, BatchCost, WeightedMean, clamp
from .proposers import MIN_TRIALS, MODEL_KINDS, MOSTLY_WRONG, SAT_OUT_PRIOR, from_memory, kind, prior_acceptance, prior_draft_cost
from .speedup import best_draft_length


# The early-stop threshold (llama.cpp's --draft-p-min, whose default is 0.75), for `auto` and a
# fixed k alike: 0, off. The choice of k already follows the measured acceptance, and a stop
# counts as a failed position, so k adapts to a pair whose draft knows when it is guessing
# (--p-min). What a threshold costs where the draft is right while unsure:
# docs/benchmarks.md, "Comparisons with llama.cpp".
DEFAULT_P_MIN = 0.0
AUTO_MAX_K = 16  # the longest draft `auto` considers
PRIOR_DRAFT_WEIGHT = 0.25  # a prior draft step counts as a quarter of a measured round (see `plan`)
FIRST_BACKOFF = 8  # plain rounds before the first probe after a fallback (a probe pays the draft model's catch-up on them)
PROBE_BUDGET = 0.05  # the share of the run's time that probes' catch-ups may take
REFRESH_ROUNDS = 16  # a plain step re-measures T_batch(1) when it is older than this many rounds,
REFRESH_MARGIN = 2.0  # unless drafting promises at least this factor over target-only:
STALE_ROUNDS = 64  # then when it is older than this many
MAX_BACKOFF = 64  # the longest back-off between probes
RESUMED_BACKOFF = 32  # the first probe of a proposer resumed with a losing record of a fair trial (carried.py)
TRIED = MIN_TRIALS - 1e-9  # trials that count as MIN_TRIALS: a record scaled to it may sum a hair below


@dataclass
class DrafterRecord:
    """What the policy knows about one proposer ("model", "lookup:3-5", ...)."""

    acceptance: Acceptance
    draft_step: WeightedMean = field(default_factory=WeightedMean)
    catch_up: WeightedMean = field(default_factory=WeightedMean)  # the draft model's catch-up per round
    backlog_per_token: WeightedMean = field(default_factory=WeightedMean)  # catch-up beyond the usual, per token sat out
    carried_cost: float | None = None  # T_draft / T_batch(1) as an earlier call measured it (Earned.draft_cost)
    steps_timed: int = 0  # draft steps this run timed (draft_step holds no more than a prior before the first)
    step_is_prior: bool = False  # draft_step holds only the prior, in the T_batch(1) of the last plan (`plan`)
    backoff: int = FIRST_BACKOFF  # rounds passed over before the next probe
    waited: int = 0  # rounds passed over since it last drafted
    last_tokens: int = 0  # the tokens of all rounds observed, when it last drafted

    @property
    def usual_catch_up(self) -> float | None:
        """A draft model's catch-up while it drafts along (one or two tokens), where timed; else its draft step."""
        return self.catch_up.value if self.catch_up.value is not None else self.draft_step.value


class AdaptivePolicy:
    """`--draft-tokens auto`: the k (and drafter) with the most expected tokens per second, learnt in this run.

    `costs` seeds the cost estimates with a measured curve (cost_curve.measure_cost_curve, or
    an earlier call's: tuning/record.py); with learn_costs=False they stay fixed (tests with
    hand-worked curves). `first_pass` is a prior for what a pass at a batch size not run yet
    costs more (over RPC: llama/rpc.first_pass_prior), where `costs` carry no measured value.
    """

    prefill_draft = True
    probing = True  # whether a drafter passed over is tried now and then (off while others share the passes: decoding/batch.py)

    def __init__(
        self,
        p_min: float = DEFAULT_P_MIN,
        max_k: int = AUTO_MAX_K,
        *,
        decay: float = DECAY,
        costs: CostCurve | None = None,
        learn_costs: bool = True,
        first_pass: float | None = None,
    ) -> None:
        assert max_k >= 1 and 0.0 <= p_min <= 1.0
        self.p_min, self.max_k, self.decay = p_min, max_k, decay
        self.learn_costs = learn_costs
        self.batch = BatchCost(decay)
        self.drafters: dict[str, DrafterRecord] = {}
        self.rounds = 0  # rounds observed (in the calls before too, for a policy `continued` from another)
        self.call_rounds = 0  # of which in this call
        self.yardstick_round = 0  # the round in which T_batch(1) was last measured
        self.elapsed = 0.0  # seconds of all rounds observed
        self.tokens = 0  # tokens of all rounds observed
        self.backlog_seconds = 0.0  # of which draft-model catch-ups after rounds it sat out: what probes cost
        self.previous = ""  # the source of the last round observed
        self._seed_draft_step: float | None = None
        self._fixed_curve: list[float] | None = None
        if costs is not None:
            self.batch.seed(costs.target_batch)
            if costs.first_pass is not None:  # what earlier calls found a first pass costs (tuning/record.py)
                first_pass = costs.first_pass
            self._seed_draft_step = costs.draft_step
            if not learn_costs:
                assert len(costs.target_batch) > max_k, "a fixed cost curve must cover batches of 1..max_k + 1"
                self._fixed_curve = list(costs.target_batch)
        if first_pass is not None:  # one sample: the first passes this call times soon outweigh it
            self.batch.first_pass.add(first_pass)

    def continued(self) -> "AdaptivePolicy":
        """A policy for the next call on the same models that goes on from everything this one
        learnt (costs, each proposer's acceptance, back-offs): see chain.py. This one is left as
        it was."""
        following = copy.deepcopy(self)
        following.call_rounds, following.previous = 0, ""  # a new call: its first round runs slow; the draft model was prefilled
        return following

    def record(self, name: str) -> DrafterRecord:
        if name not in self.drafters:
            rec = DrafterRecord(Acceptance(self.max_k, prior_acceptance(name), decay=self.decay), *(WeightedMean(self.decay) for _ in range(3)))
            if self._seed_draft_step is not None and name == "model":
                rec.draft_step.add(self._seed_draft_step)
            self.drafters[name] = rec
        return self.drafters[name]

    def resume(self, earned: Mapping[str, Earned]) -> None:
        """Start each named proposer's acceptance from what earlier calls earned, as carried.py
        scales it; a proposer this call also drafts with then learns on from there."""
        for name, record in earned.items():
            rec, record = self.record(name), carried_record(name, record)
            rec.acceptance.resume(record.hits, record.trials)
            rec.carried_cost = record.draft_cost
            if not self.unproven(name):  # a fair trial, as `choose` counts it: while it loses, a probe per call or so
                rec.backoff = RESUMED_BACKOFF

    def earned(self) -> dict[str, Earned]:
        """Each proposer's acceptance counts now, for the next call (those never tried left out),
        and its draft step in units of T_batch(1) where this run timed both, else the one it was
        resumed with. Not from a T_batch(1) estimated from larger batches: a line through two large
        sizes can put a draft step at several times its cost, and a draft model carried as that
        dear drafts k = 1, whose step its catch-up hides, so no later call would correct it."""
        yardstick = self.curve()[0] if self.batch.measured else None
        return {
            name: Earned(*rec.acceptance.counts(), rec.draft_step.value / yardstick if yardstick and rec.steps_timed else rec.carried_cost)
            for name, rec in self.drafters.items()
            if rec.acceptance.trials.any()
        }

    def plan(self, name: str, max_k: int, curve: Sequence[float], sitting_out: float = 0.0) -> tuple[int, float]:
        """The best k >= 1 for this drafter under the current estimates, and its tokens per second;
        `sitting_out`: what each token of its round costs a draft model that sits it out (see `plans`)."""
        rec = self.record(name)
        if rec.draft_step.value is None or rec.step_is_prior:
            # The prior counts as a fraction of a first sample, so one slow first measurement cannot
            # lock drafting out, while the first real ones soon outweigh it. Until then it is in
            # units of T_batch(1) as it now stands: the estimate from the first drafting rounds runs
            # high, and a prior fixed at it would keep a draft model carried at its measured cost
            # out of a call.
            rec.draft_step = WeightedMean(self.decay)
            rec.draft_step.add(self.unit_draft_cost(name) * curve[0], PRIOR_DRAFT_WEIGHT)
            rec.step_is_prior = True
        # The catch-up replaces the first step; it costs more when it evaluates two tokens.
        overhead = max(rec.catch_up.value - rec.draft_step.value, 0.0) if rec.catch_up.value is not None else 0.0
        return best_draft_length(rec.acceptance.rates(), rec.draft_step.value, curve, max_k, min_k=1, draft_overhead=overhead, per_token=sitting_out)

    def plans(self, sources: Sequence[str], max_k: int, curve: Sequence[float]) -> dict[str, tuple[int, float]]:
        """Each source's plan (k, tokens per second). Where a draft model among them beats a plain
        step, the others' plans also pay what their round costs it (`sitting_out`): it stays in
        use, and catches up later on what they drafted. Where it does not, it sits out anyway."""
        models = {name: self.plan(name, max_k, curve) for name in sources if kind(name) in MODEL_KINDS}
        displaced = self.sitting_out(sources) if models_in_use(models, curve) else 0.0
        return {name: models[name] if name in models else self.plan(name, max_k, curve, displaced) for name in sources}

    def sitting_out(self, sources: Sequence[str]) -> float:
        """What each token of a round drafted by another proposer costs the draft model among
        `sources`, which evaluates the round's tokens in its next catch-up: what its catch-ups
        after rounds it sat out took beyond its usual catch-up, per token sat out
        (backlog_per_token). A lookup or memory round that displaces the draft model thus pays
        for the model's later catch-up, as a round of the model's own pays its catch-up; 0
        without a draft model among the sources. Before this call timed such a catch-up,
        SAT_OUT_PRIOR draft steps: a call is fresh, and a short one chooses most of its lookup and
        memory rounds before it has timed one.
        Examples: 3 ms per token measured -> 3 ms; none timed yet, a draft step of 2 ms -> 0.8 ms."""
        cost = 0.0
        for name in sources:
            if kind(name) in MODEL_KINDS and name in self.drafters:
                rec = self.drafters[name]
                if rec.backlog_per_token.value is not None:
                    cost = max(cost, rec.backlog_per_token.value)
                elif rec.draft_step.value is not None:
                    cost = max(cost, SAT_OUT_PRIOR * rec.draft_step.value)
        return cost

    def costs(self) -> CostCurve | None:
        """The costs as the policy sees them now, for a later call to start from (tuning/record.py):
        T_batch(1..max_k + 1), the draft model's step and what a first pass costs more (each None
        where it has no estimate of it); None before the first round."""
        curve = self.curve()
        if not curve:
            return None
        model = self.drafters.get("model")
        return CostCurve(draft_step=model.draft_step.value if model is not None else None, target_batch=tuple(curve), first_pass=self.batch.first_pass.value)

    def curve(self) -> list[float]:
        """T_batch(1..max_k + 1) as the policy currently sees it (empty before the first round)."""
        return self._fixed_curve or self.batch.curve(self.max_k + 1)

    def choose(self, sources: Sequence[str], budget: int) -> tuple[str | None, int]:
        if not sources or budget <= 0:
            return None, 0
        max_k = min(self.max_k, budget)
        curve = self.curve()
        if not curve:  # nothing measured yet: rounds 1 and 2 draft on the priors
            return self.first_choice(sources, max_k) if self.call_rounds <= 1 else (None, 0)
        curve = self.with_first_passes(curve, budget)
        plans = self.plans(sources, max_k, curve)
        best = max(sources, key=lambda name: plans[name][1])  # first on ties: the preferred one
        # What drafting promises for the rounds to come, which a stale T_batch(1) could misjudge:
        # not this round's, when the end of the token budget caps its k.
        uncapped = plans if max_k == self.max_k else self.plans(sources, self.max_k, curve)
        if self.stale(max(rate for _, rate in uncapped.values()) * curve[0]):
            return None, 0  # a plain target step re-measures T_batch(1)
        chosen = best if plans[best][1] > 1.0 / curve[0] else None
        if chosen is None and self._fixed_curve is None and self.batch.unsettled:
            # Whether to draft at all is judged on what the passes will cost once run again: plain
            # steps time no drafting size, so a size whose only timing is its first pass would look
            # as dear as that pass for good (`BatchCost.settled`). Among k the timings as they
            # stand decide: the next round re-times the size chosen.
            curve = self.with_first_passes(self.batch.settled(self.max_k + 1), budget)
            plans = self.plans(sources, max_k, curve)
            best = max(sources, key=lambda name: plans[name][1])
            chosen = best if plans[best][1] > 1.0 / curve[0] else None
        if chosen is None:  # not before a drafter had a fair trial: one early rejection is noise
            # (The memory's matches are not held to it: their record goes on from call to call, so
            # their trial need not end within one, and on calls that repeat nothing a match from
            # another text would draft below its break-even until it had failed MIN_TRIALS times.)
            chosen = next((name for name in sources if self.unproven(name) and not from_memory(name)), None)
        elif kind(chosen) not in MODEL_KINDS and self.unproven(chosen) and prior_acceptance(chosen) <= MOSTLY_WRONG:
            # Nor is a draft model displaced before its fair trial by a one- or two-token match that has not had one either.
            chosen = next((name for name in sources if kind(name) in MODEL_KINDS and self.unproven(name)), chosen)
        else:
            chosen = self.memory_or_model(chosen, plans, curve)
        probe = None
        for name in sources:
            rec = self.record(name)
            if name == chosen:
                rec.waited, rec.backoff = 0, FIRST_BACKOFF
                continue
            rec.waited += 1
            if self.probing and probe is None and rec.waited > rec.backoff and self.affordable(rec):
                # Its estimate may be stale (the text changed); finding out costs one round.
                probe, rec.waited, rec.backoff = name, 0, min(2 * rec.backoff, MAX_BACKOFF)
        chosen = probe or chosen
        return (chosen, plans[chosen][0]) if chosen is not None else (None, 0)

    def with_first_passes(self, curve: list[float], budget: int) -> list[float]:
        """`curve`, each size this process has not run yet dearer by what a first pass costs beyond
        a later one (BatchCost.first_pass, measured on the sizes run so far), spread over the rounds
        left (the token budget at this policy's tokens per round): among sizes that promise about
        the same, one already run wins, and a call does not wander over a dozen sizes paying
        each one's first pass. Over RPC at a 10 ms round trip a first pass cost some 50 ms more.
        Example: first passes 50 ms dearer, 40 tokens left at 4 tokens per round (10 rounds),
        sizes 1-5 run: T_batch(6..) + 5 ms; where first passes cost nothing more (a CPU), `curve`."""
        extra = self.batch.first_pass_extra
        if extra is None or not self.tokens:
            return curve
        per_round = extra / max(budget * self.rounds / self.tokens, 1.0)
        return [t if n in self.batch.run else t + per_round for n, t in enumerate(curve, start=1)]

    def memory_or_model(self, name: str, plans: Mapping[str, tuple[int, float]], curve: Sequence[float]) -> str:
        """`name`, unless it is a round from the memory that does not beat what the draft model in
        use would spend on the same tokens in its own next round: then that draft model. A
        memory round mostly shortens the model's next round rather than replacing it: the model
        catches up and drafts on, so its catch-up and pass are paid either way, and the memory's
        tokens are worth only the model's marginal cost per token, a draft step and a row of the
        pass (T_batch(k + 1) - T_batch(k) at the model's k, at least 2), not its round's
        average, which carries those fixed costs (see "Rounds the draft model sits out" in the
        module's docstring). By hand: a draft step of 5 ms and rows of 1 ms -> the memory's round must
        make more than 1 / 6 ms = 0.167 tokens per ms, after what it costs the model to sit
        it out."""
        models = models_in_use(plans, curve)
        if not from_memory(name) or not models:
            return name  # not the memory's, or no draft model in use: it competes on its own rate
        model = max(models, key=lambda m: plans[m][1])
        row = min(max(plans[model][0], 2), len(curve) - 1)
        marginal = self.record(model).draft_step.value + max(curve[row] - curve[row - 1], 0.0)
        return name if plans[name][1] > 1.0 / marginal else model

    def unit_draft_cost(self, name: str) -> float:
        """A proposer's draft step in units of T_batch(1) before this run timed one: what an
        earlier call measured (`resume`), else the prior (prior_draft_cost). Example: 'model'
        carried at 0.6 -> 0.6; 'cascade:3-5', 'lookup:3-5' not carried -> 0.05, 0.01."""
        carried = self.record(name).carried_cost
        return carried if carried is not None else prior_draft_cost(name)

    def unproven(self, name: str) -> bool:
        """Whether a proposer has drafted fewer than MIN_TRIALS positions (exponentially weighted,
        in this call or carried into it), so that its estimate is still mostly its prior."""
        return self.record(name).acceptance.trials.sum() < TRIED

    def first_choice(self, sources: Sequence[str], max_k: int) -> tuple[str | None, int]:
        """Rounds 1 and 2, before any timing: the priors alone (with the acceptance seen so far),
        in units of T_batch(1) (they are all relative to it, so its value does not matter).
        Round 1 runs slow and measures no cost, whatever it does, so it may as well draft; round
        2 drafts to measure a first batch size, from which T_batch(1) is estimated. The plans
        are `plans` on that curve, so a lookup or memory round pays what it costs a draft model
        in use to sit it out, and a memory round must beat the model's next token; the draft
        steps they assume (in those units) are not kept, since the rounds measure seconds."""
        unit = [1.0 + PRIOR_BATCH_SLOPE * n for n in range(max_k + 1)]
        records = [self.record(name) for name in sources]
        kept = [(rec.draft_step, rec.step_is_prior) for rec in records]
        try:
            plans = self.plans(sources, max_k, unit)
            best = max(sources, key=lambda name: plans[name][1])
            if plans[best][1] <= 1.0 / unit[0]:
                return None, 0  # no k >= 1 beats a plain step
            best = self.memory_or_model(best, plans, unit)
            return best, plans[best][0]
        finally:
            for rec, (step, is_prior) in zip(records, kept):
                rec.draft_step, rec.step_is_prior = step, is_prior

    def stale(self, advantage: float) -> bool:
        """Whether T_batch(1) should be measured again before this round. `advantage` is what the
        best plan promises over target-only (tokens per second x T_batch(1)). Machine load moves
        T_batch(1), and the line T_batch(n >= 2) is kept fresh by the drafting rounds; a stale
        T_batch(1) can only lead the choice astray when it misjudges that advantage, so it is
        re-measured every REFRESH_ROUNDS rounds while the advantage is below REFRESH_MARGIN, and
        only every STALE_ROUNDS rounds when drafting pays more than that. Example: advantage
        2.5 (a cheap draft model that is mostly right): T_batch(1) would have to have fallen by
        60% for target-only to win, so the plain step, which would cost 1.5 tokens' worth of
        time, waits for STALE_ROUNDS.
        Before the first plain step `advantage` rests on T_batch(1) estimated from the sizes
        seen (`estimates.estimate_step`), which takes two sizes: with one, drafting goes on
        until round 3, and a fourth round that has still seen one size measures T_batch(1)."""
        if not self.learn_costs:
            return False
        if not self.batch.measured and self.batch.sizes() < 2:
            return self.rounds >= 3  # one size: no advantage to judge by yet
        # Never measured, T_batch(1) is as old as the run, and a thin margin calls for it at once.
        refresh = REFRESH_ROUNDS if self.batch.measured else 0
        age = self.rounds - self.yardstick_round
        return age >= (refresh if advantage < REFRESH_MARGIN else STALE_ROUNDS)

    def affordable(self, rec: DrafterRecord) -> bool:
        """Whether a probe's catch-up (its usual one plus the tokens sat out x seconds per token,
        as measured; nothing before that is timed, and a lookup has none) keeps all backlog
        catch-ups within PROBE_BUDGET of the run's time. The first probe after drafting stopped
        paying is always allowed: cheap insurance against an early fallback that noise caused."""
        if rec.backoff == FIRST_BACKOFF:
            return True
        per_token = rec.backlog_per_token.value
        catch_up = (rec.usual_catch_up or 0.0) + per_token * (self.tokens - rec.last_tokens) if per_token is not None else 0.0
        return self.backlog_seconds + catch_up <= PROBE_BUDGET * self.elapsed

    def observe(self, event: Round) -> None:
        self.rounds += 1
        self.call_rounds += 1
        learn = self.learn_costs and self.call_rounds > 1  # the first round after a prefill runs slow
        if learn:
            self.batch.add(event.rows, event.seconds - event.draft_seconds)
            if event.drafted == 0:
                self.yardstick_round = self.rounds
        self.elapsed += event.seconds
        before = self.tokens  # the tokens of the rounds before this one
        self.tokens += event.tokens
        lagging = event.drafter != self.previous  # the drafter sat out the last round: its catch-up clears a backlog
        self.previous = event.drafter
        if not event.drafter:
            return  # a plain target step: nothing drafted, nothing to learn about a drafter
        rec = self.record(event.drafter)
        sat_out, rec.last_tokens = before - rec.last_tokens, self.tokens  # the tokens of the rounds it sat out
        rec.acceptance.add(event.k, event.accepted)
        if learn:
            step = draft_step_seconds(event)
            if step is not None:
                rec.draft_step.add(clamp(step, rec.draft_step.value))
                rec.steps_timed, rec.step_is_prior = rec.steps_timed + 1, False
            usual = rec.usual_catch_up
            if event.draft_catch_up_seconds > 0.0 and lagging:
                self.backlog_seconds += event.draft_catch_up_seconds
                if usual is not None and sat_out > 0:
                    rec.backlog_per_token.add(max(event.draft_catch_up_seconds - usual, 0.0) / sat_out)
            elif event.draft_catch_up_seconds > 0.0:
                rec.catch_up.add(clamp(event.draft_catch_up_seconds, usual))


def models_in_use(plans: Mapping[str, tuple[int, float]], curve: Sequence[float]) -> list[str]:
    """The draft-model proposers among `plans` (name -> (k, tokens per second)) whose plan beats
    a plain step, 1 / T_batch(1): in use, so a round another proposer drafts leaves them behind.
    Example: {"model": (4, 90.0), "lookup:2": (2, 120.0)}, T_batch(1) = 20 ms -> ["model"]."""
    return [name for name, (_, rate) in plans.items() if kind(name) in MODEL_KINDS and rate > 1.0 / curve[0]]


def draft_step_seconds(event: Round) -> float | None:
    """Seconds per drafted token, without the draft model's catch-up, or None when the round cannot tell.

    The catch-up evaluates what the draft model has not seen yet: one or two tokens while
    drafting goes on (it then costs about one step, and k drafts cost about k steps), but a
    backlog after plain target steps or lookup rounds, which says nothing about a step.
    After the catch-up come one decode per proposed token but the last, plus one more when
    the draft stopped early (p-min): that decode produced the row it stopped at.
    """
    if event.draft_catch_up_seconds == 0.0:
        return event.draft_seconds / event.drafted if event.drafted else None  # no model (lookup)
    steps = event.drafted if event.drafted < event.k else event.drafted - 1
    return (event.draft_seconds - event.draft_catch_up_seconds) / steps if steps > 0 else None
