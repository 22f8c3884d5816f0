"""Which rule verifies each round's drafts: the one asked for, or under `--verify auto` the faster one.

Both rules keep the target's distribution exactly (maths/speculative.py). `token` (Leviathan et al.)
decides draft by draft and lazily, from float32 weights where it can; `block` (Sun et al.
2025) decides the block jointly and keeps at least as many drafts in expectation, but
computes dense float64 p rows for all k + 1 positions and q rows for the k drafts, which on a
large vocabulary can cost more time than its extra drafts save. `FixedRule` always answers
the rule asked for; `AutoRule` (`auto`) learns which pays from this run's rounds:

- Where the rules coincide it takes `token`, the cheaper: a deterministic proposal (no q rows:
  lookup, the memory), temperature 0, or a single draft (block verification of one draft is
  the token rule).
- Otherwise (a sampled draft of 2 tokens or more) it takes `block` iff `block_pays`:

      gain x seconds per token > block's verify seconds - token's verify seconds

  all per drafted token. A round that makes E tokens in C seconds under the token rule, and
  under block g more in Delta more seconds, is faster under block iff (C + Delta) / (E + g) < C / E,
  i.e. Delta < g C / E: the extra drafts are worth the run's seconds per token each. Measured:
  the gain from the block rounds, where the rows at hand give both rules' exact expected count
  for the drafts drawn (speculative.expected_kept: no sample of the token rule is needed);
  seconds per token from all rounds (C / E of the token rule, approximated by the run's mix of
  rounds); each rule's verify seconds (Round.rule_seconds: the rule's own computation, after
  the target's batch) in its own rounds. Exponentially weighted (estimates.WeightedMean, about
  the last ten samples), timings held within twice their estimate (estimates.clamp), and the
  first round's timings left out, as the policy leaves them out (it runs slow after a prefill).

  Example: k = 4 drafts of which the token rule keeps 2.0 and block 2.2 in expectation: a gain
  of 0.05 tokens per draft. At 20 ms per token it is worth 0.05 x 20 = 1.0 ms per draft; block
  verifies in 1.5 ms per draft and the token rule in 0.2 ms, 1.3 ms more: `token`. With a
  target twice as slow (40 ms per token) the same gain is worth 2.0 ms: `block`.

- Measuring: the first sampled round is verified by `token`, the next by `block` until block's
  cost is measured, then `token` until its own is, then the rule is chosen each round. The
  rule not chosen verifies one sampled round in PROBE_EVERY + 1, so that its estimate follows
  the run (the text, the machine's load); a probe costs at most the difference between the
  rules for that one round.

Why the output stays exact. Each rule emits the target's law *on average over the drafts
x ~ q*, not for each draft: given the drafts, they keep different prefixes (the example in
speculative.expected_kept: block keeps both drafts, the token rule the first in half the
cases). So the rule of a round must be fixed before this round's draws, as k is (policy.py):
`AutoRule` decides it at the end of the round before (`observe`), from earlier rounds only,
and `choose` looks at this round's proposal only where the two rules coincide, which changes
nothing. Never from this round's target logits, coins or verdict: running both rules and
keeping the one that kept more drafts would favour drafts over the target's own choices
(tests/core/test_block_verify.py shows the law test failing on such a chooser). Timings differ
between runs, so under `auto` at temperature > 0 one seed can give another text (the rule
decides which random numbers are drawn); the distribution is the same.

Left out: the rules themselves and their expected counts (maths/speculative.py), the loop that asks
(decoding/engine.py), how many tokens to draft and who drafts (policy.py).
"""

from __future__ import annotations

from typing import Protocol

from ..events import AUTO, Round
from ..maths.speculative import VERIFIERS
from .estimates import DECAY, WeightedMean, clamp

TOKEN, BLOCK = "token", "block"
PROBE_EVERY = 16  # sampled rounds the rule not chosen sits out before it verifies one again


class RuleChooser(Protocol):
    """What the engine asks each drafting round, between scoring the drafts and verifying them."""

    def choose(self, sampled: bool, drafts: int) -> str:
        """The rule (a speculative.VERIFIERS key) for this round's drafts: `drafts` tokens,
        `sampled` when they were drawn from q rows at temperature > 0."""
        ...

    def observe(self, event: Round) -> None: ...


def rule_chooser(verify: str) -> RuleChooser:
    """A fresh chooser for one generation: 'auto' learns, a rule's name is fixed."""
    if verify == AUTO:
        return AutoRule()
    assert verify in VERIFIERS, f"unknown verify rule {verify!r} (options.parse_verify checks it)"
    return FixedRule(verify)


class FixedRule:
    """The rule asked for, every round (`block` verifies a deterministic or greedy draft as `token`)."""

    def __init__(self, rule: str) -> None:
        self.rule = rule

    def choose(self, sampled: bool, drafts: int) -> str:
        return self.rule

    def observe(self, event: Round) -> None:
        pass


def block_pays(gain: float, seconds_per_token: float, block_seconds: float, token_seconds: float) -> bool:
    """Whether block verification makes tokens faster: the drafts it keeps beyond the token
    rule's (`gain`, per drafted token) are worth more time than its extra verifying (seconds per
    drafted token). Example (the module's): block_pays(0.05, 0.020, 0.0015, 0.0002) -> False
    (1.0 ms < 1.3 ms); block_pays(0.05, 0.040, 0.0015, 0.0002) -> True (2.0 ms > 1.3 ms)."""
    return gain * seconds_per_token > block_seconds - token_seconds


class AutoRule:
    """`--verify auto`: the rule with the more tokens per second in this run (see the module)."""

    def __init__(self, probe_every: int = PROBE_EVERY, decay: float = DECAY) -> None:
        self.probe_every = probe_every
        self.gain = WeightedMean(decay)  # block's expected extra drafts kept, per drafted token
        self.seconds = {TOKEN: WeightedMean(decay), BLOCK: WeightedMean(decay)}  # verify seconds per drafted token
        self.round_seconds, self.round_tokens = WeightedMean(decay), WeightedMean(decay)
        self.since = {TOKEN: 0, BLOCK: 0}  # sampled rounds since each rule last verified one
        self.planned = TOKEN  # the rule of the next sampled round, decided from the rounds before it
        self.rounds = 0  # rounds observed
        self._chose = False  # whether this round's rule was the planned one (a sampled draft of 2 or more)

    def choose(self, sampled: bool, drafts: int) -> str:
        self._chose = sampled and drafts >= 2
        return self.planned if self._chose else TOKEN  # where the rules coincide: the cheaper

    @property
    def seconds_per_token(self) -> float | None:
        seconds, tokens = self.round_seconds.value, self.round_tokens.value
        return seconds / tokens if seconds is not None and tokens else None

    def observe(self, event: Round) -> None:
        self.rounds += 1
        timed = self.rounds > 1  # the first round after a prefill runs slow (adaptive.py)
        if timed:
            self.round_seconds.add(event.seconds)
            self.round_tokens.add(event.tokens)
        chose, self._chose = self._chose, False
        if not chose:
            return
        if event.block_gain is not None:
            self.gain.add(event.block_gain / event.drafted)
        if timed:
            measured = self.seconds[event.rule]
            measured.add(clamp(event.rule_seconds / event.drafted, measured.value))
        for rule in self.since:
            self.since[rule] = 0 if rule == event.rule else self.since[rule] + 1
        self.planned = self.decide()

    def decide(self) -> str:
        """The rule for the next sampled round, from the estimates (and the probe schedule)."""
        if self.seconds[BLOCK].value is None or self.gain.value is None:
            return BLOCK
        if self.seconds[TOKEN].value is None or self.seconds_per_token is None:
            return TOKEN
        best = BLOCK if block_pays(self.gain.value, self.seconds_per_token, self.seconds[BLOCK].value, self.seconds[TOKEN].value) else TOKEN
        other = TOKEN if best == BLOCK else BLOCK
        return other if self.since[other] >= self.probe_every else best
