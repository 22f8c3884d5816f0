"""Constrained decoding over the fake backend: the mask, the guide, and the engine's exactness under a grammar.

What is checked, against p' = normalise(p · mask) computed here independently (the allowed set
from a fresh llguidance matcher's `compute_bitmask`, the masked row by np.where):

- greedy: the output equals the masked argmax decode, for every drafter (the draft model,
  lookup, model+lookup, the cascade, another vocabulary) and for target-only decoding;
- sampled: the joint law of the first tokens of a grammar whose second token is forced and
  whose third token's allowed set depends on the first (so a matcher left in the wrong state
  shows), with the token and the block rule, a weak draft, with and without filters (the
  filters cut among the allowed tokens: top-k 3 of 5 allowed). N = 10,000 generations per
  test, chi-square false-failure 1e-4 (stat_checks.ALPHA), fixed seeds;
- the counts: Round.drafted is what the draft model picked (counted by wrapping its pick), and
  Round.forced the positions whose mask allowed one token (counted by replaying the output);
- planted bugs fail these checks: a matcher not rolled back after a rejection, a q handed to
  verify without the mask the draft was drawn under, a forced token counted as drafted.
"""

from __future__ import annotations


import numpy as np
import pytest

from fakes import MarkovModel, grammar_tokenizer, random_markov
from specdec_cli.decoding.engine import Engine, GenerationConfig
from specdec_cli.drafting.cascade import CascadeDrafter
from specdec_cli.drafting.combined import ModelAndLookup
from specdec_cli.drafting.lookup import LookupDrafter, LookupOptions
from specdec_cli.drafting.model import ModelDrafter
from specdec_cli.errors import GrammarError
from specdec_cli.events import Round, Source, Token
from specdec_cli.grammar import compile as grammars
from specdec_cli.grammar.guide import Guide
from specdec_cli.maths import masking
from specdec_cli.maths.filters import probabilities, proposal
from specdec_cli.maths.sampling import GREEDY, SamplingParams
from specdec_cli.tuning.policy import draft_policy
from stat_checks import ALPHA, PLAIN, chi_square_pvalue

# -- the mask -------------------------------------------------------------------------------


def test_masking_examples_of_the_docstring():
    words = np.array([0b0101], dtype=np.int32)
    mask = masking.Mask.of(words, 4)
    assert masking.masked_row(np.array([1, 5, 3, 4], np.float32), mask).tolist() == [1, -np.inf, 3, -np.inf]
    assert mask.allowed.tolist() == [0, 2] and mask.single is None and mask.among(np.array([1, 2, 3])).tolist() == [2]
    assert masking.Mask.of(np.array([0b0100], dtype=np.int32), 4).single == 2
    assert masking.Mask.of(np.array([-1, 0b1], dtype=np.int32), 40).allowed.tolist() == list(range(33))
    assert masking.single_allowed(np.array([0b0100], dtype=np.int32)) == 2
    assert masking.single_allowed(np.array([0, 0b1000], dtype=np.int32)) == 35
    assert masking.single_allowed(np.array([0b0101], dtype=np.int32)) is None
    assert masking.single_allowed(np.array([0, 0], dtype=np.int32)) is None
    assert masking.allowed_ids(np.array([0b0101], dtype=np.int32), 4).tolist() == [0, 2]
    assert masking.allowed_count(np.array([0b0101, 1], dtype=np.int32)) == 3
    assert masking.words_for(49152) == 1536 and masking.words_for(33) == 2
    assert masking.single_allowed(np.array([-(2**31)], dtype=np.int32)) == 31  # the sign bit is token 31


@pytest.mark.parametrize("n", [33, 1000, 49152])
@pytest.mark.parametrize("share", [0.0005, 0.01, 0.3, 0.995, 1.0])
def test_every_way_of_masking_equals_np_where(n, share):
    # Few words allowing anything (their blocks kept), few forbidding anything (their blocks masked),
    # neither (every block): one result, for rows a multiple of 32 long or not.
    rng = np.random.default_rng(n)
    row = rng.standard_normal(n).astype(np.float32)
    allowed = rng.random(n) < share
    allowed[rng.integers(n)] = True
    words = np.packbits(np.concatenate([allowed, np.zeros(-n % 32, bool)]), bitorder="little").view(np.int32)
    mask = masking.Mask.of(words, n)
    got = masking.masked_row(row, mask)
    assert got.dtype == np.float32 and np.array_equal(got, np.where(allowed, row, -np.inf))
    rows = np.stack([row, row[::-1].copy()])
    assert np.array_equal(masking.mask_rows(rows, [mask, mask])[1], np.where(allowed, row[::-1], -np.inf))
    short = row[: n - 3].copy()  # rows shorter than the mask (a vocabulary limit): the ids past them are dropped
    assert np.array_equal(mask.apply(short), np.where(allowed[: n - 3], row[: n - 3], -np.inf))
    assert masking.allowed_ids(words, n).tolist() == np.flatnonzero(allowed).tolist()


# -- a toy vocabulary: 26 letters and an end token ---------------------------------------

LETTERS = [bytes([c]) for c in b"abcdefghijklmnopqrstuvwxyz"]
EOS = 26
PIECES = LETTERS + [b""]
TOKENIZER = grammar_tokenizer(PIECES, EOS)
# Token 1 among five (top-k 3 cuts among them), 'd' forced, token 3 among three that depend on
# token 1, 'x' forced, then the end (forced).
BRANCHING = grammars.regex("(ad[bcg]|bd[ceh]|cd[abi]|ed[fgj]|fd[ahk])x")
L = {chr(97 + i): i for i in range(26)}


def allowed_after(grammar, tokenizer, prefix) -> np.ndarray:
    """The allowed tokens after `prefix`, from a fresh matcher (compute_bitmask: not the guide's way)."""
    matcher = grammar.matcher(tokenizer)
    assert matcher.consume_tokens(list(prefix))
    bits = np.unpackbits(np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8), bitorder="little")
    return bits[: tokenizer.vocab_size].astype(bool)


def masked_law(table, grammar, tokenizer, context, prefix, params) -> np.ndarray:
    """p' after the generated `prefix`: the target's row for the last token, masked, then processed."""
    last = (list(context) + list(prefix))[-1]
    row = np.where(allowed_after(grammar, tokenizer, prefix), table[last], -np.inf).astype(np.float32)
    return probabilities(row, params)


def masked_greedy(table, grammar, tokenizer, context, n, eos) -> list[int]:
    """The masked argmax decode, one token at a time, from a fresh matcher each step."""
    out: list[int] = []
    while len(out) < n:
        x = int(np.argmax(np.where(allowed_after(grammar, tokenizer, out), table[(list(context) + out)[-1]], -np.inf)))
        if x == eos:
            break
        out.append(x)
    return out


def generate(engine, prompt, grammar, params, seed=0, k=4, max_tokens=40, verify="token", policy=None):
    config = GenerationConfig(max_tokens=max_tokens, sampling=params, seed=seed, grammar=grammar, verify=verify)
    events = list(engine.generate(prompt, config, policy or (draft_policy(k) if engine.drafter is not None else None)))
    return [e for e in events if isinstance(e, Token)], [e for e in events if isinstance(e, Round)]


def letter_pair(seed: int, weak: bool = True) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    table = random_markov(27, rng, scale=1.5)
    noise = 3.0 if weak else 0.3
    return table, (table + rng.standard_normal(table.shape) * noise).astype(np.float32)


def engine_over(table, draft_table, drafter: str, pieces, eos: int, tokenizer) -> Engine:
    """A fake pair over `pieces` (the end `eos`) whose engine drafts with `drafter` ("none": target-only)."""
    target = MarkovModel(table, eos=eos, pieces=pieces)
    end = target.is_end_of_generation
    by_model = ModelDrafter(MarkovModel(draft_table, eos=eos, pieces=pieces), is_end=end)
    by_lookup = LookupDrafter(LookupOptions(ngram_sizes=(2, 1)), is_end=end)
    chosen = {"model": by_model, "lookup": by_lookup, "model+lookup": ModelAndLookup(by_model, by_lookup),
              "cascade": CascadeDrafter(by_model, by_lookup), "none": None}[drafter]  # fmt: skip
    return Engine(target, chosen, grammar_tokenizer=lambda: tokenizer)


def toy_engine(table, draft_table, drafter: str = "model") -> Engine:
    return engine_over(table, draft_table, drafter, PIECES, EOS, TOKENIZER)


# -- the guide ----------------------------------------------------------------------------


def test_guide_forces_rolls_back_and_keeps_ends_out_of_the_matcher():
    guide = Guide.over(BRANCHING.matcher(TOKENIZER), TOKENIZER)
    assert guide.forced() is None and guide.allows(L["a"]) and not guide.allows(L["d"])
    guide.room = 10
    for token in (L["a"], L["d"], L["b"], L["x"]):
        guide.push(token)
    assert guide.forced() == EOS  # the grammar is complete: only the end is allowed
    guide.push(EOS)
    assert len(guide.masks()) == 6 and [guide.forced_at(i) for i in range(5)] == [False, True, False, True, True]
    guide.settle(1, L["d"])  # 'a' kept, 'd' as the target's token: 'b', 'x' and the end are rolled back
    assert guide.depth == 0 and not guide.allows(L["e"]) and guide.allows(L["g"])  # after "ad": b, c or g
    guide.push(L["g"])
    guide.settle(0, L["c"])  # 'g' rejected, 'c' taken instead
    assert guide.forced() == L["x"]


def test_lookup_stops_before_the_first_token_the_grammar_forbids():
    guide = Guide.over(BRANCHING.matcher(TOKENIZER), TOKENIZER)
    guide.room = 8
    lookup = LookupDrafter(is_end=lambda t: t == EOS)
    out = lookup.take(iter([L["c"], L["d"], L["z"], L["x"]]), 8, guide=guide)
    assert out.tokens == [L["c"], L["d"]] and guide.depth == 2
    guide.room = 2
    assert lookup.take(iter([L["a"]]), 8, guide=guide).tokens == []  # full: nothing more


def test_a_grammar_error_names_llguidance_reason():
    with pytest.raises(GrammarError, match="JSON schema cannot be used: .*foo"):
        grammars.json_schema({"type": "foo"})
    with pytest.raises(GrammarError, match="GBNF grammar cannot be used"):
        grammars.gbnf('root ::= "a')
    with pytest.raises(GrammarError, match="at most 200,000"):
        grammars.regex("a" * (grammars.MAX_GRAMMAR_CHARS + 1))
    assert grammars.gbnf('root ::= "yes" | "no"').kind == "gbnf"


# -- greedy: the masked argmax --------------------------------------------------------------

JSON_PIECES = [b"{", b"}", b'"', b":", b" ", b",", b"a", b"b", b"c", b"1", b"2", b"3", b"true", b"false", b'{"', b'": ', b', "',
               b"name", b"age", b"ok", b'"}', b""]  # fmt: skip
JSON_EOS = len(JSON_PIECES) - 1
JSON_TOKENIZER = grammar_tokenizer(JSON_PIECES, JSON_EOS)
PERSON = grammars.json_schema({
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 5}, "age": {"type": "integer", "maximum": 300}, "ok": {"type": "boolean"}},
    "required": ["name", "age", "ok"], "additionalProperties": False,
})  # fmt: skip


def json_engine(table, draft_table, drafter: str) -> Engine:
    return engine_over(table, draft_table, drafter, JSON_PIECES, JSON_EOS, JSON_TOKENIZER)


@pytest.mark.parametrize("drafter", ["none", "model", "lookup", "model+lookup", "cascade"])
@pytest.mark.parametrize("k", [1, 4])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_output_is_the_masked_argmax(drafter, k, seed):
    rng = np.random.default_rng(seed)
    table = random_markov(len(JSON_PIECES), rng, scale=2.0)
    draft_table = (table + rng.standard_normal(table.shape) * 1.0).astype(np.float32)
    prompt = JSON_TOKENIZER.tokenize_str('{"name": "ab", "age": 12, "ok": true} ')
    expected = masked_greedy(table, PERSON, JSON_TOKENIZER, prompt, 40, JSON_EOS)
    tokens, rounds = generate(json_engine(table, draft_table, drafter), prompt, PERSON, GREEDY, k=k, max_tokens=40)
    assert [t.id for t in tokens] == expected
    # every key, quote and separator of the fixed keys is forced: free drafts, never counted as drafted
    forced = sum(r.forced for r in rounds)
    assert forced == sum(t.source is Source.FORCED for t in tokens) >= 6
    if drafter != "none":
        assert len(rounds) < len(tokens)  # forced tokens share passes


@pytest.mark.parametrize("seed", [0, 1])
def test_greedy_letters_with_every_drafter(seed):
    table, draft_table = letter_pair(seed)
    prompt = [L["a"], L["d"], L["b"], L["x"], L["c"]]
    expected = masked_greedy(table, BRANCHING, TOKENIZER, prompt, 10, EOS)
    for drafter in ("none", "model", "lookup", "model+lookup", "cascade"):
        tokens, _ = generate(toy_engine(table, draft_table, drafter), prompt, BRANCHING, GREEDY)
        assert [t.id for t in tokens] == expected, drafter


# -- sampled: the law of the first tokens -------------------------------------------------

FILTERED = SamplingParams(temperature=0.9, top_k=3, top_p=0.97, min_p=0.02)  # top-k 3 of the 5 allowed first tokens


def branching_law(table, prompt, params) -> dict[tuple[int, int], float]:
    """P(token 1, token 3) under p' (token 2 is forced 'd'), computed from fresh matchers."""
    p1 = masked_law(table, BRANCHING, TOKENIZER, prompt, (), params)
    law = {}
    for t1 in np.flatnonzero(p1):
        p3 = masked_law(table, BRANCHING, TOKENIZER, prompt, (int(t1), L["d"]), params)
        for t3 in np.flatnonzero(p3):
            law[(int(t1), int(t3))] = float(p1[t1] * p3[t3])
    return law


def branching_pvalue(engine, prompt, params, n, verify="token", k=3) -> float:
    table = engine.target.table
    law = branching_law(table, prompt, params)
    keys = list(law)
    counts = dict.fromkeys(keys, 0)
    for seed in range(n):
        tokens, _ = generate(engine, prompt, BRANCHING, params, seed=seed, k=k, max_tokens=3, verify=verify)
        got = [t.id for t in tokens]
        assert got[1] == L["d"] and tokens[1].source is Source.FORCED
        counts[(got[0], got[2])] += 1  # a key outside the law (probability 0) raises KeyError
    return chi_square_pvalue(np.array([counts[key] for key in keys]), np.array([law[key] for key in keys]))


N = 10_000


@pytest.mark.slow
@pytest.mark.parametrize("verify", ["token", "block"])
@pytest.mark.parametrize("params", [PLAIN, FILTERED], ids=["plain", "filtered"])
def test_sampled_law_of_the_draft_model_rounds(verify, params):
    table, draft_table = letter_pair(11)
    assert branching_pvalue(toy_engine(table, draft_table, "model"), [L["q"]], params, N, verify) > ALPHA


@pytest.mark.slow
@pytest.mark.parametrize("drafter", ["lookup", "cascade", "none"])
def test_sampled_law_with_lookup_the_cascade_and_target_only(drafter):
    table, draft_table = letter_pair(12)
    prompt = [L["a"], L["d"], L["b"], L["x"], L["b"], L["d"], L["c"], L["x"], L["q"]]  # lookup finds "d" and "x" followed
    assert branching_pvalue(toy_engine(table, draft_table, drafter), prompt, PLAIN, N) > ALPHA


@pytest.mark.slow
def test_a_q_not_masked_as_drawn_fails_the_law(monkeypatch):
    # Planted bug: the draft is drawn from q' but verify is handed the unmasked q (the mask applied
    # to p and the draw, not to the q verify reads): acceptance is over-estimated, the law bends.
    original = ModelDrafter.pick

    def pick(self, row, params, rng, p_min, mask=None):
        unmasked = row[: self.vocab_limit].copy()  # (the mask is applied to the row in place)
        picked = original(self, row, params, rng, p_min, mask)
        if picked is None or mask is None or picked[2] is None:
            return picked
        x, d, _ = picked
        return x, d, proposal(unmasked, params)

    monkeypatch.setattr(ModelDrafter, "pick", pick)
    table, draft_table = letter_pair(11)
    assert branching_pvalue(toy_engine(table, draft_table, "model"), [L["q"]], PLAIN, N) <= ALPHA


def test_a_matcher_not_rolled_back_fails(monkeypatch):
    # Planted bug: settle keeps the rejected drafts in the matcher. The next token is then read
    # against the wrong state: refused, or the output leaves the grammar.
    def settle(self, kept, token):
        self.push(token)
        self._taken.clear()
        self._masks.clear()

    monkeypatch.setattr(Guide, "settle", settle)
    table, draft_table = letter_pair(3)
    with pytest.raises((GrammarError, AssertionError)):
        for seed in range(50):
            tokens, rounds = generate(toy_engine(table, draft_table, "model"), [L["q"]], BRANCHING, PLAIN, seed=seed)
            assert all(r.accepted == r.drafted for r in rounds)  # never rejected: nothing to roll back yet
            assert allowed_after(BRANCHING, TOKENIZER, [t.id for t in tokens])[EOS]


# -- the counts ---------------------------------------------------------------------------


def counted_run(seed: int, params) -> tuple[list[Token], list[Round], int]:
    """A run of the JSON grammar with the draft model, and how many tokens the draft model picked."""
    rng = np.random.default_rng(seed)
    table = random_markov(len(JSON_PIECES), rng, scale=2.0)
    engine = json_engine(table, (table + rng.standard_normal(table.shape) * 0.5).astype(np.float32), "model")
    picked = []
    original = engine.drafter.pick

    def pick(*args, **kw):
        out = original(*args, **kw)
        picked.append(out is not None)
        return out

    engine.drafter.pick = pick
    tokens, rounds = generate(engine, [0], PERSON, params, seed=seed, k=4, max_tokens=40)
    return tokens, rounds, sum(picked)


def replayed_forced(tokens: list[Token]) -> int:
    """How many output positions had one allowed token, replaying the output through fresh matchers."""
    ids = [t.id for t in tokens]
    return sum(int(allowed_after(PERSON, JSON_TOKENIZER, ids[:i]).sum() == 1) for i in range(len(ids)))


@pytest.mark.parametrize("params", [GREEDY, PLAIN], ids=["greedy", "plain"])
@pytest.mark.parametrize("seed", [0, 1])
def test_drafted_counts_the_models_picks_and_forced_the_single_token_positions(seed, params):
    tokens, rounds, picks = counted_run(seed, params)
    assert sum(r.drafted for r in rounds) == picks
    assert sum(r.forced for r in rounds) == replayed_forced(tokens) > 0


def test_a_forced_token_counted_as_drafted_fails(monkeypatch):
    # Planted bug: forced positions taken for the drafter's own.
    monkeypatch.setattr(Guide, "forced_at", lambda self, depth: False)
    tokens, rounds, picks = counted_run(0, GREEDY)
    assert sum(r.drafted for r in rounds) != picks or sum(r.forced for r in rounds) != replayed_forced(tokens)


# -- another vocabulary -------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("params", [GREEDY, PLAIN], ids=["greedy", "plain"])
def test_cross_vocabulary_drafts_under_the_target_grammar(seed, params):
    # The fake pair of test_cross_vocab (another vocabulary, seven shared ids); its special id 0 ends
    # the output. Greedy: the masked argmax; sampled: every output is in the grammar.
    from test_cross_vocab import TARGET_PIECES, fake_pair

    target, _, drafter = fake_pair("strong", seed)
    target.eos = 0
    tokenizer = grammar_tokenizer(TARGET_PIECES, 0)
    grammar = grammars.regex("(ab|ba)[ab]{1,4} c[ab]{1,3}")
    prompt = [0, 3, 4]
    engine = Engine(target, drafter, grammar_tokenizer=lambda: tokenizer)
    tokens, rounds = generate(engine, prompt, grammar, params, seed=seed, max_tokens=20)
    ids = [t.id for t in tokens]
    if params.greedy:
        assert ids == masked_greedy(target.table, grammar, tokenizer, prompt, 20, 0)
    assert allowed_after(grammar, tokenizer, ids)[0]  # complete: the end is allowed
    assert sum(r.drafted for r in rounds) > 0
