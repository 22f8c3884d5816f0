"""How many tokens to draft each round, and with which drafter: a fixed k, or `auto`.

`FixedPolicy(k)` drafts k tokens every round (fewer only at the end of the token budget).
`AdaptivePolicy` (`--draft-tokens auto`) learns from this run's own rounds:

(a) Early stop. The draft model stops before a token it is unsure of: max q < p_min (max of
    the raw softmax at temperature 0), as llama.cpp's --draft-p-min. `drafting/model.ModelDrafter`
    applies it; the policy holds the threshold (off by default: see DEFAULT_P_MIN).
(b) The cap k, chosen before each round to maximise expected tokens per second,
    E(k) / (k x T_draft + T_batch(k + 1)), from the per-position acceptance a_i and measured
    costs (speedup.best_draft_length: Leviathan et al. 2022, Theorem 3.8, generalised, with a
    worked example; T_batch(n) is the time of a round whose target pass scores n tokens). A
    plain target step (k = 0) yields 1 token in T_batch(1).

What is measured, all from the Round events of earlier rounds:
  - a_i: exponentially weighted hits and trials per position (forgetting factor `decay`
    per round of that drafter), shrunk toward the rate pooled over all positions (itself
    shrunk toward a prior) by a pseudo-count of failures, so a position not tried yet
    inherits it, and one rejection at a deep position does not hold k below it while drafts
    are mostly accepted (see estimates.Acceptance);
  - T_draft: weighted mean of draft seconds per draft step, per drafter, and apart from it
    the draft model's catch-up per round. Before the first measurement it is the prior
    PRIOR_DRAFT_COST (proposers.py) x T_batch(1) (T_batch(1) as estimated at each choice),
    which then counts as a quarter of a measured round only: a prior that lingers misjudges any
    draft model whose cost ratio is far from 0.2, and on a cheap one (issue 13's deepened
    targets, c about 0.1) it made drafting look dear and k short for the first ten rounds;
  - T_batch(n): weighted mean, per batch size n, of the round's seconds minus its draft
    seconds (the target pass plus verification and bookkeeping, i.e. what the round really
    costs); for n >= 2 a line fitted through the sizes seen, its slope pulled toward a prior
    (see estimates.BatchCost). T_batch(1) is the yardstick every choice is compared with, and
    a plain target step measures it; a plain step yields a token but forgoes a round's gain (a
    cheap draft on a flat GPU-like curve makes about 7 tokens in the time of one plain step).
    So until the first one, T_batch(1) is estimated from the drafting rounds
    (`estimates.estimate_step`: the line through two batch sizes or more, at n = 1), and the
    first plain step comes as soon as two sizes have been seen unless drafting then promises
    REFRESH_MARGIN times target-only's speed or more (round 4 at the latest; a machine where
    drafting cannot pay finds out there). Later plain steps re-measure it when the last
    measurement is REFRESH_ROUNDS rounds old (machine load changes it, sometimes from one
    minute to the next), or STALE_ROUNDS rounds old while drafting promises REFRESH_MARGIN
    times target-only or more (only a machine that got that much faster since could turn the
    choice; see `stale`).
    Round 1 runs slow after the prefill and teaches no costs, so rounds 1 and 2 draft on the
    priors alone (k = 3 for a draft model in round 1: a = 0.8, T_draft = 0.2, T_batch(n) = 1 +
    0.05 (n - 1) in units of T_batch(1), which need not be known; round 2 with round 1's
    acceptance); round 2's batch is the first size measured.

Fallback and probes. When no k >= 1 beats target-only, and the drafter has been tried on
MIN_TRIALS positions (one early rejection must not end drafting), the round is a plain target step;
a match from the memory, whose record goes on from call to call, is not held to that trial within
a call and steps aside as soon as its estimate stops paying. After `backoff` such rounds the
drafter is tried once more at its best k >= 1, and the back-off doubles (8, 16, .. 64 rounds)
until drafting pays again. A drafter passed over because another one promised more
(`model+lookup`) is probed the same way. Nor is a draft
model passed over before its fair trial for a match of one or two tokens that has not had one
either (`unproven`; their priors, 0.3 and 0.5, say they are mostly wrong: MOSTLY_WRONG). A
call whose first round of drafts failed at position 1 (a = 0.43 after that one rejection) did
hand its rounds to such matches drafting on their priors (they kept a quarter) while the draft
model, which keeps 90 % of that text, waited for its probe: ten rounds in one call of
benchmarks/memory_workloads.py's `extract` (deepened pair, T = 0). A draft model's
probe first catches up on every token it sat out, which costs per token (on a CPU a good
part of a target step), so spacing probes out does not make them cheaper; instead such
catch-ups (the next one predicted from the tokens sat out) may take at most PROBE_BUDGET of
the run's time, and probing pauses while they would take more (the first probe of each
fallback excepted). Where catch-up is dear this means a draft model that fell back stays
off, while lookup, which has no catch-up, keeps being probed.

A round the draft model sits out. In `model+lookup` (and with the memory) a round that lookup
drafts leaves the draft model behind by that round's tokens, which its next catch-up evaluates.
Where the draft model is in use (its plan beats a plain step), lookup's plans are charged that
cost too, as measured (`sitting_out`: what its catch-ups after rounds it sat out cost beyond its
usual catch-up, per token it sat out; SAT_OUT_PRIOR draft steps per token until the call has
timed one), so that lookup displaces it only where lookup is worth more after paying it. Without
that, lookup's and the memory's rounds looked free of the catch-up they cause. Per token, not per
round: a catch-up grows with the tokens it evaluates (SAT_OUT_PRIOR says how much on the
built-in pair), so a round of many tokens displaces the model at a higher price than a plain
step of one.

A round from the memory. Where a draft model is in use, a round the memory drafts mostly
shortens the model's next round rather than replacing one: the model catches up on its tokens
and drafts on, and pays its catch-up and its pass anyway. So such a round must beat the model's
marginal cost per token (a draft step and a row of the pass), not its round's average rate,
which carries those fixed costs (`memory_or_model`). Weighed by average rates, the
memory's rounds on the built-in pair's `extract` at T = 0.8 (model+lookup, 60 calls) made 139
tokens at 12.2 ms each, plus 3-4 ms of catch-up per token sat out, where a token of the model's
own round cost a draft step (9.6-9.9 ms) and a row (2.6-2.8 ms); the model drafted as many
rounds as without the memory (344 against 343), each shorter, and the memory cost 3 %. Lookup
in the call's own context is not held to this: without the memory it is what the drafter is
(memory off is the yardstick), and weighed so on `edit` it lost copies of the function that
paid (model+lookup 1.33x over target-only against 1.50x). Rounds 1 and 2, which plan on the
priors (`first_choice`), are held to it too, with the same charge for sitting out: held to it
in later rounds only, every memory round of 60 such calls came in rounds 1 and 2 (26 rounds,
42 % of their drafts accepted; carried records or priors made them look good there).

What earlier calls earned. A policy is fresh for each generation, and a short call ends before
it has learnt much; with the drafting memory on (`--draft-cache`, the server's memory) the
engine hands it, at the start, what each proposer earned as the previous call ended
(events.Earned, kept by drafting/memory.py): the hits and trials per position of lookup's
proposals (in the call's context and in the memory) and of the draft model, and the draft
model's step in units of T_batch(1) where a call timed both; at the end it takes them back (a
last round whose kept drafts ended the answer counts no failure after them: decoding/engine.py,
`learnt`). So matches that lost in earlier calls (one-token matches in an extraction's text)
start with their losing record, are not chosen, and are only probed as above, the first time
after RESUMED_BACKOFF rounds, not FIRST_BACKOFF (each class that lost, probed every 8 rounds in
every short call, cost the suite's calls about one round in six); those that won start trusted.
The draft model's record weighs CARRIED_TRIALS trials at most (`carried_record`), fewer than
MIN_TRIALS: how far its drafts go depends on the text, so a call's own rounds soon outweigh it.
Lookup's matches in the call's own context weigh MIN_TRIALS at most, for the same reason (a
class that lost stays given up); the memory's matches are kept whole (`carried_trials`).
A call after calls whose drafts went far starts with long drafts instead of climbing from k = 3
through a short answer's few rounds (the deepened pair's extractions: k = 3, 7, 15, 16 in
every call, so the memory's opening round more often added a round than saved one); one after
calls whose drafts failed gives the draft model up within a few one-token trials instead of
some ten rounds of drafts from the priors (with a draft that never agrees, 1.4 rows per pass
against speculation off's 1.1, at one client of 48-token answers, docs/serving.md). Rounds 1
and 2, which draft before the call has timed anything, take the carried step (`unit_draft_cost`)
in place of the prior 0.2, as do a proposer's plans before its step is timed (in units of
T_batch(1) as it then stands: `plan`): the built-in pair's Q4_1 draft costs 0.45-0.7 of its F32
target's step on a 2-core CPU, and a high record carried with the prior's cost drafted long
there (the suite's prompts with the memory, 0.95x at T = 0). A cascade's call starts from its
guesses' records in the memory alone (drafting/memory.resumed): its other guessed rounds start
from their priors each call, which a carried draft step made look cheap (0.96x on the suite's
prompts) and, scaled to it, dear (0.96x on `edit` at T = 0.8). The server starts each request
of a tenant from the draft model's record at the end of that tenant's last request the same way
(a cascade server's excepted); its costs come from its batches (decoding/batch.py).

Across calls on the same models. A fresh policy spends a short call's first rounds learning:
k = 3 on the priors in round 1, a first batch size in round 2, a plain target step soon after
to measure T_batch(1), and costs from few sizes, which one slow pass can tilt. Where the target
pass is dear and drafts mostly hit (a target over RPC, docs/rpc.md: at a 10 ms round trip a
128-token call lasts about a dozen rounds of k = 16), that warm-up is a good part of the call.
A caller that runs calls on one loaded pair one after another (a library loop,
benchmarks/rpc.py) hands each the previous call's policy `continued()`: costs, acceptance and
back-offs go on from where they were, as if the calls were one run, and only each call's
first round (slow after the prefill) teaches nothing. Acceptance fades by DECAY per round, so a call whose text drafts
worse than the last one's corrects it as a run does when its text changes (k from 16 to 4 in
about ten rounds of drafts that fail at position 3). `TunedPolicies` keeps such chains,
one per setting. (The server starts each request from the pass costs its batches measured
instead: decoding/batch.py.)

Why the output stays exact. Speculative sampling emits, at every position, a token whose
law given everything before it is p, whatever k was, provided two things: whether position
i is drafted is decided before the draft token x_i is drawn, and neither that decision nor
x_i uses this round's verification (the target's coins, its residual draws, or which drafts
it accepts). Here k comes from earlier rounds only, and the early stop reads q_i, never the
token drawn from it. Peeking would bend the law: cutting the draft just before its first
rejection (so every round ends in a bonus) would emit a one-hot draft x with probability
p(x) + (1 - p(x)) p(x) instead of p(x); stopping because the drawn x had a small q(x) makes
the proposal follow q restricted to likely tokens while verify divides by q. (The target's
logits of this round are not even available while drafting: the batch that scores the
drafts computes them.) Timings vary from run to run, so with `auto` at temperature > 0 one
seed can give different text on two runs (k decides which random numbers are drawn); the
distribution is the same. Greedy output is always identical.

Left out: the estimators themselves (estimates.py), the drafters (drafting/) and the loop
that consults the policy (decoding/engine.py).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping, Sequence

from ..errors import BadInput
from ..events import AUTO, DraftPolicy, DraftTokens, Earned, Round
from .estimates import DECAY, PRIOR_BATCH_SLOPE, Acceptance, BatchCost, WeightedMean, clamp
from .proposers import MODEL_KINDS, MOSTLY_WRONG, SAT_OUT_PRIOR, from_memory, kind, prior_acceptance, prior_draft_cost
from .speedup import best_draft_length

if TYPE_CHECKING:
    from .cost_curve import CostCurve


# The early-stop threshold (llama.cpp's default is 0.75). Ours is 0, off, for `auto` and fixed k:
# on the built-in pair the draft is right 94% of the time even where its confidence is below
# 0.2, so every threshold tried (0.2, 0.5) lost speed on both benchmark prompts, and the choice
# of k already follows the measured acceptance. --p-min is there for pairs whose draft knows
# when it is guessing; a stop then counts as a failed position, so k adapts to it.
DEFAULT_P_MIN = 0.0
AUTO_MAX_K = 16  # longest draft `auto` considers

PRIOR_DRAFT_WEIGHT = 0.25  # the prior draft cost counts as a quarter of a measured round
MIN_TRIALS = 6.0  # drafted positions (exponentially weighted) before a drafter may be given up
FIRST_BACKOFF = 8  # a probe after fallback also pays the draft model's catch-up of the plain steps
PROBE_BUDGET = 0.05  # those catch-ups may take at most this share of the run's time
REFRESH_ROUNDS = 16  # a plain step re-measures T_batch(1) when it is older than this many rounds,
REFRESH_MARGIN = 2.0  # unless drafting promises at least this factor over target-only:
STALE_ROUNDS = 64  # then when it is older than this many
MAX_BACKOFF = 64
RESUMED_BACKOFF = 32  # a proposer whose record from earlier calls holds MIN_TRIALS: its first probe, while it loses
CARRIED_TRIALS = 4.0  # a draft model's record handed to the next call weighs this many trials at most (< MIN_TRIALS)
TRIED = MIN_TRIALS - 1e-9  # trials that count as MIN_TRIALS: a record scaled to it may sum a hair below


def draft_policy(draft_tokens: DraftTokens, p_min: float | None = None, costs: "CostCurve | None" = None) -> DraftPolicy:
    """A fresh policy for one generation: 'auto' learns (from `costs` on, when given), an int is fixed. p_min None: the default."""
    if draft_tokens == AUTO:
        return AdaptivePolicy(p_min=DEFAULT_P_MIN if p_min is None else p_min, costs=costs)
    if isinstance(draft_tokens, int) and not isinstance(draft_tokens, bool) and draft_tokens >= 0:
        return FixedPolicy(draft_tokens, p_min=p_min or 0.0)
    raise BadInput(f"draft_tokens must be 'auto' or a number of tokens >= 0, got {draft_tokens!r}")


@dataclass
class FixedPolicy:
    """k tokens from the preferred drafter every round (k = 0: target-only)."""

    k: int
    p_min: float = 0.0
    prefill_draft = True

    def choose(self, sources: Sequence[str], budget: int) -> tuple[str | None, int]:
        k = min(self.k, budget)
        return (sources[0], k) if sources and k > 0 else (None, 0)

    def observe(self, event: Round) -> None:
        pass

    def resume(self, earned: Mapping[str, Earned]) -> None:
        pass  # a fixed k learns nothing, so it neither uses nor hands on a record

    def earned(self) -> dict[str, Earned]:
        return {}


class TunedPolicies:
    """The policies of calls that run one after another on one loaded pair: each `auto` policy
    continues the last one handed out for the same setting (see "Across calls" above), a fixed k
    is as draft_policy makes it. `key` tells settings apart whose acceptance differs (the
    temperature, the drafter). Not for calls that run at once: each would learn into the other's.
    Example: tuned = TunedPolicies(); tuned.policy("auto", key=0.8) twice: the second goes on from
    the first."""

    def __init__(self) -> None:
        self._last: dict[tuple, AdaptivePolicy] = {}

    def policy(self, draft_tokens: DraftTokens, p_min: float | None = None, key: object = None) -> DraftPolicy:
        last = self._last.get((draft_tokens, p_min, key))
        policy = last.continued() if last is not None else draft_policy(draft_tokens, p_min)
        if isinstance(policy, AdaptivePolicy):
            self._last[draft_tokens, p_min, key] = policy
        return policy


def carried_trials(name: str) -> float | None:
    """The most trials a proposer's record weighs when a call starts from it (see "What earlier
    calls earned"); None: as it is. The draft model's, CARRIED_TRIALS. Lookup's matches in the
    call's own context ("lookup:2"), MIN_TRIALS: enough to stay a fair trial, so a class that lost
    stays given up, while how far its drafts went, which the text decides, soon gives way to the
    call's own rounds ("lookup:2" left the suite's `summary`, whose two-token matches ran into a
    passage it copied, at a = 0.8, and drafted k = 8, 6, 5, 5, .. through `list`, where they keep
    two at most). The memory's matches ("lookup:memory:6+") and the cascade's guesses
    ("cascade:memory:3-5", a match's record, not the draft model's): as they are.
    Examples: 'model' -> 4.0, 'lookup:2' -> 6.0, 'lookup:memory:3-5' -> None."""
    if name == "model":
        return CARRIED_TRIALS
    return MIN_TRIALS if kind(name) == "lookup" and not from_memory(name) else None


def carried_record(name: str, earned: Earned) -> Earned:
    """What a call starts a proposer's acceptance from, given its record at the end of an earlier
    call: scaled to `carried_trials` where it holds more. Examples: 'model', hits (0.5, 0.0),
    trials (6.0, 2.0) -> hits (0.25, 0.0), trials (3.0, 1.0); 'lookup:2', hits (1.5, 0.0), trials
    (9.0, 3.0) -> hits (0.75, 0.0), trials (4.5, 1.5); 'lookup:memory:6+': as it is."""
    trials, cap = sum(earned.trials), carried_trials(name)
    if cap is None or trials <= cap:
        return earned
    scale = cap / trials
    return Earned(tuple(h * scale for h in earned.hits), tuple(t * scale for t in earned.trials), earned.draft_cost)


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

    `costs` seeds the cost estimates with a measured curve (cost_curve.measure_cost_curve);
    with learn_costs=False they stay fixed (tests with hand-worked curves).
    """

    prefill_draft = True
    probing = True  # whether a drafter passed over is tried now and then (off while others share the passes: decoding/batch.py)

    def __init__(
        self,
        p_min: float = DEFAULT_P_MIN,
        max_k: int = AUTO_MAX_K,
        *,
        decay: float = DECAY,
        costs: "CostCurve | None" = None,
        learn_costs: bool = True,
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
            self._seed_draft_step = costs.draft_step
            if not learn_costs:
                assert len(costs.target_batch) > max_k, "a fixed cost curve must cover batches of 1..max_k + 1"
                self._fixed_curve = list(costs.target_batch)

    def continued(self) -> "AdaptivePolicy":
        """A policy for the next call on the same models that goes on from everything this one
        learnt (costs, each proposer's acceptance, back-offs): see "Across calls" in the module's
        docstring. This one is left as it was."""
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
        """Start each named proposer's acceptance from what earlier calls earned (see the module's
        docstring); a proposer this call also drafts with then learns on from there."""
        for name, record in earned.items():
            rec, record = self.record(name), carried_record(name, record)
            rec.acceptance.resume(record.hits, record.trials)
            rec.carried_cost = record.draft_cost
            if not self.unproven(name):  # a fair trial, as `choose` counts it: while it loses, a probe per call or so
                rec.backoff = RESUMED_BACKOFF

    def earned(self) -> dict[str, Earned]:
        """Each proposer's acceptance counts now, for the next call (those never tried left out),
        and its draft step in units of T_batch(1) where this run timed both, else the one it was
        resumed with. Not from a T_batch(1) estimated from larger batches: a line through sizes 15
        and 17 put a draft step at 1.15 target steps (measured: 0.17), and a draft model carried
        as that dear drafts k = 1, whose step its catch-up hides, so no later call corrected it."""
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
            # high, and a prior fixed at it kept a draft model carried at its measured cost out of
            # a call (`notes`, model+lookup with the memory: 11.0 ms against 7.4 ms once a plain
            # step had measured T_batch(1); eight rounds went to one-token matches and plain steps).
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
        SAT_OUT_PRIOR draft steps: a call is fresh, and a short one chose most of its lookup and
        memory rounds before it had timed one (built-in pair, T = 0.8, `extract`: 35 of 60; each
        netted 51-64 tokens/s after the catch-up it caused, where the model's rounds made 72).
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
        plans = self.plans(sources, max_k, curve)
        best = max(sources, key=lambda name: plans[name][1])  # first on ties: the preferred one
        # What drafting promises for the rounds to come, which a stale T_batch(1) could misjudge:
        # not this round's, when the end of the token budget caps its k.
        uncapped = plans if max_k == self.max_k else self.plans(sources, self.max_k, curve)
        if self.stale(max(rate for _, rate in uncapped.values()) * curve[0]):
            return None, 0  # a plain target step re-measures T_batch(1)
        chosen = best if plans[best][1] > 1.0 / curve[0] else None
        if chosen is None:  # not before a drafter had a fair trial: one early rejection is noise
            # (The memory's matches are not held to it: their record goes on from call to call, so
            # their trial need not end within one. On calls that repeat nothing, a 3-5-token match
            # in another text drafted round after round below its estimated break-even until it
            # had failed six times, in the suite: 16 rounds, none of 48 drafts kept.)
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

    def memory_or_model(self, name: str, plans: Mapping[str, tuple[int, float]], curve: Sequence[float]) -> str:
        """`name`, unless it is a round from the memory that does not beat what the draft model in
        use would spend on the same tokens in its own next round: then that draft model. A
        memory round mostly shortens the model's next round rather than replacing it: the model
        catches up and drafts on, so its catch-up and pass are paid either way, and the memory's
        tokens are worth only the model's marginal cost per token, a draft step and a row of the
        pass (T_batch(k + 1) - T_batch(k) at the model's k, at least 2), not its round's
        average, which carries those fixed costs (see "A round from the memory" in the module's
        docstring). By hand: a draft step of 5 ms and rows of 1 ms -> the memory's round must
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
