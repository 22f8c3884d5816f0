"""The clock rounds are timed by: wall time, except for a sequence that shares its passes.

Alone, a generation's rounds are timed by the wall clock (`now` is time.perf_counter). In a
shared batch (decoding/batch.py) a sequence's generation spends most of its wall time waiting:
for the other sequences' Python work, and for passes that hold their rows too. What its policy
must weigh is not that, but what its own rows cost the batch. So each time a sequence comes
back from a shared pass, the batcher `charge`s it: the wait it sat through is taken off this
generation's clock (a context variable: each generation the scheduler runs has a context of its
own), and its share of the passes (Batcher's rule: the fixed cost split evenly, each row at the
marginal cost of a row) is put on. The engine and the drafters read `now`, so
their Round figures, and the policy that learns from them, see the sequence's own cost.

    start = now(); ...; charge(waited=0.030, charged=0.012)   # now() - start is 18 ms less

Left out: how a share is computed (decoding/batch.py), the wall time a user is shown
(decoding/consume.py reads time.perf_counter itself).
"""

from __future__ import annotations

import contextvars
import time

_offset: contextvars.ContextVar[float] = contextvars.ContextVar("specdec_clock_offset", default=0.0)


def now() -> float:
    """Seconds on this generation's clock: perf_counter, moved by what `charge` took off and put on."""
    return time.perf_counter() + _offset.get()


def charge(waited: float, charged: float) -> None:
    """On this generation's clock, replace `waited` seconds of wall time by `charged` seconds."""
    _offset.set(_offset.get() + charged - waited)
