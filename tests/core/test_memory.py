"""The drafting memory (drafting/memory.py): recall across calls, its bound, the cache file as
untrusted input, and what each proposer earned (the policy starts each call from it).

Exactness with the memory choosing: greedy output equals target-only's over calls whose
choices follow the earned record; and the first two tokens of N = 20,000 generations at T = 1
(fixed seeds) follow the target's law, chi-square simulated at false-failure rate 1e-4
(stat_checks.ALPHA), while the policy chooses between this call's lookup match, the memory's and
a draft model from a record that every generation updates. No models, except the one CLI test
at the end (marker `model`)."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
from collections import Counter
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fakes import MarkovModel, random_markov
from specdec_cli.drafting.cascade import CascadeDrafter
from specdec_cli.drafting.combined import ModelAndLookup
from specdec_cli.drafting.lookup import LookupDrafter, LookupOptions, MemoryMatch, lone, memory_class
from specdec_cli.drafting.model import ModelDrafter
from specdec_cli.decoding.engine import Engine, GenerationConfig
from specdec_cli.events import Earned, Round, Token
from specdec_cli.drafting.memory import RIVAL_SHARE, BadCache, DraftMemory, Recall, read_cache, read_earned, recalled, resumed, save_cache, uncontested
from specdec_cli.drafting.ngram import agreement, agreements, longest
from specdec_cli.tuning.cost_curve import CostCurve
from specdec_cli.tuning.estimates import Acceptance
from specdec_cli.tuning.adaptive import AdaptivePolicy
from specdec_cli.tuning.policy import draft_policy
from specdec_cli.maths.filters import probabilities
from specdec_cli.maths.sampling import GREEDY
from stat_checks import ALPHA, PLAIN, first_two_law, first_two_pvalue

FP = "fingerprint-a"
ROOT = Path(__file__).resolve().parents[2]


def test_recall_is_what_followed_the_longest_match_in_an_earlier_call():
    memory = DraftMemory(100)
    memory.add([5, 6, 7, 8, 9])
    memory.add([1, 7, 3])
    assert memory.match([1, 2, 6, 7]).tokens == [8, 9]  # (6, 7) beats the newer (7,)
    assert memory.match([1, 2, 6, 7]).length == 2
    assert memory.match([0, 7]) == Recall(tokens=[], length=1, witnesses=1)  # (7,) ends two calls alike, followed by 8 and 3: contested
    assert memory.match([42]) is None


def test_an_earlier_occurrence_that_agrees_as_long_and_goes_on_alike_witnesses_the_recall():
    memory = DraftMemory(100)
    memory.add([1, 2, 3, 4, 10, 11])  # call 1 opened with 10, 11
    assert memory.match([0, 2, 3, 4]) == Recall(tokens=[10, 11], length=3, witnesses=0)  # one call alone wrote it
    memory.add([5, 2, 3, 4, 10, 12])  # call 2 opened alike, then went on another way
    assert memory.match([0, 2, 3, 4]) == Recall(tokens=[10], length=3, witnesses=1)
    memory.add([6, 7, 3, 4, 10, 11])  # agrees with the context for 2 tokens: 2 < 0.75 x 3, no witness
    assert memory.match([0, 2, 3, 4]).witnesses == 1


def test_of_an_ngrams_occurrences_the_one_that_agrees_longest_wins():
    # Three earlier calls end their key (7, 8) differently; the context agrees with the oldest
    # for 5 tokens, with the others for 3. A suffix index takes the longest: the oldest's 40.
    memory = DraftMemory(30)
    memory.add([1, 2, 3, 7, 8, 40])
    memory.add([9, 3, 7, 8, 41])
    memory.add([6, 3, 7, 8, 42])
    assert memory.match([1, 2, 3, 7, 8]) == Recall(tokens=[40], length=5)
    assert memory.match([5, 3, 7, 8]) == Recall(tokens=[], length=3, witnesses=2)  # a tie of 3, three ways on: contested
    # Only the newest `places` occurrences are measured: with one, the newest wins whatever agrees.
    newest_only = DraftMemory(30, places=1)
    for seq in memory.sequences:
        newest_only.add(seq)
    assert newest_only.match([1, 2, 3, 7, 8]) == Recall(tokens=[42], length=3)
    # Eviction drops the evicted call's occurrences and keeps the others'.
    memory.add(list(range(50, 60)))
    memory.add(list(range(60, 80)))  # 30 tokens at most: the first three calls (16 tokens) go
    assert memory.match([3, 7, 8]) is None and memory.match([55, 56]).tokens == [57, 58, 59]


def test_the_memory_proposes_an_extractions_frame_and_not_the_previous_calls_values():
    # Three earlier calls answered H F1 F2 <value> E (a chat header, the frame `{"name": "`, a
    # name, the rest); a fourth call's context ends in the header, then in the frame.
    header, frame, end = [90, 91], [10, 11, 12], [13, 14]
    memory = DraftMemory(100)
    for prompt, value in ((1, 50), (2, 51), (3, 52)):
        memory.add([prompt, 80, *header, *frame, value, *end])
    assert memory.match([4, 80, *header]) == Recall(tokens=frame, length=3, witnesses=2)  # the frame, then three names: stop
    assert memory.match([4, 80, *header, *frame]) == Recall(tokens=[], length=6, witnesses=2)  # the name: contested
    # With one earlier call there is no rival, and its name is proposed (the memory cannot know yet).
    alone = DraftMemory(100)
    alone.add([1, 80, *header, *frame, 50, *end])
    recall = alone.match([4, 80, *header, *frame])
    assert recall.tokens[:1] == [50] and recall.witnesses == 0


def test_a_rival_agrees_with_the_context_for_three_quarters_of_the_best_ones_agreement():
    # RIVAL_SHARE's examples: agreements 5 (then 40) and 3 (then 41): no rival; 6 and 5: rivals.
    memory = DraftMemory(100)
    memory.add([1, 2, 3, 4, 5, 40])
    memory.add([9, 9, 3, 4, 5, 41])
    assert memory.match([1, 2, 3, 4, 5]) == Recall(tokens=[40], length=5)
    memory = DraftMemory(100)
    memory.add([1, 2, 3, 4, 5, 6, 40])
    memory.add([9, 2, 3, 4, 5, 6, 41])
    assert memory.match([1, 2, 3, 4, 5, 6]) == Recall(tokens=[], length=6, witnesses=1)
    assert RIVAL_SHARE * 6 <= 5 and RIVAL_SHARE * 5 > 3


def test_uncontested_docstring_examples():
    assert uncontested([8, 9, 4], [[8, 9, 5], [8]]) == 2
    assert uncontested([8, 9, 4], []) == 3


def test_agreement_docstring_examples():
    assert agreement([4, 2, 3, 9], 3, [1, 2, 3]) == 2
    assert agreement([4, 2, 3, 9], 3, [1, 2, 3], cap=1) == 1
    assert longest(agreements([1, 2, 3], [("a", 3, [1, 2, 3, 7]), ("b", 2, [5, 3, 8])])) == (3, "a", 3)
    assert longest(agreements([1, 2, 3], [("a", 2, [5, 3, 8]), ("b", 2, [6, 3, 9])])) == (1, "b", 2)  # a tie: the newest
    assert agreements([1, 2, 3], [("a", 3, [1, 2, 3, 7]), ("b", 2, [5, 3, 8])]) == [(1, "b", 2), (3, "a", 3)]


def test_the_bound_drops_the_oldest_calls_first():
    memory = DraftMemory(8)
    memory.add([1, 2, 3, 4])
    memory.add([5, 6, 7, 8])
    memory.add([9, 10, 11])
    assert len(memory) == 7 and list(memory.sequences) == [[5, 6, 7, 8], [9, 10, 11]]
    assert memory.match([1, 2]) is None and memory.match([6]).tokens == [7, 8]
    memory.add(list(range(20, 40)))  # one call longer than the bound: its tail
    assert list(memory.sequences) == [list(range(32, 40))]


def test_lookup_drafts_from_memory_with_longer_proposals_for_longer_matches():
    memory = DraftMemory(1000)
    earlier = list(range(3, 40))  # a long "JSON" the previous call wrote
    memory.add([1, 2] + earlier)
    lookup = LookupDrafter(LookupOptions(max_tokens=4), memory=memory)
    context = [0, 9] + earlier[:20]
    (first, *_) = lookup.candidates(context)
    assert first.name == "lookup:memory:16+"
    proposal = first.propose(context, 64, GREEDY, np.random.default_rng(0))
    assert proposal.tokens == earlier[20:37] and proposal.q_rows is None  # 2 x a 20-token match, capped by what is left (17)
    short = lookup.candidates([0, 9, 3, 4, 5])[0]  # a match of 3: twice as many tokens, above the lookup's own cap of 4
    assert short.name == "lookup:memory:once:3-5" and len(short.propose([0, 9, 3, 4, 5], 64, GREEDY, np.random.default_rng(0)).tokens) == 6
    assert lookup.candidates([0, 9, 3, 4]) == []  # a match of 2 in another text: below MEMORY_MIN_MATCH, not proposed


def test_a_short_match_one_earlier_call_alone_continued_has_its_own_class_and_waits_out_round_1():
    # Call 1: prompt 1, the chat's header (80, 90, 91), its answer 10 11 12 50.
    memory = DraftMemory(100)
    memory.add([1, 80, 90, 91, 10, 11, 12, 50])
    lookup = LookupDrafter(memory=memory)
    prompt = [2, 80, 90, 91]
    lookup.prefill(prompt[:-1])  # as the engine prefills: all of the prompt but round 1's token
    assert lookup.candidates(prompt) == []  # round 1: how call 1 alone opened, 3 tokens of header
    (later,) = lookup.candidates(prompt + [10])  # round 2 on: proposed, in a class of its own
    assert (later.name, later.recall.tokens) == ("lookup:memory:once:3-5", [11, 12, 50])
    # lone's and memory_class's docstring examples
    assert [lone(Recall([1], n, w)) for n, w in ((7, 0), (7, 1), (20, 0))] == [True, False, False]
    assert [memory_class(Recall([1], n, w)) for n, w in ((7, 1), (7, 0), (20, 0))] == ["lookup:memory:6+", "lookup:memory:once:6+", "lookup:memory:16+"]
    memory.add([3, 80, 90, 91, 10, 11, 13, 51])  # call 2 opened alike: a witness
    (opening,) = lookup.candidates(prompt)
    assert (opening.name, opening.recall.tokens) == ("lookup:memory:3-5", [10, 11])
    # A passage of PASSAGE (16) tokens or more is proposed in round 1 whoever wrote it.
    earlier = list(range(100, 130))
    memory.add([7] + earlier)
    passage = LookupDrafter(memory=memory)
    prompt = [0] + earlier[:18]
    passage.prefill(prompt[:-1])
    assert [c.name for c in passage.candidates(prompt)] == ["lookup:memory:16+"]


def test_the_engine_opens_with_the_draft_model_where_one_earlier_call_alone_wrote_the_opening():
    table = random_markov(6, np.random.default_rng(5), scale=1.5)
    prompt = [1, 2, 3, 4, 1, 2]

    def first_drafter(*earlier, prefill_draft=True):
        memory = DraftMemory(1000)
        for seq in earlier:
            memory.add(seq)
        memory.earned.update({"lookup:memory:3-5": WINNING, "lookup:memory:once:3-5": WINNING})  # both won in earlier calls
        engine = Engine(MarkovModel(table), ModelAndLookup(ModelDrafter(MarkovModel(table)), LookupDrafter(memory=memory)), earned=memory.earned)
        policy = frozen_auto(5e-3)
        policy.prefill_draft = prefill_draft  # False: as a request batched beside others (batch.BatchedPolicy)
        rounds = engine.generate(prompt, GenerationConfig(max_tokens=5, sampling=GREEDY), policy)
        return next(e.drafter for e in rounds if isinstance(e, Round))

    assert first_drafter([0, 3, 4, 1, 2, 5, 0, 3]) == "model"  # a lone 4-token match
    assert first_drafter([0, 3, 4, 1, 2, 5, 0, 3], [9, 3, 4, 1, 2, 5, 0]) == "lookup:memory:3-5"  # witnessed
    # The draft model not prefilled: lookup still takes in the prompt, so round 1 is known.
    assert first_drafter([0, 3, 4, 1, 2, 5, 0, 3], prefill_draft=False) == "model"


def test_a_repeated_workload_drafts_from_the_earlier_call_and_stays_exact():
    """Greedy decoding with the memory equals target-only decoding, and the second call of the
    same task accepts far more drafts per pass than the first."""
    rng = np.random.default_rng(3)
    table = rng.standard_normal((40, 40)).astype(np.float32) * 3
    target = MarkovModel(table)
    memory = DraftMemory(10_000)
    config = GenerationConfig(max_tokens=30, sampling=GREEDY)
    per_pass = []
    for prompt in ([1, 2, 3], [7, 2, 3]):
        engine = Engine(target, LookupDrafter(LookupOptions(), memory=memory))
        events = list(engine.generate(prompt, config, draft_policy(16)))
        out = [e.id for e in events if isinstance(e, Token)]
        alone = [e.id for e in Engine(target).generate(prompt, config) if isinstance(e, Token)]
        assert out == alone
        rounds = [e for e in events if isinstance(e, Round)]
        per_pass.append(len(out) / len(rounds))
        memory.add(prompt + out)
    assert per_pass[1] > 2 * per_pass[0], per_pass


def test_the_cache_file_round_trips_and_merges_what_others_saved(tmp_path):
    path = tmp_path / "cache.json"
    assert save_cache(path, [[1, 2, 3]], FP, 10, 100) is None
    assert save_cache(path, [[4, 5]], FP, 10, 100) is None  # another process's call, saved after
    assert list(read_cache(path, FP, 10, 100).sequences) == [[1, 2, 3], [4, 5]]
    assert not list(tmp_path.glob(".cache.json.*"))  # no temporary file left


HEAD = b'{"format": "specdec-draft-cache", "version": 4, "tokenizer": "fingerprint-a", '


@pytest.mark.parametrize(
    "content, reason",
    [
        (HEAD + b'"sequences": [[1, 2', "not valid JSON (truncated?)"),
        (b"\xff\xfe", "not valid JSON"),
        (b'[1, 2]', "is not a specdec draft cache"),
        (b'{"format": "specdec-draft-cache", "version": 1, "tokenizer": "fingerprint-a", "sequences": []}', "has format version 1, this specdec reads 4"),
        (b'{"format": "specdec-draft-cache", "version": 2, "tokenizer": "fingerprint-a", "sequences": [], "earned": {}}', "has format version 2, this specdec reads 4"),
        (b'{"format": "specdec-draft-cache", "version": 3, "tokenizer": "fingerprint-a", "sequences": [], "earned": {}}', "has format version 3, this specdec reads 4"),
        (b'{"format": "specdec-draft-cache", "version": 4, "tokenizer": "fingerprint-b", "sequences": [], "earned": {}}', "was written for another tokenizer"),
        (HEAD + b'"sequences": [[1, 99]], "earned": {}}', "token ids outside the vocabulary of 10"),
        (HEAD + b'"sequences": [[1, true]], "earned": {}}', "token ids outside"),
        (HEAD + b'"sequences": [[1, 2, 3, 4, 5, 6]], "earned": {}}', "holds 6 tokens, over --draft-cache-size 5"),
        (HEAD + b'"sequences": {"a": 1}, "earned": {}}', "holds no list of token sequences"),
        (HEAD + b'"sequences": []}', "holds no record of what each drafter earned"),
        (HEAD + b'"sequences": [], "earned": {"model": {"hits": [2.0], "trials": [1.0]}}}', "malformed record for drafter 'model'"),
        (HEAD + b'"sequences": [], "earned": {"model": {"hits": [1.0], "trials": [1.0, 2.0]}}}', "malformed record"),
        (HEAD + b'"sequences": [], "earned": {"model": {"hits": [-1.0], "trials": [1.0]}}}', "malformed record"),
        (HEAD + b'"sequences": [], "earned": {"model": {"hits": [0], "trials": [NaN]}}}', "malformed record"),
        (HEAD + b'"sequences": [], "earned": {"model": {"hits": [true], "trials": [1]}}}', "malformed record"),
        (HEAD + b'"sequences": [], "earned": {"model": [1, 2]}}', "malformed record"),
        (HEAD + b'"sequences": [], "earned": {"model": {"hits": [1], "trials": [1], "draft_cost": "0.4"}}}', "malformed record"),
        (HEAD + b'"sequences": [], "earned": {"model": {"hits": [1], "trials": [1], "draft_cost": -0.4}}}', "malformed record"),
    ],
)
def test_an_untrusted_file_is_refused_in_one_line_and_rebuilt(tmp_path, content, reason):
    path = tmp_path / "cache.json"
    path.write_bytes(content)
    with pytest.raises(BadCache) as caught:
        read_cache(path, FP, 10, 5)
    assert reason in str(caught.value) and "\n" not in str(caught.value)
    note = save_cache(path, [[3, 4]], FP, 10, 5)
    assert note is not None and note.endswith("; rebuilding it")
    assert list(read_cache(path, FP, 10, 5).sequences) == [[3, 4]]


def _save_many(path: str, base: int) -> None:
    for i in range(20):
        save_cache(Path(path), [[base, i]], FP, 100, 10_000)


def test_two_processes_saving_at_once_lose_nothing(tmp_path):
    path = tmp_path / "cache.json"
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_save_many, args=(str(path), base)) for base in (50, 60)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
        assert w.exitcode == 0
    saved = list(read_cache(path, FP, 100, 10_000).sequences)
    assert sorted(map(tuple, saved)) == sorted((base, i) for base in (50, 60) for i in range(20))


@pytest.mark.model
def test_run_with_a_draft_cache_drafts_from_the_previous_call(builtin_paths, tmp_path):
    """Two identical greedy calls: the second finds its whole answer in the cache."""
    cache = tmp_path / "draft.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    outs = []
    for _ in range(2):
        proc = subprocess.run(
            [sys.executable, "-m", "specdec_cli.cli", "run", "--temperature", "0", "-n", "40", "--drafter", "lookup", "-k", "16",
             "--draft-cache", str(cache), "--json", "--raw", "The capital of France is"],
            capture_output=True, text=True, env=env, cwd=ROOT, timeout=300, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
        outs.append(json.loads(proc.stdout))
    assert outs[0]["text"] == outs[1]["text"]
    assert outs[1]["stats"]["tokens_per_pass"] > 2 * outs[0]["stats"]["tokens_per_pass"]
    cache.write_text("{truncated")
    proc = subprocess.run(
        [sys.executable, "-m", "specdec_cli.cli", "run", "--temperature", "0", "-n", "4", "--drafter", "lookup", "--draft-cache", str(cache),
         "--no-stats", "--raw", "Hello"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    said = [l for l in proc.stderr.splitlines() if "draft cache" in l]
    assert said == [f"specdec: draft cache {cache} is not valid JSON (truncated?); starting a new one"]
    assert json.loads(cache.read_text())["version"] == 4  # rebuilt


# -- what each proposer earned ----------------------------------------------------------


FROZEN_COSTS = CostCurve(draft_step=2e-3, target_batch=tuple(10e-3 + 0.5e-3 * n for n in range(17)))


def frozen_auto(draft_step: float = 2e-3) -> AdaptivePolicy:
    """`auto` on a fixed cost curve (by default a draft step is a fifth of a target step), so choices depend on acceptance only."""
    return AdaptivePolicy(costs=dataclasses.replace(FROZEN_COSTS, draft_step=draft_step), learn_costs=False)


def test_docstring_examples_of_the_record():
    acceptance = Acceptance(2, 0.7)
    acceptance.resume([0.9, 0.0, 5.0], [1.9, 0.9, 5.0])
    assert acceptance.counts() == ((0.9, 0.0), (1.9, 0.9))
    assert read_earned({"model": {"hits": [0.9], "trials": [1.9], "draft_cost": 0.4}}, "f") == {"model": Earned((0.9,), (1.9,), 0.4)}
    assert recalled({"cascade:2": Earned((0.9,), (1.0,)), "lookup:memory:6+": Earned((1.2,), (9.5,))}) == {"lookup:memory:6+": Earned((1.2,), (9.5,))}
    memory = DraftMemory(100)
    memory.add([1, 7, 9, 5, 6, 8])
    here, there = LookupDrafter(memory=memory).candidates([5, 6, 7, 9, 5, 6])
    assert (here.name, here.start) == ("lookup:2", 2)
    assert isinstance(there, MemoryMatch) and (there.name, there.recall.tokens) == ("lookup:memory:once:3-5", [8])


def test_this_calls_own_match_outranks_the_memorys():
    """A fixed k takes the first candidate: this call's match, though the memory's agrees longer."""
    memory = DraftMemory(100)
    memory.add([1, 7, 9, 5, 6, 8])
    context = [5, 6, 7, 9, 5, 6]
    engine = Engine(MarkovModel(random_markov(10, np.random.default_rng(0))), LookupDrafter(memory=memory))
    first = next(e for e in engine.generate(context, GenerationConfig(max_tokens=3, sampling=GREEDY), draft_policy(2)) if isinstance(e, Round))
    assert first.drafter == "lookup:2"


def test_a_source_that_lost_in_earlier_calls_is_only_probed():
    """Resumed with a losing record, the memory's class is passed over for the draft model and
    tried now and then (after 32, then 64 rounds: policy.RESUMED_BACKOFF, as its record holds more
    than MIN_TRIALS); without the record its prior (0.9 for a match of 6 or more) makes it the
    first choice beside a draft model whose step costs half a target step (against one that
    costs a fifth it does not beat the model's next token: policy.memory_or_model)."""
    sources = ["lookup:memory:6+", "model"]
    assert frozen_auto(5e-3).choose(sources, 16)[0] == "lookup:memory:6+"
    assert frozen_auto().choose(sources, 16)[0] == "model"
    policy = frozen_auto(5e-3)
    policy.resume({"lookup:memory:6+": Earned(hits=(0.5,) + (0.0,) * 15, trials=(9.0,) + (0.5,) * 15)})
    chosen = []
    for _ in range(120):
        name, k = policy.choose(sources, 16)
        chosen.append(name)
        accepted = k if name == "model" else 0
        policy.observe(Round(drafted=k, accepted=accepted, draft_seconds=2e-3 * k, draft_decode_seconds=0.0, target_seconds=0.01,
                             seconds=0.01 + 2e-3 * k, drafter=name, k=k))  # fmt: skip
    probes = [i for i, name in enumerate(chosen) if name != "model"]
    assert chosen[0] == "model" and probes == [32, 97], probes  # rounds 33 and 98 (back-off 32, then 64)
    assert policy.earned()["lookup:memory:6+"].trials[0] > 9.0  # the probes were counted on top of the record


class Watching(AdaptivePolicy):
    """`frozen_auto`, recording in `handed` what each call's `resume` is handed (the engine's
    `earned`): on fixed costs its choices, and so what each call drafts, do not hang on timings."""

    def __init__(self, handed: list) -> None:
        super().__init__(costs=FROZEN_COSTS, learn_costs=False)
        self.handed = handed

    def resume(self, earned):
        self.handed.append(dict(earned))
        super().resume(earned)


def test_the_engine_starts_each_call_from_the_record_and_writes_it_back(tmp_path):
    """memory.earned fills during a call; the next engine's policy resumes from it; the file keeps it."""
    rng = np.random.default_rng(5)
    table = random_markov(12, rng, scale=3.0)
    memory = DraftMemory(10_000)
    resumed = []

    for prompt in ([1, 2, 3, 1, 2], [4, 2, 3, 1, 2], [5, 4, 2, 3, 1]):  # the first call starts from nothing and records its lookup rounds
        engine = Engine(MarkovModel(table), LookupDrafter(memory=memory), earned=memory.earned)
        out = list(engine.generate(prompt, GenerationConfig(max_tokens=40, sampling=GREEDY), Watching(resumed)))[-1].tokens
        memory.add(prompt + list(out))
    assert resumed[0] == {} and resumed[1] and resumed[2] and set(resumed[2]) <= set(memory.earned)
    assert all(len(e.hits) == len(e.trials) and all(h <= x for h, x in zip(e.hits, e.trials)) for e in memory.earned.values())
    path = tmp_path / "cache.json"
    save_cache(path, [], FP, 12, 10_000, memory.earned)
    again = read_cache(path, FP, 12, 10_000).earned
    assert set(again) == set(memory.earned)
    for name, e in memory.earned.items():
        assert np.allclose(again[name].trials, e.trials, atol=1e-4) and np.allclose(again[name].hits, e.hits, atol=1e-4)
    save_cache(path, [], FP, 12, 10_000, {"cascade:memory:3-5": Earned((1.0,), (2.0,))})  # another process: its proposer joins
    assert read_cache(path, FP, 12, 10_000).earned["cascade:memory:3-5"] == Earned((1.0,), (2.0,))
    assert set(memory.earned) < set(read_cache(path, FP, 12, 10_000).earned)
    save_cache(path, [], FP, 12, 10_000, {"cascade:2": Earned((1.0,), (2.0,))})  # the cascade's draft-model rounds: not the memory's
    assert "cascade:2" not in read_cache(path, FP, 12, 10_000).earned
    save_cache(path, [], FP, 12, 10_000, {"model": Earned((1.0,), (2.0,), 0.25)})
    assert read_cache(path, FP, 12, 10_000).earned["model"] == Earned((1.0,), (2.0,), 0.25)


def test_the_draft_models_record_is_carried_from_call_to_call_with_lookups():
    """Lookup's proposals, in the call's context and in the memory, and the draft model start each
    call from what they earned before (the draft step's cost with them where a call timed it:
    tests/core/test_policy.py): counted, the calls drafted with all three, the later calls'
    policies were handed their records, and the memory kept nothing else (the cascade's
    draft-model rounds, had there been any, are not kept: `recalled`)."""
    rng = np.random.default_rng(5)
    table = random_markov(8, rng, scale=3.0)
    memory = DraftMemory(10_000)
    resumed, drafted = [], set()

    for prompt in ([1, 2, 3, 1, 2, 3], [1, 2, 3, 4, 1, 2, 3], [5, 1, 2, 3, 4, 1, 2]):
        draft = MarkovModel(table + rng.standard_normal(table.shape).astype(np.float32))
        engine = Engine(MarkovModel(table), ModelAndLookup(ModelDrafter(draft), LookupDrafter(memory=memory)), earned=memory.earned)
        events = list(engine.generate(prompt, GenerationConfig(max_tokens=60, sampling=GREEDY), Watching(resumed)))
        drafted |= {e.drafter.rsplit(":", 1)[0] for e in events if isinstance(e, Round) and e.drafter}
        memory.add(prompt + list(events[-1].tokens))
    assert {"model", "lookup", "lookup:memory"} <= drafted, drafted
    assert resumed[0] == {} and resumed[1] and resumed[2], resumed  # nothing before the first call
    assert any(name.startswith("lookup:memory:") for name in resumed[2]), resumed
    assert "model" in resumed[1] and "model" in resumed[2], resumed
    assert all(name == "model" or name.startswith("lookup:") for name in memory.earned), memory.earned


def test_resumed_leaves_the_draft_models_record_out_of_a_cascades_call_only():
    """`resumed`'s example: the model's record and a cascade guess's from the memory."""
    a, b = Earned((0.9,), (1.0,), 0.5), Earned((1.2,), (2.0,), 0.02)
    earned = {"model": a, "cascade:memory:3-5": b, "cascade:2": Earned((1.0,), (1.0,))}
    assert resumed(earned, "model+lookup") == {"model": a, "cascade:memory:3-5": b}
    assert resumed(earned, "cascade") == {"cascade:memory:3-5": b}


def test_a_cascades_call_starts_without_the_draft_models_record_and_leaves_it_in_the_memory():
    """A model+lookup call writes the draft model's record; the cascade's calls after it are not
    handed it (counted: each policy's resume is watched), and the memory still holds a draft
    model's record for the next model+lookup call, which is handed it."""
    rng = np.random.default_rng(5)
    table = random_markov(8, rng, scale=3.0)
    memory = DraftMemory(10_000)
    resumed_by = []

    drafters = (ModelAndLookup, CascadeDrafter, CascadeDrafter, ModelAndLookup)
    for make, prompt in zip(drafters, ([1, 2, 3, 1, 2, 3], [1, 2, 3, 4, 1, 2, 3], [5, 1, 2, 3, 4, 1, 2], [2, 3, 1, 2, 3])):
        draft = MarkovModel(table + rng.standard_normal(table.shape).astype(np.float32))
        engine = Engine(MarkovModel(table), make(ModelDrafter(draft), LookupDrafter(memory=memory)), earned=memory.earned)
        events = list(engine.generate(prompt, GenerationConfig(max_tokens=60, sampling=GREEDY), Watching(resumed_by)))
        memory.add(prompt + list(events[-1].tokens))
        assert "model" in memory.earned, make
    assert resumed_by[0] == {} and "model" not in resumed_by[1].keys() | resumed_by[2].keys() and "model" in resumed_by[3], resumed_by


def test_greedy_output_is_the_targets_while_the_memory_and_its_record_choose():
    """On fixed costs (`frozen_auto`): which proposers are chosen must not hang on this machine's
    timings (with costs learned from the fakes' wall time, the memory's guesses were chosen in some
    runs and not in others)."""
    rng = np.random.default_rng(11)
    table = random_markov(8, rng, scale=3.0)
    memory = DraftMemory(10_000)
    config = GenerationConfig(max_tokens=60, sampling=GREEDY)
    chosen = set()
    for prompt in ([1, 2, 3], [7, 2, 3], [1, 2, 3, 4], [5, 6, 2, 3]):
        draft = MarkovModel(table + rng.standard_normal(table.shape).astype(np.float32))
        engine = Engine(MarkovModel(table), ModelAndLookup(ModelDrafter(draft), LookupDrafter(memory=memory)), earned=memory.earned)
        events = list(engine.generate(prompt, config, frozen_auto()))
        assert events[-1].tokens == list(Engine(MarkovModel(table)).generate(prompt, config))[-1].tokens
        chosen |= {e.drafter.rsplit(":", 1)[0] for e in events if isinstance(e, Round) and e.drafter}
        memory.add(prompt + list(events[-1].tokens))
    assert {"model", "lookup", "lookup:memory"} <= chosen, chosen


N_FIRST_TWO = 20_000
WINNING = Earned(hits=(9.0,) * 16, trials=(9.2,) * 16)
LOSING = Earned(hits=(0.2,) + (0.0,) * 15, trials=(9.0,) + (0.5,) * 15)


@pytest.mark.slow
def test_the_first_two_tokens_follow_the_target_while_the_memory_chooses():
    """N = 20,000 generations of 5 tokens at T = 1 (seed = generation number), chi-square on the
    first two tokens at false-failure rate 1e-4. Before each generation the memory's record says
    whether its match ("lookup:memory:3-5", which agrees longer than this call's "lookup:2") won
    or lost, drawn from a generator of its own (seed 38); the policy resumes from it (and learns
    on), so the memory drafts the first round in about half the generations and the noisy draft
    model (prior 0.8 against lookup:2's 0.5; its step half a target step's, so that the winning
    memory beats its next token) in the others."""
    rng = np.random.default_rng(37)
    table = random_markov(6, rng, scale=1.5)
    target = MarkovModel(table)
    draft = MarkovModel(table + rng.standard_normal(table.shape).astype(np.float32) * 0.8)
    memory = DraftMemory(1000)
    memory.add([0, 3, 4, 1, 2, 5, 0, 3])  # ends like the prompt for 4 tokens: "lookup:memory:3-5" proposes [5, 0, 3]
    memory.add([9, 3, 4, 1, 2, 5, 0])  # witnessed by a second earlier call (round 1 proposes no lone match shorter than 16)
    prompt = [1, 2, 3, 4, 1, 2]
    sources = ["lookup:memory:3-5", "model"]
    engine = Engine(target, ModelAndLookup(ModelDrafter(draft), LookupDrafter(memory=memory)), earned=memory.earned)
    wins = np.random.default_rng(38).integers(0, 2, N_FIRST_TWO)
    samples, first = [], Counter()
    for s, won in enumerate(wins):
        memory.earned.clear()
        memory.earned["lookup:memory:3-5"] = WINNING if won else LOSING
        got, opened = [], None
        for event in engine.generate(prompt, GenerationConfig(max_tokens=5, sampling=PLAIN, seed=s), frozen_auto(5e-3)):
            if isinstance(event, Token):
                got.append(event.id)
            elif isinstance(event, Round) and opened is None:
                opened = event.drafter
        first[opened] += 1
        samples.append(got[:2])
    assert all(first[name] > N_FIRST_TWO // 3 for name in sources), first
    law = first_two_law(lambda prefix: probabilities(table[(prompt + list(prefix))[-1]], PLAIN), N_FIRST_TWO)
    assert first_two_pvalue(samples, law) > ALPHA


def test_the_record_is_read_from_a_copy_while_another_sequence_adds_to_it():
    # A server's slots share a tenant's record: one reads it (a call's start) while another adds
    # to it (a call's end). Here the adding happens in the middle of the reading's iteration, as a
    # thread switch would put it; the reader must not iterate the live dict (it raised "dictionary
    # changed size during iteration", a 500 for that request).
    class AddedToWhileRead(dict):
        def items(self):
            for i, item in enumerate(super().items()):
                if i == 0:
                    self["lookup:3-5"] = Earned((1.0,), (1.0,))
                yield item

    earned = AddedToWhileRead({"model": Earned((0.5,), (1.0,)), "lookup:2": Earned((0.1,), (1.0,))})
    assert set(resumed(earned, "model+lookup")) == {"model", "lookup:2"}
