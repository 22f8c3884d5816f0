"""The values the engine's stream carries, shared by every reader of it: one module, no behaviour.

`Engine.generate` yields Prefill, then per round any Rejected draft, the Token events it
emits and one Round, then Finished. decoding/stats.py folds them into figures, cli/render.py draws them,
tests and library users read them. Example, one round with k = 3 where the target took two
drafts and corrected the third: Rejected(id, text, 3), Token(.., DRAFT, 1), Token(.., DRAFT, 2),
Token(.., CORRECTION, 3), Round(drafted=3, accepted=2, ..). Under a constraint, a token the grammar
forced comes as Token(.., FORCED, i) and is counted in Round.forced, not in drafted or accepted.

Also here, as the engine and its policy share them: `DraftPolicy`, the interface of a
draft-length policy (implemented in tuning/policy.py), `DraftTokens`, a fixed k or AUTO, and
`Earned`, what one proposer's drafts earned in earlier calls (the drafting memory keeps it).

Left out: producing them (decoding/engine.py), folding them (decoding/stats.py), showing them (cli/render.py).
This module imports nothing of ours, so every layer may import it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Mapping, Protocol, Sequence, Union


class Source(str, enum.Enum):
    """Where an emitted token came from."""

    DRAFT = "draft"  # a draft token the target accepted
    CORRECTION = "correction"  # the target's token after it rejected a draft
    BONUS = "bonus"  # the target's extra token after every draft was accepted
    TARGET = "target"  # a plain target step (target-only decoding, or nothing was drafted)
    FORCED = "forced"  # the one token a constraint allowed at its position (grammar/guide.py): a free draft, or a plain step's only choice


@dataclass(frozen=True)
class Prefill:
    prompt_tokens: int
    seconds: float


@dataclass(frozen=True)
class Logprobs:
    """The target's log-probability of an emitted token, and of the likeliest alternatives
    (GenerationConfig.logprobs asks for them; see maths/filters.log_probabilities for which law)."""

    logprob: float
    bytes: bytes  # the token's own bytes (its `text` may be "" mid UTF-8 sequence)
    top: tuple[tuple[bytes, float], ...] = ()  # (bytes, logprob), likeliest first


@dataclass(frozen=True)
class Token:
    id: int
    text: str  # the text this token releases (may be "" mid UTF-8 sequence, or cut by a stop string)
    source: Source
    position: int  # 1..k for draft tokens, k_accepted + 1 for the target's token
    logprobs: Logprobs | None = None


@dataclass(frozen=True)
class Rejected:
    """A draft token the target turned down (shown by --show-rejected)."""

    id: int
    text: str
    position: int


@dataclass(frozen=True)
class Round:
    drafted: int
    accepted: int
    draft_seconds: float  # the drafter's propose call
    draft_decode_seconds: float  # of which inside the draft model's decode calls
    target_seconds: float  # the target's batch decode (the stats table's "verify" time)
    seconds: float  # the whole round
    drafter: str = ""  # the proposer that drafted ("model", "lookup:3-5", see drafting/); "" for a plain target step
    draft_catch_up_seconds: float = 0.0  # of draft_seconds, the draft model catching up with the context
    k: int = 0  # the most tokens the policy allowed this round (a drafter may propose fewer)
    rule: str = ""  # the rule that verified the drafts ("token", "block": maths/speculative.VERIFIERS); "" for a plain step
    rule_seconds: float = 0.0  # that rule's own computation, after the target's batch
    block_gain: float | None = None  # block rounds: drafts kept beyond the token rule's, in expectation (maths/speculative.expected_kept)
    sequences: int = 1  # sequences whose rows shared this round's target pass (decoding/batch.py; 1 alone)
    forced: int = 0  # tokens the round emitted that a constraint forced (Source.FORCED); never in drafted or accepted
    grammar_seconds: float = 0.0  # computing the constraint's masks (grammar/guide.py), within draft_seconds and seconds
    forced_rows: int = 0  # forced tokens among the pass's drafts (kept or not): rows the target scored beyond drafted + 1
    forced_last: bool = False  # the round's last token (the target's own) was forced, and is counted in `forced`

    @property
    def rows(self) -> int:
        """The rows the round's target pass scored: its drafts, forced ones included, and one more."""
        return self.drafted + self.forced_rows + 1

    @property
    def tokens(self) -> int:
        """The tokens the round gave (before an end, a stop string or the budget cut them): the drafts
        kept, the forced ones, and the target's own where it was not forced. Example: 3 kept and 2
        forced, the last one the target's -> 5; nothing forced -> accepted + 1."""
        return self.accepted + self.forced + (0 if self.forced_last else 1)


@dataclass(frozen=True)
class Finished:
    reason: str  # "eog", "max_tokens", "stop", "context_full"
    tokens: tuple[int, ...]
    text: str


Event = Union[Prefill, Token, Rejected, Round, Finished]


AUTO = "auto"
DraftTokens = Union[int, str]  # a fixed k, or AUTO (tuning/adaptive.AdaptivePolicy)
MAX_DRAFT_TOKENS = 64  # the longest draft anything may ask for: -k, a catalogue pair's k, a memory recall


@dataclass(frozen=True)
class Earned:
    """What one proposer's drafts earned: exponentially weighted hits and trials per draft position
    (the evidence behind a_1, a_2, .. in tuning/estimates.Acceptance), as the policy had them when
    a call ended. The drafting memory (drafting/memory.py) keeps one per proposer name, so that the
    next call starts from them. Example: hits (0.9, 0.0), trials (1.9, 0.9): position 1 gave a
    token in about half its trials, position 2 in none. `draft_cost`: its draft step as measured,
    in units of a plain target step (T_draft / T_batch(1)), None where a call measured none; the
    next call chooses its first rounds' k from it instead of the prior (0.2 for a draft model)."""

    hits: tuple[float, ...]
    trials: tuple[float, ...]
    draft_cost: float | None = None


class DraftPolicy(Protocol):
    """What the engine asks of a draft-length policy each round (tuning/policy.py has them; the caller
    builds one and hands it to Engine.generate)."""

    p_min: float  # the draft model's early-stop threshold (0: off)
    prefill_draft: bool  # whether the engine evaluates the prompt in the draft model up front (else the drafter catches up when it first drafts)

    def resume(self, earned: Mapping[str, Earned]) -> None:
        """Start from what earlier calls earned, by proposer name (a policy that does not learn ignores it)."""
        ...

    def earned(self) -> dict[str, Earned]:
        """What each proposer earned so far, by name, to hand to the next call (empty: nothing learnt)."""
        ...

    def choose(self, sources: Sequence[str], budget: int) -> tuple[str | None, int]:
        """Which of the drafters able to propose (names, preferred first) drafts, and at most
        how many tokens (at most `budget`); (None, 0) means a plain target step."""
        ...

    def observe(self, event: Round) -> None: ...
