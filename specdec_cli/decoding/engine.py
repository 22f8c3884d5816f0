"""The speculative loop: draft, score in one target batch, verify, roll back, yield events.

One round, with the context c (prompt plus output so far) and the target's KV cache
holding all of c except its last token:

    0. plan      the draft-length policy picks who drafts and the cap k (k = 0: a plain
                 target step), from earlier rounds only (see tuning/policy.py)
    1. draft     the drafter proposes d1..dk (and the q it drew each from)
    2. score     the target evaluates [c[-1], d1..dk] in ONE batch: k + 1 rows of logits
    3. verify    speculative sampling keeps d1..dn and adds one target token t
                 (a correction after a rejection, or the bonus after n == k), by the rule
                 GenerationConfig.verify names, or under "auto" the one rule_choice.AutoRule
                 chose from earlier rounds
    4. roll back both KV caches to c + d1..dn (in a `finally`), append d1..dn, t to c

Every round emits at least one token (the target's t), so generation always advances.
`generate` yields typed events and never prints: `run`, `bench`, tests and library users
read the same stream. Target-only decoding (the baseline of every speed claim) is the same
loop with no drafter, so both use the same backend, sampling and stopping code.

    engine = Engine(target, ModelDrafter(draft))
    for event in engine.generate(prompt_ids, GenerationConfig(max_tokens=64), draft_policy(8)):
        ...

Under a constraint (GenerationConfig.grammar: a JSON schema, a grammar; grammar/) each
sequence has a `Guide`: the drafter masks q at each position it drafts (q' = normalise(q ·
mask)), the target's rows are masked by the same masks (p'), so verify applies the same rule
to p' and q' and the output is exactly target-only sampling from p' (maths/masking.py); the
matcher rolls back to the last kept token in `settle`. A position whose mask admits one token
alone is forced: it joins the round as a draft no drafter proposed, which p' cannot reject
(p'(x) = q'(x) = 1), so it costs a target row and never a draft step or a rejection; it is
emitted as Source.FORCED and counted in Round.forced, not in drafted or accepted (the policy
learns from the drafter's own tokens). A target-only engine (no drafter) decodes them one a pass.

The caller hands `generate` its policy (tuning/policy.py: a fixed k, or `auto`), so this module
never imports tuning/policy.py. An engine given `earned` (the drafting memory's record of what
its proposals earned in earlier calls, drafting/memory.py) starts the policy from what it keeps
for this drafter (`resumed`) and writes back what the policy learnt of them, when the generation
ends however it ends. Stages pass named values: `speculative_round` returns a `Scored`,
`decode_round` a `Decoded` (its `Emission`s, the rejected draft, the `Round`).

Left out: printing (cli/render.py), statistics (stats.py), how k is chosen (tuning/policy.py), which
rule verifies (tuning/rule_choice.py), who proposes (drafting/), the event types (events.py), stop
strings and UTF-8 (text_stream.py), timing the cost curve (tuning/cost_curve.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Generator, Iterator, MutableMapping, NamedTuple, Sequence

import numpy as np

from .. import clock
from ..causal_model import CausalModel, catch_up, common_prefix
from ..drafting.interface import Drafter, Proposal, Proposer
from ..drafting.memory import recalled, resumed
from ..errors import ContextOverflow
from ..events import DraftPolicy, Earned, Event, Finished, Logprobs, Prefill, Rejected, Round, Source, Token
from ..grammar.compile import Grammar
from ..grammar.guide import Guide
from ..maths.masking import mask_rows
from ..maths.filters import log_probabilities
from ..maths.sampling import SamplingParams
from ..maths.speculative import DEFAULT_VERIFY, VERIFIERS, sample_row
from ..tuning.rule_choice import RuleChooser, rule_chooser
from .text_stream import TextStream


@dataclass(frozen=True)
class GenerationConfig:
    """What to generate and how to sample; how many tokens to draft is the policy's business."""

    max_tokens: int = 256
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int = 0
    stop: tuple[str, ...] = ()
    logprobs: int | None = None  # None: none; n: each token's log p and its n likeliest alternatives (Token.logprobs)
    verify: str = DEFAULT_VERIFY  # the rule that keeps drafts: "token", "block" (speculative.VERIFIERS) or "auto" (tuning/rule_choice.py)
    grammar: Grammar | None = None  # a constraint on the output (grammar/compile.py); None: free text


@dataclass(frozen=True)
class Scored:
    """One speculative round up to verification: the proposal, the drafts kept, the target's token."""

    proposal: Proposal
    accepted: int  # d1..d_accepted were kept
    token: int  # the target's token after them: a correction, or the bonus when all were kept
    draft_seconds: float
    target_seconds: float  # the target's batch decode
    logprobs: tuple[Logprobs, ...] = ()  # of the drafts kept and the target's token, when asked for
    rule: str = ""  # the rule that verified the drafts; "" for a plain step
    rule_seconds: float = 0.0  # the rule's own computation
    block_gain: float | None = None  # Verdict.block_gain
    forced: tuple[bool, ...] = ()  # per position of the drafts and the target's token: whether the constraint forced it


class Emission(NamedTuple):
    """A token a round hands to the stream, before end-of-generation and stop strings are applied."""

    id: int
    source: Source
    position: int
    logprobs: Logprobs | None = None


@dataclass(frozen=True)
class Decoded:
    """A whole round: the tokens to emit, the rejected draft if any, and the round's figures."""

    emitted: list[Emission]
    rejected: Rejected | None
    figures: Round


class Engine:
    """Speculative decoding of one target model with one drafter (or none: target-only)."""

    def __init__(
        self,
        target: CausalModel,
        drafter: Drafter | None = None,
        *,
        piece=None,
        is_end=None,
        vocab_limit: int | None = None,
        earned: MutableMapping[str, Earned] | None = None,
        grammar_tokenizer=None,
    ) -> None:
        self.target = target
        # The target's vocabulary as llguidance reads it (llama/model.LlamaModel.grammar_tokenizer), asked for only under a constraint
        self.grammar_tokenizer = grammar_tokenizer or (lambda: target.grammar_tokenizer)
        self.drafter = drafter
        self.earned = earned  # lookup's record, kept by the memory across calls (DraftMemory.earned); None: each call starts afresh
        self.piece = piece or target.piece
        self.is_end = is_end or target.is_end_of_generation
        self.vocab_limit = vocab_limit or target.n_vocab

    # -- stages -----------------------------------------------------------------------

    def prefill(self, prompt: Sequence[int], max_tokens: int = 0, draft: bool = True) -> Prefill:
        """Evaluate all of the prompt but its last token in both models (the last one opens round 1;
        with draft=False the target only: a draft model catches up when it first drafts, and the
        drafter takes in what needs no model pass, lookup's index and the prompt's length).

        A prompt that does not fit raises ContextOverflow suggesting a --ctx with room for the
        prompt and `max_tokens` more.
        """
        context_room(len(prompt), self.target.n_ctx, f"pass --ctx {_next_ctx(len(prompt) + max(max_tokens, 1))}")
        start = clock.now()
        head = list(prompt[:-1])
        catch_up(self.target, head, 0)
        if self.drafter is not None:
            self.drafter.prefill(head, evaluate=draft)
        return Prefill(prompt_tokens=len(prompt), seconds=clock.now() - start)

    def target_step(
        self, context: list[int], params: SamplingParams, rng: np.random.Generator, logprobs: int | None = None, guide: Guide | None = None
    ) -> tuple[int, tuple[Logprobs, ...]]:
        """One plain decoding step of the target: the baseline's whole loop body (and the token's
        logprobs if asked); under a constraint, from the masked row (p'), and the guide takes the token."""
        logits = catch_up(self.target, context)[:, : self.vocab_limit]
        if guide is not None:
            mask_rows(logits, guide.masks())  # in place: the rows are read once, here
        token = sample_row(logits[0], params, rng)
        if guide is not None:
            guide.settle(0, token)
        return token, self.token_logprobs(logits, [token], params, logprobs)

    def token_logprobs(self, rows: np.ndarray, tokens: Sequence[int], params: SamplingParams, n_top: int | None) -> tuple[Logprobs, ...]:
        """The target's log p of each token under its row's law (maths/filters.log_probabilities), with the
        n_top likeliest alternatives; () when not asked for. Row i scored tokens[i]."""
        if n_top is None:
            return ()
        out = []
        for row, x in zip(rows, tokens):
            lp = log_probabilities(row[: self.vocab_limit], params)
            top = np.argpartition(-lp, n_top)[:n_top] if 0 < n_top < len(lp) else np.arange(len(lp) if n_top else 0)
            top = top[np.argsort(-lp[top], kind="stable")]
            out.append(Logprobs(float(lp[x]), self.piece(x), tuple((self.piece(int(i)), float(lp[i])) for i in top)))
        return tuple(out)

    def plan(self, context: list[int], budget: int, policy: DraftPolicy) -> tuple[Proposer | None, int]:
        """Who drafts this round and at most how many tokens; (None, 0) is a plain target step."""
        candidates = self.drafter.candidates(context) if self.drafter is not None else []
        name, k = policy.choose([d.name for d in candidates], budget)
        chosen = next((d for d in candidates if d.name == name), None)
        return (chosen, k) if chosen is not None and k > 0 else (None, 0)

    def speculative_round(
        self, context: list[int], drafter: Proposer | None, k: int, p_min: float, config: GenerationConfig, rng: np.random.Generator,
        rules: RuleChooser, guide: Guide | None = None,
    ) -> Scored:  # fmt: skip
        """Draft up to k tokens (and, under a constraint, the forced tokens: `force`), score them in
        one target batch, verify by the rule `rules` gives (on the masked rows under a constraint).

        On return the target's cache holds context + accepted drafts, whatever happened inside.
        """
        params = config.sampling
        t0 = clock.now()
        proposal = drafter.propose(context, k, params, rng, p_min, guide) if drafter is not None else Proposal()
        if guide is not None:
            self.force(proposal, guide)
        t1 = clock.now()
        drafts = proposal.tokens
        accepted = 0  # what survives in the target's cache if anything below raises
        try:
            logits = catch_up(self.target, list(context) + drafts, len(drafts) + 1)[:, : self.vocab_limit]
            t2 = clock.now()
            forced = ()
            if guide is not None:
                masks = guide.masks()
                forced = tuple(guide.forced_at(i) for i in range(len(masks)))
                mask_rows(logits, masks)  # in place: the rows are read once, here
            # The rule was fixed by earlier rounds; the proposal only tells where the two rules coincide
            # (no q rows, T = 0, one draft). tuning/rule_choice.py says why that keeps the law.
            rule = rules.choose(sampled=proposal.q_rows is not None and not params.greedy, drafts=len(drafts))
            verdict = VERIFIERS[rule](logits, drafts, proposal.q_rows, params, rng)
            t3 = clock.now()
            accepted = verdict.accepted
            kept = self.token_logprobs(logits, drafts[:accepted] + [verdict.token], params, config.logprobs)
        finally:
            self.target.rewind(len(context) + accepted)
        if guide is not None:
            guide.settle(verdict.accepted, verdict.token)
        return Scored(proposal, verdict.accepted, verdict.token, t1 - t0, t2 - t1, kept, rule, t3 - t2, verdict.block_gain, forced)

    def force(self, proposal: Proposal, guide: Guide) -> None:
        """Add the tokens the constraint forces after the proposal, while the round has room: drafts
        that p' cannot reject (deterministic: a one-point q where the proposal has q rows)."""
        while not guide.full():
            token = guide.forced()
            if token is None or (proposal.tokens and self.is_end(proposal.tokens[-1])):
                return
            proposal.add_forced(token, self.vocab_limit, guide)

    def decode_round(
        self, context: list[int], budget: int, policy: DraftPolicy | None, config: GenerationConfig, rng: np.random.Generator,
        rules: RuleChooser, guide: Guide | None = None,
    ) -> Decoded:  # fmt: skip
        """Plan, then draft and verify (or take one plain target step); the round's `seconds`
        cover planning to verification. Under a constraint a drafting engine's round also holds the
        tokens the grammar forces, a plain step included."""
        start = clock.now()
        grammar_before = guide.mask_seconds if guide is not None else 0.0
        drafter, k = self.plan(context, budget, policy) if policy is not None else (None, 0)
        if guide is not None:
            guide.room = budget
        only = guide.forced() if guide is not None else None  # the one token the grammar allows next, if so
        if drafter is None and (only is None or self.drafter is None or budget <= 0):
            t0 = clock.now()
            token, kept = self.target_step(context, config.sampling, rng, config.logprobs, guide)
            scored = Scored(Proposal(), 0, token, 0.0, clock.now() - t0, kept, forced=(only is not None,))
        else:
            scored = self.speculative_round(context, drafter, k, policy.p_min if policy is not None else 0.0, config, rng, rules, guide)
        drafts, accepted = scored.proposal.tokens, scored.accepted
        by_grammar = scored.forced or (False,) * (len(drafts) + 1)
        lps = scored.logprobs or (None,) * (accepted + 1)
        emitted = [Emission(d, Source.FORCED if by_grammar[i] else Source.DRAFT, i + 1, lps[i]) for i, d in enumerate(drafts[:accepted])]
        last = Source.CORRECTION if accepted < len(drafts) else Source.BONUS if drafts else Source.TARGET
        emitted.append(Emission(scored.token, Source.FORCED if by_grammar[accepted] else last, accepted + 1, lps[accepted]))
        rejected = None
        if accepted < len(drafts):
            x = drafts[accepted]
            rejected = Rejected(x, self.piece(x).decode("utf-8", "replace"), accepted + 1)
        own = [i for i in range(len(drafts)) if not by_grammar[i]]  # the drafter's tokens: what the policy learns from
        figures = Round(
            drafted=len(own),
            accepted=sum(1 for i in own if i < accepted),
            draft_seconds=scored.draft_seconds,
            draft_decode_seconds=scored.proposal.decode_seconds,
            target_seconds=scored.target_seconds,
            seconds=clock.now() - start,
            drafter=drafter.name if drafter is not None else "",
            draft_catch_up_seconds=scored.proposal.catch_up_seconds,
            k=k,
            rule=scored.rule,
            rule_seconds=scored.rule_seconds,
            block_gain=scored.block_gain,
            sequences=getattr(self.target, "last_pass_sequences", 1),
            forced=sum(1 for e in emitted if e.source is Source.FORCED and not self.is_end(e.id)),  # an end is never emitted
            forced_rows=len(drafts) - len(own),
            forced_last=emitted[-1].source is Source.FORCED and not self.is_end(emitted[-1].id),
            grammar_seconds=guide.mask_seconds - grammar_before if guide is not None else 0.0,
        )
        return Decoded(emitted, rejected, figures)

    def emit(
        self, emitted: list[Emission], context: list[int], stream: TextStream, left: int
    ) -> Generator[Token, None, str | None]:
        """Append a round's tokens to the context and stream them, stopping exactly at an
        end-of-generation token, a stop string or the token budget (`left` tokens to go).
        Returns why generation ends here, or None to go on."""
        for e in emitted[:left]:
            if self.is_end(e.id):
                return "eog"
            context.append(e.id)
            yield from stream.push(e.id, self.piece(e.id), e.source, e.position, e.logprobs)
            if stream.stopped:
                return "stop"
        return None

    # -- the loop ---------------------------------------------------------------------

    def generate(self, prompt: Sequence[int], config: GenerationConfig, policy: DraftPolicy | None = None) -> Iterator[Event]:
        """Yield Prefill, then Token/Rejected/Round events, then Finished.

        `policy` chooses each round's drafter and k (policy.draft_policy(k) or AdaptivePolicy);
        it learns from the rounds it observes, so give each generation a fresh one. Only a
        target-only engine (no drafter) may go without. The verify rule's chooser
        (rule_choice.rule_chooser(config.verify)) is made fresh here and learns likewise.
        """
        assert len(prompt) > 0, "the prompt must hold at least one token"
        assert policy is not None or self.drafter is None, "a drafting engine needs a policy (policy.draft_policy)"
        rng = np.random.default_rng(config.seed)
        rules = rule_chooser(config.verify)
        guide = None
        if config.grammar is not None:
            tokenizer = self.grammar_tokenizer()
            guide = Guide.over(config.grammar.matcher(tokenizer), tokenizer)
        if policy is not None and self.earned is not None:
            policy.resume(resumed(self.earned, self.drafter.name if self.drafter is not None else ""))
        context = list(prompt)
        stream = TextStream(config.stop)
        reason = None
        yield self.prefill(prompt, config.max_tokens, policy is None or policy.prefill_draft)
        try:
            while reason is None:
                left = config.max_tokens - (len(context) - len(prompt))
                room = self.target.n_ctx - len(context)
                if left <= 0 or room <= 0:
                    reason = "max_tokens" if left <= 0 else "context_full"
                    break
                # Never draft past the token budget or the context: a round makes up to k + 1 tokens.
                decoded = self.decode_round(context, min(left, room) - 1, policy, config, rng, rules, guide)
                if decoded.rejected is not None:
                    yield decoded.rejected
                emitting = clock.now()
                reason = yield from self.emit(decoded.emitted, context, stream, left)
                # The round's figures with the emitting in its seconds (as dataclasses.replace, without its checks of each field, every round)
                figures = Round(**{**vars(decoded.figures), "seconds": decoded.figures.seconds + clock.now() - emitting})
                if policy is not None:
                    policy.observe(learnt(figures, ended=reason is not None))
                rules.observe(figures)
                yield figures
            if not stream.stopped:
                yield from stream.flush()
        finally:
            # Both caches end at the output's accepted prefix, also after EOS, a stop string or Ctrl-C.
            self.target.rewind(common_prefix(self.target.tokens, context))
            if self.drafter is not None:
                self.drafter.sync(context)
            if policy is not None and self.earned is not None:
                self.earned.update(recalled(policy.earned()))
        yield Finished(reason=reason, tokens=tuple(stream.tokens), text=stream.text[: stream.released])


def learnt(figures: Round, ended: bool) -> Round:
    """The round as the policy learns from it. Where the generation ended with it (an end of
    generation, a stop string) and every draft was kept, nothing after them was tried: a draft
    stopped at an end of generation drafted all there was, so the round is learnt as allowing
    what it drafted, not as failing at the next position. The record that the memory carries to
    the next call weighs a call's last round most: on `extract` (model+lookup with and without
    the memory, T = 0, four repeats, logged) 133 of 160 calls' last rounds drafted fewer than k
    and kept them all. Example: k 8, 3 drafted, 3 kept, ended -> k 3; not ended, or 2 kept -> k 8."""
    return dataclasses.replace(figures, k=figures.drafted) if ended and figures.accepted == figures.drafted else figures


def context_room(n_prompt: int, n_ctx: int, remedy: str) -> int:
    """The tokens a context of n_ctx leaves after a prompt of n_prompt; ContextOverflow, naming both
    and `remedy`, when it leaves none. Example: (12, 8, "pass --ctx 512") -> ContextOverflow("the
    prompt is 12 tokens but the context holds 8; pass --ctx 512")."""
    if n_prompt >= n_ctx:
        raise ContextOverflow(f"the prompt is {n_prompt} tokens but the context holds {n_ctx}; {remedy}")
    return n_ctx - n_prompt


def _next_ctx(n: int) -> int:
    """The smallest power of two of at least n tokens, as a --ctx suggestion."""
    size = 512
    while size < n:
        size *= 2
    return size
