"""What `auto` (adaptive.AdaptivePolicy) assumes about a proposer before it has measured it.

A proposer is named by the drafter behind it and, for lookup, by its match's length class
("model", "lookup:3-5", "lookup:memory:6+", "cascade:2"; drafting/lookup.match_class): `kind`
reads the drafter from the name, MODEL_KINDS says which kinds run the draft model, and the
priors give each one's acceptance and draft step until its own rounds have been timed, and
MIN_TRIALS says when those rounds are a fair trial.

    prior_acceptance("lookup:memory:6+")   # -> 0.9: a long match repeats a passage
    prior_draft_cost("cascade:3-5")        # -> 0.05 of a target step

Left out: how much a prior weighs against what is measured (adaptive.py), what earlier calls
carry in its place (carried.py); the measurements themselves (estimates.py).
"""

from __future__ import annotations

from ..drafting.lookup import MEMORY_CLASS

# Acceptance before anything is measured. Lookup by match length: a one-token match is mostly
# wrong, a match of six or more is a passage being repeated; a memory match that one earlier
# call alone continued ("lookup:memory:once:6+") is about as likely right as not, where one that
# several earlier calls witness is mostly right. Read from the built-in pair's rounds on the
# workloads of docs/benchmarks.md, "Drafters on repetitive workloads, and the drafting memory".
PRIOR_ACCEPTANCE = {"model": 0.8, "lookup:1": 0.3, "lookup:2": 0.5, "lookup:3-5": 0.7, "lookup:6+": 0.9,
                    "lookup:memory:3-5": 0.7, "lookup:memory:6+": 0.9, "lookup:memory:once:3-5": 0.6, "lookup:memory:once:6+": 0.6,
                    "lookup:memory:16+": 0.95, "cascade:1": 0.8, "cascade:2": 0.8, "cascade:3-5": 0.8, "cascade:6+": 0.8}  # fmt: skip
MOSTLY_WRONG = 0.5  # a prior at or below this (lookup:1, lookup:2) does not displace an unproven draft model (`choose`)
MIN_TRIALS = 6.0  # a fair trial: drafted positions (exponentially weighted) before a proposer may be given up
PRIOR_DRAFT_COST = {"model": 0.2, "lookup": 0.01, "cascade": 0.05}  # T_draft / T_batch(1) before measuring
MEMORY_LOOKUP = MEMORY_CLASS + ":"  # lookup's proposals from the memory (earlier calls), not from the call's own context
MODEL_KINDS = ("model", "cascade")  # proposers whose drafts take draft-model passes (and catch up after rounds they sat out)
# What a token the draft model sat out adds to its next catch-up, in draft steps, until a call
# timed one (`sitting_out`): a catch-up evaluates every token sat out, at a fraction of a step
# each. Read from model+lookup's rounds on the same workloads.
SAT_OUT_PRIOR = 0.4


def prior_acceptance(name: str) -> float:
    """A proposer's acceptance before anything is measured: its own entry, else its kind's, else
    0.6. Example: 'lookup:2' -> 0.5, 'model' -> 0.8, 'cascade:memory:3-5' -> 0.6."""
    return PRIOR_ACCEPTANCE.get(name, PRIOR_ACCEPTANCE.get(kind(name), 0.6))


def prior_draft_cost(name: str) -> float:
    """A proposer's draft step before one is measured, in units of T_batch(1): its kind's entry,
    else 0.2. Example: 'lookup:3-5' -> 0.01, 'cascade:memory:6+' -> 0.05, 'model' -> 0.2."""
    return PRIOR_DRAFT_COST.get(kind(name), 0.2)


def from_memory(name: str) -> bool:
    """Whether a proposer is lookup's match in the memory (an earlier call's text), not in the
    call's own context. Examples: 'lookup:memory:6+' -> True; 'lookup:6+', 'cascade:memory:3-5' -> False."""
    return name.startswith(MEMORY_LOOKUP)


def kind(name: str) -> str:
    """The drafter behind a proposer's name: 'lookup:3-5' -> 'lookup', 'model' -> 'model'."""
    return name.split(":", 1)[0]
