"""`specdec simulate`: speculative decoding's acceptance model played round by round, no models.

Leviathan et al. 2022 (section 3.1) model each draft token as accepted independently with
probability alpha. A round drafts k tokens, keeps the first n of them, where n counts the
successes before the first failure (n = k if there is none), and always adds one token from
the target: the correction after a rejection, or the bonus when all k were kept. So one big-
model step yields n + 1 tokens, on average (stats.expected_tokens_per_round)

    E = (1 - alpha^(k+1)) / (1 - alpha)          e.g. alpha = 0.7, k = 4 -> E = 2.77

    rounds = list(simulate(0.7, 4, rounds=3, rng=np.random.default_rng(0)))
    [r.accepted for r in rounds], [r.tokens for r in rounds]    # three rounds of n and n + 1

`play` prints one line per round in the colours of `specdec run` (green accepted drafts,
yellow correction, cyan bonus, the rejected draft struck out, unchecked drafts as dots),
with the running big-model steps, tokens and tokens per step beside the expected value. On
a terminal each round is animated: the drafts appear one by one, then the verdict.

Left out: real models, timing and speed-ups (the cost side lives in stats.predicted_speedup).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterator, TextIO

import numpy as np

from ..events import Source
from ..tuning.speedup import expected_tokens_per_round
from .render import SGR, SGR_REJECTED, paint

ACCEPTED, REJECTED, UNCHECKED, TARGET, PROPOSED = "■", "✗", "·", "■", "□"
SGR_UNCHECKED = "2"  # dim


@dataclass(frozen=True)
class SimRound:
    k: int
    accepted: int  # n: drafts kept, 0..k

    @property
    def tokens(self) -> int:
        """Tokens this big-model step produced: the kept drafts and the target's own token."""
        return self.accepted + 1

    @property
    def bonus(self) -> bool:
        return self.accepted == self.k


def simulate(alpha: float, k: int, rounds: int, rng: np.random.Generator) -> Iterator[SimRound]:
    """Rounds of the i.i.d. model: draft i survives with probability alpha, given drafts 1..i-1 survived."""
    assert 0.0 <= alpha <= 1.0 and k >= 1
    for _ in range(rounds):
        trials = rng.random(k) < alpha
        yield SimRound(k, k if trials.all() else int(np.argmin(trials)))  # argmin: the first failure


def cells(r: SimRound, color: bool) -> str:
    """The drafts and the target's token of one round, e.g. '■ ■ ✗ · → ■' (2 kept, a correction)."""
    drafts = [paint(ACCEPTED, SGR[Source.DRAFT], color)] * r.accepted
    if not r.bonus:
        drafts.append(paint(REJECTED, SGR_REJECTED, color))
        drafts += [paint(UNCHECKED, SGR_UNCHECKED, color)] * (r.k - r.accepted - 1)
    target = paint(TARGET, SGR[Source.BONUS if r.bonus else Source.CORRECTION], color)
    return " ".join(drafts) + " → " + target


@dataclass
class Tally:
    steps: int = 0
    tokens: int = 0

    @property
    def tokens_per_step(self) -> float:
        return self.tokens / self.steps if self.steps else 0.0


def play(
    alpha: float,
    k: int,
    rounds: int,
    seed: int,
    out: TextIO,
    *,
    color: bool = False,
    animate: bool = False,
    delay: float = 0.08,
) -> Tally:
    """Print the simulation to `out`, one line per round, and a summary; return the totals."""
    expected = expected_tokens_per_round(alpha, k)
    width = len(str(rounds))
    out.write(
        f"i.i.d. acceptance: each draft token kept with probability alpha = {alpha:g}, k = {k} drafts per round\n"
        f"expected tokens per big-model step (1 - alpha^(k+1)) / (1 - alpha) = {expected:.2f}\n"
    )
    if color:
        out.write(
            f"{paint(ACCEPTED, SGR[Source.DRAFT])} accepted draft  {paint(REJECTED, SGR_REJECTED)} rejected draft  "
            f"{paint(UNCHECKED, SGR_UNCHECKED)} never checked  {paint(TARGET, SGR[Source.CORRECTION])} correction  "
            f"{paint(TARGET, SGR[Source.BONUS])} bonus\n"
        )
    tally = Tally()
    rng = np.random.default_rng(seed)
    try:
        for i, r in enumerate(simulate(alpha, k, rounds, rng), start=1):
            head = f"round {i:>{width}}  "
            if animate:
                for j in range(1, k + 1):  # propose: the drafts appear one by one
                    out.write("\r" + head + " ".join([paint(PROPOSED, SGR_UNCHECKED, color)] * j))
                    out.flush()
                    time.sleep(delay)
                time.sleep(delay)
                out.write("\r\x1b[2K")  # verify: the line is redrawn with the verdict
            tally.steps += 1
            tally.tokens += r.tokens
            verdict = f"{r.accepted} kept + {'bonus' if r.bonus else 'correction'}"
            out.write(
                f"{head}{cells(r, color)}  {verdict:<{len(str(k)) + 18}}  steps {tally.steps:>{width}}  "
                f"tokens {tally.tokens:>{width + len(str(k))}}  tokens/step {tally.tokens_per_step:.2f} (expected {expected:.2f})\n"
            )
            out.flush()
    except KeyboardInterrupt:
        out.write("\n")
        raise
    out.write(
        f"after {tally.steps} rounds: {tally.steps} big-model steps made {tally.tokens} tokens, "
        f"{tally.tokens_per_step:.2f} tokens per step (expected {expected:.2f}); "
        f"target-only decoding needs {tally.tokens} steps for them. seed {seed}\n"
    )
    return tally
