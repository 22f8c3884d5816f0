"""Cross-vocabulary drafting over the fake backend: the vocabulary map, the text mirror, the drafter, the engine.

The fake pair has different vocabularies over the same bytes: the target has "ab" and " a",
the draft has "ba", " ab", "bb" and a whole "é"; both have byte tokens for é's two bytes; id
0 is a special token on each side (the target's BOS, which renders as nothing). Seven ids are
shared. The draft tokenises by longest match (fakes.LongestMatchTokenizer).

Exactness: greedy output equals target-only greedy output, and sampled first-two-token laws
(weak and strong drafts, with and without filters) match the target's exact law. Statistical
tests use fixed seeds; each states N and its false-failure rate (stat_checks.ALPHA = 1e-4).
"""

from __future__ import annotations

import numpy as np
import pytest

from fakes import LongestMatchTokenizer, MarkovModel, random_markov
from specdec_cli.drafting.cross_vocab import CrossVocabDrafter, TextMirror, utf8_runs
from specdec_cli.decoding.engine import Engine, GenerationConfig
from specdec_cli.events import Round, Token
from specdec_cli.tuning.policy import draft_policy
from specdec_cli.maths.distribution import Distribution
from specdec_cli.maths.filters import probabilities, softmax_at
from specdec_cli.maths.sampling import GREEDY, SamplingParams
from specdec_cli.drafting.vocab_map import build, byte_tokens, index_by_bytes
from stat_checks import ALPHA, PLAIN, PROCESSED, chi_square_pvalue, first_two_law, first_two_pvalue

S, T, B = "special", "text", "byte"
TARGET_PIECES = [b"", b"a", b"b", b"ab", b" ", b" a", b"\xc3", b"\xa9", b"ba", b"c"]
TARGET_KINDS = [S, T, T, T, T, T, B, B, T, T]
DRAFT_PIECES = [b"", b"a", b"b", b"ba", b" ", b" ab", b"\xc3\xa9", b"c", b"bb", b"\xc3", b"\xa9"]
DRAFT_KINDS = [S, T, T, T, T, T, T, T, T, B, B]
VMAP = build(DRAFT_PIECES, DRAFT_KINDS, TARGET_PIECES, TARGET_KINDS)
DRAFT_BOS = 0


# -- the vocabulary map -------------------------------------------------------------------


def test_map_of_the_docstring_example():
    vmap = build([b"", b"a", b"b", b"ab"], [S, T, T, T], [b"", b"ab", b"a", b"c", b"a"], [S, T, T, T, B])
    assert vmap.draft_to_target.tolist() == [-1, 2, -1, 1]
    assert vmap.target_to_draft.tolist() == [-1, 3, 1, -1, -1]
    assert vmap.shared_target.tolist() == [1, 2] and vmap.shared_draft.tolist() == [3, 1]
    q = Distribution(4, np.array([1, 2, 3]), np.array([0.2, 0.5, 0.3]))
    restricted, confidence = vmap.restrict(q)
    assert restricted.ids.tolist() == [1, 2] and np.allclose(restricted.weights, [0.6, 0.4]) and confidence == pytest.approx(0.3)


def test_index_by_bytes_prefers_text_and_leaves_out_ambiguous_bytes():
    assert index_by_bytes([b"", b"x", b"x", b"y", b"y"], [S, T, T, B, T]) == ({b"y": 4}, 1)
    assert index_by_bytes([b"z", b"\n", b"\n"], [S, B, T]) == ({b"\n": 2}, 0)  # a special token never matches
    assert byte_tokens([b"", b"a", b"ab", b"\xc3"], [S, T, T, B]) == {97: 1, 195: 3}


def test_map_of_the_fake_pair_matches_bytes_not_ids():
    shared = {int(t): int(d) for t, d in zip(VMAP.shared_target, VMAP.shared_draft)}
    assert shared == {1: 1, 2: 2, 4: 4, 6: 9, 7: 10, 8: 3, 9: 7}
    for t, d in shared.items():
        assert TARGET_PIECES[t] == DRAFT_PIECES[d]
    assert VMAP.size == 7 and VMAP.n_target == len(TARGET_PIECES)


def test_sentencepiece_and_gpt2_spellings_meet_through_their_bytes():
    # The vocabulary strings differ ("▁world", "Ġworld"); the pieces (decoded bytes) are equal.
    vmap = build([b"<s>", b" world"], [S, T], [b" world", b"world"], [T, T])
    assert vmap.draft_to_target.tolist() == [-1, 0]


def test_restrict_of_a_dense_row_and_of_a_row_without_shared_mass():
    row = np.log(np.array([0.1, 0.2, 0.1, 0.1, 0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.05]))
    dense = Distribution(11, None, np.exp(row) * 4.0, total=4.0 * np.exp(row).sum())  # unnormalised weights
    q, confidence = VMAP.restrict(dense)
    expected = np.zeros(len(TARGET_PIECES))
    for t, d in zip(VMAP.shared_target, VMAP.shared_draft):
        expected[t] = np.exp(row)[d]
    assert np.allclose(q.dense(), expected / expected.sum()) and list(q.ids) == sorted(q.ids)
    assert confidence == pytest.approx(0.2)
    only_unshared = Distribution(11, np.array([5, 6, 8]), np.array([0.5, 0.25, 0.25]))
    assert VMAP.restrict(only_unshared) == (None, 0.0)


# -- the text mirror ----------------------------------------------------------------------


def mirror(tokenize=None) -> TextMirror:
    tokenize = tokenize or LongestMatchTokenizer(DRAFT_PIECES, DRAFT_KINDS)
    return TextMirror(
        TARGET_PIECES.__getitem__, DRAFT_PIECES.__getitem__, tokenize, byte_tokens(DRAFT_PIECES, DRAFT_KINDS), prefix=[DRAFT_BOS]
    )


def test_utf8_runs_keep_valid_text_and_split_stray_bytes():
    assert utf8_runs(b"a\xe2\x82") == [(b"a", True), (b"\xe2", False), (b"\x82", False)]
    assert utf8_runs(b"\xc3\xa9b") == [(b"\xc3\xa9b", True)]
    assert utf8_runs(b"\xa9ab") == [(b"\xa9", False), (b"ab", True)]


def test_mirror_translates_text_drops_special_tokens_and_puts_the_draft_bos_first():
    m = mirror()
    # target: BOS "ab" " a" "b" é (two byte tokens) "c"
    got = m.update([0, 3, 5, 2, 6, 7, 9])
    assert bytes(m.text) == b"ab ab\xc3\xa9c"
    assert got == [DRAFT_BOS, 1, 2, 5, 6, 7]  # "a" "b" " ab" "é" "c"
    # a character cut in half: its first byte becomes the draft's byte token
    assert m.update([0, 1, 6]) == [DRAFT_BOS, 1, 9]


@pytest.mark.parametrize("seed", range(6))
def test_mirror_updates_incrementally_to_what_a_fresh_translation_gives(seed):
    # Random growth and rollback of a target context, as the engine does it: the incremental
    # result must equal translating from scratch, while tokenising far less text.
    rng = np.random.default_rng(seed)
    m = mirror()
    context = [0]
    total_text = 0
    for _ in range(300):
        if rng.random() < 0.3 and len(context) > 2:
            del context[len(context) - int(rng.integers(1, 3)) :]
        context += [int(t) for t in rng.integers(1, len(TARGET_PIECES), size=int(rng.integers(1, 5)))]
        if rng.random() < 0.05:
            context.append(0)  # a special token in the middle (renders as nothing)
        assert m.update(context) == mirror().update(context)
        total_text += len(m.text)
    assert m.retokenised < total_text / 8  # only tails were tokenised again


def test_mirror_example_of_the_docstring_retokenises_three_tokens_back_from_a_whitespace_start():
    words = [b"", b"The", b" big", b" black", b" cat", b" sat"]
    kinds = [S, T, T, T, T, T]
    m = TextMirror(words.__getitem__, words.__getitem__, LongestMatchTokenizer(words, kinds), {}, prefix=[0])
    assert m.update([0, 1, 2, 3, 4]) == [0, 1, 2, 3, 4]
    before = m.retokenised
    assert m.update([0, 1, 2, 3, 4, 5]) == [0, 1, 2, 3, 4, 5]
    assert m.retokenised - before == len(b" big black cat sat")


def test_small_helpers_of_their_docstrings():
    assert softmax_at(np.array([0.0, 0.0]), 1) == 0.5
    from specdec_cli.compat import _share

    assert _share(1, 8) == "12.5%"


# -- the drafter --------------------------------------------------------------------------


def target_table(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    table = random_markov(len(TARGET_PIECES), rng, scale=1.5)
    table[:, 0] -= 2.0  # the special token is rarer
    return table


def draft_table(kind: str, table: np.ndarray, seed: int) -> np.ndarray:
    """"strong": after a shared token, the target's row (over the shared ids) plus noise; "weak": unrelated.
    Either way the draft is sure of unshared tokens after "é" (6), so filtered rows can lose all shared mass."""
    rng = np.random.default_rng(seed + 100)
    out = random_markov(len(DRAFT_PIECES), rng, scale=1.5)
    if kind == "strong":
        out[:] = -2.0 + rng.standard_normal(out.shape) * 0.3
        for d in range(len(DRAFT_PIECES)):
            t = VMAP.draft_to_target[d]
            row = table[t if t >= 0 else 1]
            out[d, VMAP.shared_draft] = row[VMAP.shared_target] + rng.standard_normal(VMAP.size) * 0.3
    out[6, [5, 6, 8]] += 8.0
    return out


def fake_pair(kind: str, seed: int = 0, n_ctx: int = 4096) -> tuple[MarkovModel, MarkovModel, CrossVocabDrafter]:
    table = target_table(seed)
    target = MarkovModel(table, pieces=TARGET_PIECES, n_ctx=n_ctx)
    draft = MarkovModel(draft_table(kind, table, seed), pieces=DRAFT_PIECES, n_ctx=n_ctx)
    return target, draft, CrossVocabDrafter(draft, VMAP, mirror())


def test_drafts_are_shared_target_ids_and_the_draft_cache_holds_its_own_tokens():
    target, draft, drafter = fake_pair("strong")
    rng = np.random.default_rng(1)
    context = [0, 3, 5, 2]  # text "ab ab"
    proposal = drafter.propose(context, 4, PLAIN, rng)
    assert len(proposal.tokens) == 4 and all(VMAP.target_to_draft[x] >= 0 for x in proposal.tokens)
    mirrored = [DRAFT_BOS, 1, 2, 5]  # "a" "b" " ab"
    # The cache holds the mirrored context, then the drafted tokens as draft ids (all but the last).
    assert draft.tokens == mirrored + [int(VMAP.target_to_draft[x]) for x in proposal.tokens[:-1]]
    for q, x in zip(proposal.q_rows, proposal.tokens):
        assert q.n == len(TARGET_PIECES) and q.prob(x) > 0 and np.isclose(q.dense().sum(), 1.0)
        assert set(q.ids.tolist()) <= set(VMAP.shared_target.tolist())
    drafter.sync(context)
    assert draft.tokens == mirrored


@pytest.mark.parametrize("params", [PLAIN, PROCESSED])
def test_the_q_handed_over_is_the_law_the_draft_was_drawn_from(params):
    # N = 20,000 first drafts from one context; chi-square false-failure 1e-4. This is what
    # verification relies on: x ~ q for exactly the q in the proposal.
    _, draft, drafter = fake_pair("weak", seed=3)
    context = [0, 1, 4, 8]  # text "a ba"
    counts = np.zeros(len(TARGET_PIECES), dtype=np.int64)
    rng = np.random.default_rng(7)
    first = drafter.propose(context, 1, params, rng)
    for _ in range(20_000):
        proposal = drafter.propose(context, 1, params, rng)
        assert proposal.q_rows[0].dense().tolist() == first.q_rows[0].dense().tolist()
        counts[proposal.tokens[0]] += 1
    q = first.q_rows[0].dense()
    # and q is the draft's processed row restricted and renormalised, computed independently here
    row = probabilities(draft.table[3], params)  # the draft's last token is "ba" (3)
    expected = np.zeros(len(TARGET_PIECES))
    expected[VMAP.shared_target] = row[VMAP.shared_draft]
    assert np.allclose(q, expected / expected.sum())
    assert chi_square_pvalue(counts, q) > ALPHA


def test_no_shared_mass_after_the_filters_ends_the_proposal_before_a_draw():
    _, draft, drafter = fake_pair("weak")
    context = [0, 1, 6, 7]  # text "a" + "é": the draft's last token is its whole "é" (6)
    params = SamplingParams(temperature=1.0, top_k=3, top_p=1.0, min_p=0.0)  # top 3 after "é" are unshared
    assert drafter.propose(context, 4, params, np.random.default_rng(0)).tokens == []
    assert drafter.propose(context, 4, PLAIN, np.random.default_rng(0)).tokens != []  # without the filter, shared mass remains


def test_greedy_drafts_are_the_argmax_over_shared_ids_and_p_min_reads_the_softmax():
    _, draft, drafter = fake_pair("weak")
    context = [0, 1, 6, 7]
    proposal = drafter.propose(context, 1, GREEDY, np.random.default_rng(0))
    row = draft.table[6]
    best = max(VMAP.shared_draft, key=lambda d: row[d])
    assert proposal.tokens == [int(VMAP.draft_to_target[best])] and proposal.q_rows is None
    confidence = softmax_at(row, int(best))
    assert drafter.propose(context, 1, GREEDY, np.random.default_rng(0), p_min=confidence * 1.01).tokens == []
    assert drafter.propose(context, 1, GREEDY, np.random.default_rng(0), p_min=confidence * 0.99).tokens != []


def test_a_full_draft_context_proposes_nothing():
    _, draft, drafter = fake_pair("weak", n_ctx=4)
    assert drafter.propose([0, 3, 5], 4, GREEDY, np.random.default_rng(0)).tokens == []  # mirrored: 5 tokens, n_ctx 4


# -- the engine ---------------------------------------------------------------------------


def generate_ids(engine: Engine, prompt, params, seed=0, k=4, max_tokens=60) -> tuple[list[int], list[Round]]:
    events = list(engine.generate(prompt, GenerationConfig(max_tokens=max_tokens, sampling=params, seed=seed), draft_policy(k)))
    return [e.id for e in events if isinstance(e, Token)], [e for e in events if isinstance(e, Round)]


@pytest.mark.parametrize("kind", ["strong", "weak"])
@pytest.mark.parametrize("k", [1, 3, 6])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_output_equals_target_only_greedy(kind, k, seed):
    target, draft, drafter = fake_pair(kind, seed)
    prompt = [0, 3, 4]
    baseline, _ = generate_ids(Engine(target), prompt, GREEDY, max_tokens=80)
    got, rounds = generate_ids(Engine(target, drafter), prompt, GREEDY, k=k, max_tokens=80)
    assert got == baseline and len(got) == 80
    assert target.tokens == (prompt + got)[: len(target.tokens)] and len(target.tokens) >= len(prompt + got) - 1
    if kind == "strong":
        assert sum(r.accepted for r in rounds) > 10  # the drafts are used, not only tried


def first_two(engine: Engine, prompt, n: int, k: int, params) -> list[list[int]]:
    return [generate_ids(engine, prompt, params, seed=s, k=k, max_tokens=2)[0] for s in range(n)]


@pytest.mark.slow
@pytest.mark.parametrize("params", [PLAIN, PROCESSED], ids=["plain", "processed"])
@pytest.mark.parametrize("kind", ["strong", "weak"])
def test_sampled_first_two_tokens_follow_the_target(kind, params):
    # 10-token target vocabulary, k = 3, first two tokens of each generation against the exact
    # target chain. N = 20,000 generations; chi-square false-failure 1e-4.
    n, k = 20_000, 3
    target, _, drafter = fake_pair(kind, seed=5)
    prompt = [0, 1, 4]
    samples = first_two(Engine(target, drafter), prompt, n, k, params)
    law = first_two_law(lambda prefix: probabilities(target.table[(prompt + list(prefix))[-1]], params), n)
    assert first_two_pvalue(samples, law) > ALPHA
