"""What earlier calls earned: the record a call starts each proposer from, scaled to a trial.

A policy is fresh for each generation, and a short call ends before it has learnt much. With the
drafting memory on (`--draft-cache`, the server's memory) the engine hands the policy, at the
start, what each proposer earned as the previous call ended (events.Earned, kept by
drafting/memory.py): hits and trials per draft position, and the draft model's step in units of
T_batch(1) where a call timed both; at the end it takes them back (decoding/engine.py, `learnt`).
So matches that lost in earlier calls start with their losing record and are only probed, the
first time after adaptive.RESUMED_BACKOFF rounds; those that won start trusted; and a call after
calls whose drafts went far drafts long from its first round instead of climbing from k = 3.

How far a draft model's drafts, or those of a match in the call's own context, go depends on the
text, so their record is scaled down to a few trials and the call's own rounds soon outweigh it;
the memory's matches and a cascade's guesses are kept whole:

    carried_record("model", Earned(hits=(0.5, 0.0), trials=(6.0, 2.0)))      # -> hits (0.25, 0.0), trials (3.0, 1.0)
    carried_record("lookup:2", Earned(hits=(1.5, 0.0), trials=(9.0, 3.0)))   # -> hits (0.75, 0.0), trials (4.5, 1.5)
    carried_record("lookup:memory:6+", earned)                               # -> earned, as it is

Rounds 1 and 2, which draft before the call has timed anything, take the carried draft step in
place of the prior (adaptive.AdaptivePolicy.unit_draft_cost). The server starts each request of a
tenant from the record at the end of that tenant's last request the same way.

Left out: keeping the records between calls (drafting/memory.py), learning on from them (adaptive.py).
"""

from __future__ import annotations

from ..events import Earned
from .proposers import MIN_TRIALS, from_memory, kind

CARRIED_TRIALS = 4.0  # the most trials a draft model's carried record weighs: fewer than MIN_TRIALS, so a call still gives it a fair trial


def carried_trials(name: str) -> float | None:
    """The most trials a proposer's record weighs when a call starts from it; None: as it is. The
    draft model's, CARRIED_TRIALS. Lookup's matches in the call's own context ("lookup:2"),
    MIN_TRIALS: enough to stay a fair trial, so a class that lost stays given up, while how far
    its drafts went, which the text decides, soon gives way to the call's own rounds. The
    memory's matches ("lookup:memory:6+") and the cascade's guesses ("cascade:memory:3-5", a
    match's record, not the draft model's): as they are.
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
