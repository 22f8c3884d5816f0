"""The engine over the pure-numpy fake backend (tests/fakes.MarkovModel): fast, many cases.

Exactness (greedy equality, sampled distributions), batching (one target call per round),
rollback of both caches (also after EOS, the token budget, a stop string, or a consumer that
stops reading), stop strings, UTF-8 split across tokens, the shared-vocabulary limit and the
context limits. Statistical tests use fixed seeds; each states N and its false-failure rate.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from fakes import MarkovModel, random_markov
from specdec_cli.drafting.model import ModelDrafter
from specdec_cli.decoding.engine import Engine, GenerationConfig, learnt
from specdec_cli.tuning.policy import draft_policy
from specdec_cli.events import Finished, Rejected, Round, Source, Token
from specdec_cli.errors import ContextOverflow, NumericalError
from specdec_cli.maths.filters import probabilities
from specdec_cli.maths.sampling import GREEDY, SamplingParams
from stat_checks import ALPHA, PLAIN, chi_square_pvalue, first_two_law, first_two_pvalue



def collect(engine: Engine, prompt, **config) -> tuple[list[Token], list[Round], list[Rejected], Finished]:
    policy = draft_policy(config.pop("draft_tokens", 8), config.pop("p_min", None))
    events = list(engine.generate(prompt, GenerationConfig(**config), policy))
    tokens = [e for e in events if isinstance(e, Token)]
    rounds = [e for e in events if isinstance(e, Round)]
    rejected = [e for e in events if isinstance(e, Rejected)]
    (finished,) = [e for e in events if isinstance(e, Finished)]
    assert events[-1] is finished
    return tokens, rounds, rejected, finished


def ids(tokens: list[Token]) -> list[int]:
    return [t.id for t in tokens]


def chain(successor: dict[int, int], n_vocab: int, margin: float = 5.0) -> np.ndarray:
    """A logits table whose greedy continuation of token a is successor[a] (others: a + 1)."""
    table = np.zeros((n_vocab, n_vocab))
    for a in range(n_vocab):
        table[a, successor.get(a, (a + 1) % n_vocab)] = margin
    return table


def assert_caches_hold(full: list[int], target: MarkovModel, draft: MarkovModel | None) -> None:
    """After generation: both caches hold a prefix of prompt + output and nothing else (no rejected
    or unreleased token); the target holds all of it but at most the last token."""
    assert target.tokens == full[: len(target.tokens)]
    assert len(target.tokens) >= len(full) - 1
    if draft is not None:
        assert draft.tokens == full[: len(draft.tokens)]


# -- exactness ------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2, 4, 8])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_greedy_output_equals_target_only_greedy(k, seed):
    # The target's greedy path walks one random cycle through all 32 tokens (so it does not
    # settle into a short loop); the draft's greedy choice is wrong after a random third of them.
    vocab = 32
    rng = np.random.default_rng(seed)
    order = rng.permutation(vocab)
    table = random_markov(vocab, rng, scale=1.0)
    table[order, np.roll(order, -1)] += 6.0
    draft_table = table + rng.standard_normal(table.shape).astype(np.float32) * 0.3
    wrong = rng.choice(vocab, size=vocab // 3, replace=False)
    draft_table[wrong, rng.integers(0, vocab, size=len(wrong))] += 12.0
    target, draft = MarkovModel(table), MarkovModel(draft_table)
    prompt = [int(t) for t in rng.integers(0, vocab, size=5)]

    baseline, _, _, fin0 = collect(Engine(target), prompt, max_tokens=120, sampling=GREEDY)
    tokens, rounds, rejected, fin = collect(Engine(target, ModelDrafter(draft)), prompt, max_tokens=120, draft_tokens=k, sampling=GREEDY)

    assert ids(tokens) == ids(baseline) and len(tokens) == 120
    assert fin.tokens == fin0.tokens and fin.text == fin0.text
    assert sum(r.accepted for r in rounds) > 10 and len(rejected) > 10
    assert_caches_hold(prompt + ids(tokens), target, draft)


def first_two(engine: Engine, prompt, n: int, k: int, params=PLAIN) -> list[list[int]]:
    """The first two tokens of n generations (seeds 0..n-1) at draft length k."""
    samples = []
    for s in range(n):
        got = []
        for event in engine.generate(prompt, GenerationConfig(max_tokens=k + 1, sampling=params, seed=s), draft_policy(k)):
            if isinstance(event, Token):
                got.append(event.id)
        samples.append(got[:2])
    return samples


@pytest.mark.slow
@pytest.mark.parametrize("draft_kind", ["close", "weak", "adversarial"])
def test_sampled_first_two_tokens_follow_the_target(draft_kind):
    # 6-token vocabulary, k = 4, first two tokens of each generation (36 outcomes) against
    # the exact target chain. N = 20,000 generations; chi-square false-failure 1e-4.
    vocab, k, n = 6, 4, 20_000
    rng = np.random.default_rng(["close", "weak", "adversarial"].index(draft_kind) + 40)
    table = random_markov(vocab, rng, scale=1.5)
    if draft_kind == "close":
        draft_table = table + rng.standard_normal(table.shape) * 0.3
    elif draft_kind == "weak":
        draft_table = random_markov(vocab, rng, scale=1.5)  # unrelated to the target
    else:  # the draft is sure of the token the target likes least
        draft_table = np.zeros_like(table)
        draft_table[np.arange(vocab), table.argmin(axis=1)] = 6.0
    target, draft = MarkovModel(table), MarkovModel(draft_table)
    prompt = [3, 0]
    samples = first_two(Engine(target, ModelDrafter(draft)), prompt, n, k)
    law = first_two_law(lambda prefix: probabilities(target.table[(prompt + list(prefix))[-1]], PLAIN), n)
    assert first_two_pvalue(samples, law) > ALPHA


def test_draft_equal_to_target_accepts_everything():
    rng = np.random.default_rng(5)
    table = random_markov(50, rng)
    target, draft = MarkovModel(table), MarkovModel(table.copy())
    for params in (PLAIN, SamplingParams(), GREEDY):
        for seed in range(5):
            _, rounds, rejected, _ = collect(
                Engine(target, ModelDrafter(draft)), [1, 2, 3], max_tokens=100, draft_tokens=6, sampling=params, seed=seed
            )
            # p == q exactly, so u < p(x)/q(x) = 1 always holds: nothing statistical here.
            assert rejected == [] and all(r.accepted == r.drafted for r in rounds)
            assert sum(r.drafted for r in rounds) >= 80  # rounds of 6 drafts + 1 bonus


# -- batching and rollback ------------------------------------------------------------


@pytest.mark.parametrize("params", [GREEDY, PLAIN])
@pytest.mark.parametrize("k", [1, 3, 8])
def test_each_round_is_one_target_call_scoring_k_plus_one_rows(params, k):
    rng = np.random.default_rng(k)
    table = random_markov(20, rng)
    target = MarkovModel(table)
    draft = MarkovModel(table + rng.standard_normal(table.shape).astype(np.float32))
    prompt = [4, 5, 6, 7]
    engine = Engine(target, ModelDrafter(draft))
    full = list(prompt)
    n_rounds = 0
    for event in engine.generate(prompt, GenerationConfig(max_tokens=80, sampling=params, seed=9), draft_policy(k)):
        if isinstance(event, Token):
            full.append(event.id)
        if isinstance(event, Round):
            n_rounds += 1
            # One prefill call, then exactly one decode per round: [last token, d1..dk], k + 1 rows.
            assert len(target.calls) == 1 + n_rounds
            assert target.calls[-1] == (event.drafted + 1, event.drafted + 1)
            # Within the round, the target's cache was rolled back to the context but its last token.
            assert target.tokens == full[:-1]
    assert target.calls[0] == (len(prompt) - 1, 0)
    assert n_rounds < 80  # drafts were accepted: fewer rounds than tokens


def test_draft_calls_per_round():
    rng = np.random.default_rng(8)
    table = random_markov(20, rng)
    target, draft = MarkovModel(table), MarkovModel(table + rng.standard_normal(table.shape).astype(np.float32))
    engine = Engine(target, ModelDrafter(draft))
    seen = 1  # the prefill call
    for event in engine.generate([1, 2, 3], GenerationConfig(max_tokens=60, sampling=PLAIN, seed=1), draft_policy(5)):
        if isinstance(event, Round) and event.drafted:
            calls = draft.calls[seen:]
            seen = len(draft.calls)
            assert len(calls) == event.drafted  # k decode calls per round, each with one row
            assert all(n_logits == 1 for _, n_logits in calls) and all(size == 1 for size, _ in calls[1:])


@pytest.mark.parametrize("k", [2, 5, 8])
def test_eos_inside_an_accepted_block_stops_exactly_there(k):
    # Greedy chain 0 -> 1 -> 2 -> ... -> 9 (EOS); draft == target, so every draft is accepted
    # and EOS arrives as an accepted draft in the middle of a block.
    vocab, eos = 12, 9
    table = chain({}, vocab)
    target, draft = MarkovModel(table, eos=eos), MarkovModel(table.copy(), eos=eos)
    tokens, rounds, _, fin = collect(Engine(target, ModelDrafter(draft)), [0, 1], max_tokens=50, draft_tokens=k, sampling=GREEDY)
    assert ids(tokens) == [2, 3, 4, 5, 6, 7, 8]
    assert fin.reason == "eog" and fin.tokens == (2, 3, 4, 5, 6, 7, 8) and fin.text == "cdefghi"
    assert rounds[-1].accepted == rounds[-1].drafted  # EOS came from an accepted block
    assert target.tokens == [0, 1, 2, 3, 4, 5, 6, 7, 8]  # EOS and what follows it rolled back
    assert_caches_hold([0, 1] + ids(tokens), target, draft)


def test_a_round_that_ends_the_generation_with_every_draft_kept_is_learnt_as_allowing_what_it_drafted():
    # Chain 0 -> 1 -> .. -> 9 (EOS), k = 5: round 1 drafts 2..6 (kept, bonus 7), round 2 drafts 8
    # and EOS and stops there (2 of 5). The policy learns round 2 as k = 2; the event keeps 5.
    table = chain({}, 12)
    engine = Engine(MarkovModel(table, eos=9), ModelDrafter(MarkovModel(table.copy(), eos=9), is_end=lambda token: token == 9))
    policy, learnt_rounds = draft_policy(5), []
    observe = policy.observe
    policy.observe = lambda event: (learnt_rounds.append(event), observe(event))
    events = list(engine.generate([0, 1], GenerationConfig(max_tokens=50, sampling=GREEDY), policy))
    rounds = [e for e in events if isinstance(e, Round)]
    assert [(r.k, r.drafted, r.accepted) for r in rounds] == [(5, 5, 5), (5, 2, 2)]
    assert [(r.k, r.drafted, r.accepted) for r in learnt_rounds] == [(5, 5, 5), (2, 2, 2)]


def test_learnt_docstring_examples():
    figures = Round(drafted=3, accepted=3, draft_seconds=0.0, draft_decode_seconds=0.0, target_seconds=0.0, seconds=0.0, k=8)
    assert learnt(figures, ended=True).k == 3
    assert learnt(figures, ended=False).k == 8
    assert learnt(dataclasses.replace(figures, accepted=2), ended=True).k == 8


def test_eos_is_never_emitted_when_sampling():
    rng = np.random.default_rng(12)
    table = random_markov(8, rng, scale=1.0)
    table[:, 7] -= 3.0  # EOS is unlikely enough that some runs reach max_tokens
    target = MarkovModel(table, eos=7)
    draft = MarkovModel(random_markov(8, rng, scale=1.0), eos=7)
    reasons = set()
    for seed in range(200):
        tokens, _, _, fin = collect(Engine(target, ModelDrafter(draft)), [0], max_tokens=30, draft_tokens=4, sampling=PLAIN, seed=seed)
        assert 7 not in ids(tokens)
        reasons.add(fin.reason)
        assert_caches_hold([0] + ids(tokens), target, draft)
    assert reasons == {"eog", "max_tokens"}


@pytest.mark.parametrize("max_tokens", [1, 2, 3, 7, 10])
def test_max_tokens_is_exact_and_rounds_never_draft_past_it(max_tokens):
    table = chain({}, 30)
    target, draft = MarkovModel(table), MarkovModel(table.copy())
    tokens, rounds, _, fin = collect(Engine(target, ModelDrafter(draft)), [0, 1], max_tokens=max_tokens, draft_tokens=4, sampling=GREEDY)
    assert ids(tokens) == list(range(2, 2 + max_tokens)) and fin.reason == "max_tokens"
    assert sum(r.drafted for r in rounds) == sum(r.accepted for r in rounds) <= max_tokens - 1
    assert_caches_hold([0, 1] + ids(tokens), target, draft)


@pytest.mark.parametrize("stop_after", [1, 2, 3, 5, 6, 9])
@pytest.mark.parametrize("params", [GREEDY, PLAIN])
def test_closing_the_generator_early_rolls_both_caches_back(stop_after, params):
    rng = np.random.default_rng(stop_after)
    table = random_markov(16, rng)
    target = MarkovModel(table)
    draft = MarkovModel(table + rng.standard_normal(table.shape).astype(np.float32) * 0.5)
    prompt = [1, 2, 3]
    gen = Engine(target, ModelDrafter(draft)).generate(prompt, GenerationConfig(max_tokens=100, sampling=params, seed=3), draft_policy(4))
    seen = []
    for event in gen:
        if isinstance(event, Token):
            seen.append(event)
            if len(seen) == stop_after:
                break
    # Before close() the target may still hold accepted drafts the consumer never saw.
    gen.close()  # runs the engine's `finally`
    full = prompt + ids(seen)
    # An accepted draft was scored by the target, so it stays cached; the round's own token
    # (correction or bonus) never was, so the target holds the context but that last token.
    assert target.tokens == (full if seen[-1].source == Source.DRAFT else full[:-1])
    assert draft.tokens == full[: len(draft.tokens)]


@pytest.mark.parametrize("params", [GREEDY, PLAIN])
def test_an_error_inside_the_round_still_rolls_the_target_back(params):
    rng = np.random.default_rng(4)
    table = random_markov(10, rng)
    target, draft = MarkovModel(table), MarkovModel(table.copy())
    gen = Engine(target, ModelDrafter(draft)).generate([1, 2], GenerationConfig(max_tokens=20, sampling=params), draft_policy(4))
    next(gen)  # prefill: the target holds [1]
    target.table = np.full_like(table, np.nan)  # the round's batch [2, d1..d4] yields NaN logits
    with pytest.raises(NumericalError):
        list(gen)
    assert target.tokens == [1, 2]  # the context, without the four drafts
    assert draft.tokens == [1, 2]


# -- text: stop strings and UTF-8 -------------------------------------------------------


PIECES = {0: b"a", 1: b"b", 2: b"c\n", 3: b"\nd", 4: b"e", 5: b"\n", 6: b"END", 7: b"x"}


def text_engine(k: int | None, table: np.ndarray, draft_table: np.ndarray | None = None):
    target = MarkovModel(table)
    draft = None if k is None else MarkovModel(table.copy() if draft_table is None else draft_table)
    engine = Engine(target, None if draft is None else ModelDrafter(draft), piece=lambda t: PIECES[t])
    return engine, target, draft


@pytest.mark.parametrize("k", [1, 2, 4, 8])
@pytest.mark.parametrize("start", [0, 1, 2])
def test_stop_string_spanning_tokens_cuts_the_text_exactly(k, start):
    # Greedy chain 0 1 2 3 4 0 1 2 ...: text "abc\n\nde" repeats. "\n\n" spans tokens 2 and 3;
    # with k = 1 rounds emit two tokens, so depending on the start it spans two rounds or sits
    # mid-block; with larger k it sits mid-block.
    table = chain({4: 0}, 8)
    engine, target, draft = text_engine(k, table)
    prompt = [7, start]
    tokens, rounds, _, fin = collect(engine, prompt, max_tokens=40, draft_tokens=k, sampling=GREEDY, stop=("\n\n",))
    full_text = "".join(PIECES[t].decode() for t in itertools.islice(itertools.cycle(range(5)), start + 1, start + 40))
    assert fin.reason == "stop"
    assert fin.text == full_text[: full_text.index("\n\n")]
    assert "".join(t.text for t in tokens) == fin.text
    assert ids(tokens)[-1] == 2  # "c\n" is released (as "c"), "\nd" is not
    assert tokens[-1].text == "c"
    # The caches hold only generated tokens (those of the stop string may stay).
    generated = prompt + ids(tokens) + [3]
    assert target.tokens == generated[: len(target.tokens)]
    assert draft.tokens == generated[: len(draft.tokens)]


def test_stop_string_across_rounds_is_detected():
    # k = 1 from prompt [7, 0]: rounds emit (1, 2), (3, 4), ...: "c\n" ends round 1, "\nd" opens round 2.
    table = chain({4: 0}, 8)
    engine, _, _ = text_engine(1, table)
    events = list(engine.generate([7, 0], GenerationConfig(max_tokens=40, sampling=GREEDY, stop=("\n\n",)), draft_policy(1)))
    kinds = [type(e).__name__ for e in events]
    # Token 2 ("c\n") is held back until round 2 shows the stop string, then released as "c".
    first_round = kinds.index("Round")
    assert [e.id for e in events[:first_round] if isinstance(e, Token)] == [1]
    assert events[-1].text == "bc" and events[-1].reason == "stop"


@pytest.mark.parametrize("seed", range(30))
def test_stop_strings_cut_sampled_text_like_a_cut_of_the_full_text(seed):
    # A stop string never changes the tokens sampled before it (the text stream draws nothing):
    # the stopped run's text is the unstopped run's text cut before the first stop string.
    rng = np.random.default_rng(seed)
    table = random_markov(8, rng, scale=1.0)
    draft_table = random_markov(8, rng, scale=1.0)
    stops = [("\n\n",), ("de",), ("END", "ba"), ("c\n\nd",), ("x", "bb")][seed % 5]
    engine, target, draft = text_engine(4, table, draft_table)
    plain, _, _, fin_plain = collect(engine, [7], max_tokens=60, draft_tokens=4, sampling=PLAIN, seed=seed)
    engine, target, draft = text_engine(4, table, draft_table)
    tokens, _, _, fin = collect(engine, [7], max_tokens=60, draft_tokens=4, sampling=PLAIN, seed=seed, stop=stops)
    full = fin_plain.text
    cut = min([i for i in (full.find(s) for s in stops) if i >= 0], default=len(full))
    assert fin.text == full[:cut] == "".join(t.text for t in tokens)
    assert fin.reason == ("stop" if cut < len(full) else "max_tokens")
    assert ids(tokens) == ids(plain)[: len(tokens)]
    generated = [7] + ids(plain)
    assert target.tokens == generated[: len(target.tokens)] and draft.tokens == generated[: len(draft.tokens)]


UTF8_PIECES = {0: b"\xe2", 1: b"\x82", 2: b"\xac", 3: b"a", 4: b"\xc3", 5: b"\xa9", 6: b"\xf0\x9f", 7: b"\x98\x80"}


@pytest.mark.parametrize("k", [None, 1, 3])
def test_multibyte_utf8_split_across_tokens_streams_whole_characters(k):
    # Greedy chain 3 0 1 2 4 5 6 7 3 ...: "a", then "€" in three tokens, "é" in two, "😀" in two.
    table = chain({3: 0, 2: 4, 7: 3}, 8)
    target = MarkovModel(table)
    drafter = None if k is None else ModelDrafter(MarkovModel(table.copy()))
    engine = Engine(target, drafter, piece=lambda t: UTF8_PIECES[t])
    tokens, _, _, fin = collect(engine, [3], max_tokens=16, draft_tokens=k or 0, sampling=GREEDY)
    assert [t.text for t in tokens[:8]] == ["", "", "€", "", "é", "", "😀", "a"]
    assert fin.text == "€é😀a€é😀a" and "".join(t.text for t in tokens) == fin.text


@pytest.mark.parametrize("seed", range(10))
def test_sampled_byte_tokens_stream_like_a_one_shot_decode(seed):
    rng = np.random.default_rng(seed)
    table = random_markov(8, rng, scale=0.5)
    engine = Engine(MarkovModel(table), ModelDrafter(MarkovModel(random_markov(8, rng))), piece=lambda t: UTF8_PIECES[t])
    tokens, _, _, fin = collect(engine, [3], max_tokens=50, draft_tokens=3, sampling=PLAIN, seed=seed)
    whole = b"".join(UTF8_PIECES[t] for t in ids(tokens)).decode("utf-8", errors="replace")
    assert fin.text == whole == "".join(t.text for t in tokens)


# -- vocabularies and context limits --------------------------------------------------


@pytest.mark.parametrize("params", [GREEDY, PLAIN])
def test_a_smaller_draft_vocabulary_limits_drafts_and_output(params):
    # Target knows 8 ids, draft 6: ids 6 and 7 must never be drafted nor emitted, although
    # the target prefers them strongly (so this fails if the limit is ignored).
    rng = np.random.default_rng(2)
    table = random_markov(8, rng, scale=1.0)
    table[:, 6:] += 4.0
    target = MarkovModel(table)
    draft = MarkovModel(random_markov(6, rng, scale=1.0))
    limit = draft.n_vocab  # the shared ids (session.check_pair gives it for real models)
    proposals = []

    class Recording(ModelDrafter):
        def propose(self, context, k, params, rng, p_min=0.0, guide=None):
            out = super().propose(context, k, params, rng, p_min, guide)
            proposals.extend(out.tokens)
            assert out.q_rows is None or all(len(q) == limit for q in out.q_rows)
            return out

    engine = Engine(target, Recording(draft, vocab_limit=limit), vocab_limit=limit)
    emitted = []
    for seed in range(20):
        tokens, _, _, _ = collect(engine, [0, 1], max_tokens=40, draft_tokens=4, sampling=params, seed=seed)
        emitted += ids(tokens)
    assert len(proposals) > 100 and max(proposals) < limit
    assert len(emitted) == 800 and max(emitted) < limit


@pytest.mark.slow
def test_first_token_under_a_vocab_limit_follows_the_renormalised_target():
    # N = 20,000 first tokens; chi-square false-failure 1e-4.
    rng = np.random.default_rng(6)
    table = random_markov(8, rng, scale=1.0)
    target, draft = MarkovModel(table), MarkovModel(random_markov(6, rng, scale=1.0))
    engine = Engine(target, ModelDrafter(draft, vocab_limit=6), vocab_limit=6)
    counts = np.zeros(6, dtype=np.int64)
    for seed in range(20_000):
        for event in engine.generate([0, 2], GenerationConfig(max_tokens=3, sampling=PLAIN, seed=seed), draft_policy(2)):
            if isinstance(event, Token):
                counts[event.id] += 1
                break
    assert chi_square_pvalue(counts, probabilities(target.table[2, :6], PLAIN)) > ALPHA


def test_a_prompt_that_does_not_fit_raises_context_overflow():
    table = chain({}, 10)
    target, draft = MarkovModel(table, n_ctx=8), MarkovModel(table.copy(), n_ctx=8)
    engine = Engine(target, ModelDrafter(draft))
    with pytest.raises(ContextOverflow, match="the prompt is 8 tokens but the context holds 8"):
        list(engine.generate([0] * 8, GenerationConfig(max_tokens=4), draft_policy(8)))
    # One token less fits, and leaves room for exactly one new token.
    tokens, _, _, fin = collect(engine, [0] * 7, max_tokens=4, sampling=GREEDY)
    assert ids(tokens) == [1] and fin.reason == "context_full"


def test_context_overflow_suggests_room_for_the_prompt_and_the_token_budget():
    table = chain({}, 10)
    engine = Engine(MarkovModel(table, n_ctx=8), None)
    with pytest.raises(ContextOverflow, match=r"the prompt is 600 tokens but the context holds 8; pass --ctx 1024$"):
        list(engine.generate([0] * 600, GenerationConfig(max_tokens=400)))  # 600 + 400 -> 1024
    with pytest.raises(ContextOverflow, match=r"pass --ctx 2048$"):
        list(engine.generate([0] * 600, GenerationConfig(max_tokens=1000)))  # 1600 -> 2048


@pytest.mark.parametrize("k", [1, 4, 8])
@pytest.mark.parametrize("params", [GREEDY, PLAIN])
def test_generation_stops_when_the_context_is_full(k, params):
    rng = np.random.default_rng(k)
    table = random_markov(12, rng)
    target = MarkovModel(table, n_ctx=32)
    draft = MarkovModel(table + rng.standard_normal(table.shape).astype(np.float32), n_ctx=32)
    prompt = [1, 2, 3, 4, 5]
    tokens, _, _, fin = collect(Engine(target, ModelDrafter(draft)), prompt, max_tokens=100, draft_tokens=k, sampling=params, seed=k)
    assert fin.reason == "context_full" and len(tokens) == 32 - len(prompt)
    assert_caches_hold(prompt + ids(tokens), target, draft)


def test_sources_and_positions_describe_each_round():
    rng = np.random.default_rng(13)
    table = random_markov(16, rng)
    target, draft = MarkovModel(table), MarkovModel(table + rng.standard_normal(table.shape).astype(np.float32))
    events = list(Engine(target, ModelDrafter(draft)).generate([1, 2], GenerationConfig(max_tokens=60, sampling=GREEDY), draft_policy(4)))
    block: list[Token] = []
    rejected: list[Rejected] = []
    for e in events:
        if isinstance(e, Token):
            block.append(e)
        elif isinstance(e, Rejected):
            rejected.append(e)
        elif isinstance(e, Round):
            assert [t.source for t in block[:-1]] == [Source.DRAFT] * e.accepted
            assert [t.position for t in block] == list(range(1, len(block) + 1))
            if e.drafted == 0:
                assert block[-1].source == Source.TARGET
            elif e.accepted == e.drafted:
                assert block[-1].source == Source.BONUS and not rejected
            else:
                assert block[-1].source == Source.CORRECTION
                assert len(rejected) == 1 and rejected[0].position == e.accepted + 1 and rejected[0].id != block[-1].id
            block, rejected = [], []
