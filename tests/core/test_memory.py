"""The drafting memory (drafting/memory.py): recall across calls, its bound, and the cache file as
untrusted input. No models, except the one CLI test at the end (marker `model`)."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fakes import MarkovModel
from specdec_cli.drafting.lookup import LookupDrafter, LookupOptions
from specdec_cli.decoding.engine import Engine, GenerationConfig
from specdec_cli.events import Round, Token
from specdec_cli.drafting.memory import BadCache, DraftMemory, Recall, read_cache, save_cache
from specdec_cli.drafting.ngram import agreement, longest_agreement
from specdec_cli.tuning.policy import draft_policy
from specdec_cli.maths.sampling import GREEDY

FP = "fingerprint-a"
ROOT = Path(__file__).resolve().parents[2]


def test_recall_is_what_followed_the_longest_match_in_an_earlier_call():
    memory = DraftMemory(100)
    memory.add([5, 6, 7, 8, 9])
    memory.add([1, 7, 3])
    assert memory.match([1, 2, 6, 7]).tokens == [8, 9]  # (6, 7) beats the newer (7,)
    assert memory.match([1, 2, 6, 7]).length == 2
    assert memory.match([0, 7]).tokens == [3]  # a unigram: the newest occurrence
    assert memory.match([42]) is None


def test_of_an_ngrams_occurrences_the_one_that_agrees_longest_wins():
    # Three earlier calls end their key (7, 8) differently; the context agrees with the oldest
    # for 5 tokens, with the others for 3. A suffix index takes the longest: the oldest's 40.
    memory = DraftMemory(30)
    memory.add([1, 2, 3, 7, 8, 40])
    memory.add([9, 3, 7, 8, 41])
    memory.add([6, 3, 7, 8, 42])
    assert memory.match([1, 2, 3, 7, 8]) == Recall(tokens=[40], length=5)
    assert memory.match([5, 3, 7, 8]) == Recall(tokens=[42], length=3)  # a tie of 3: the newest
    # Only the newest `places` occurrences are measured: with one, the newest wins whatever agrees.
    newest_only = DraftMemory(30, places=1)
    for seq in memory.sequences:
        newest_only.add(seq)
    assert newest_only.match([1, 2, 3, 7, 8]) == Recall(tokens=[42], length=3)
    # Eviction drops the evicted call's occurrences and keeps the others'.
    memory.add(list(range(50, 60)))
    memory.add(list(range(60, 80)))  # 30 tokens at most: the first three calls (16 tokens) go
    assert memory.match([3, 7, 8]) is None and memory.match([55, 56]).tokens == [57, 58, 59]


def test_agreement_docstring_examples():
    assert agreement([4, 2, 3, 9], 3, [1, 2, 3]) == 2
    assert agreement([4, 2, 3, 9], 3, [1, 2, 3], cap=1) == 1
    assert longest_agreement([1, 2, 3], [("a", 3, [1, 2, 3, 7]), ("b", 2, [5, 3, 8])]) == (3, "a", 3)
    assert longest_agreement([1, 2, 3], [("a", 2, [5, 3, 8]), ("b", 2, [6, 3, 9])]) == (1, "b", 2)  # a tie: the newest


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
    short = lookup.candidates([0, 9, 3, 4])[0]  # a match of 2: the lookup's own cap
    assert short.name == "lookup:memory:2" and len(short.propose([0, 9, 3, 4], 64, GREEDY, np.random.default_rng(0)).tokens) == 4


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


HEAD = b'{"format": "specdec-draft-cache", "version": 2, "tokenizer": "fingerprint-a", '


@pytest.mark.parametrize(
    "content, reason",
    [
        (HEAD + b'"sequences": [[1, 2', "not valid JSON (truncated?)"),
        (b"\xff\xfe", "not valid JSON"),
        (b'[1, 2]', "is not a specdec draft cache"),
        (b'{"format": "specdec-draft-cache", "version": 1, "tokenizer": "fingerprint-a", "sequences": []}', "has format version 1, this specdec reads 2"),
        (b'{"format": "specdec-draft-cache", "version": 2, "tokenizer": "fingerprint-b", "sequences": [], "earned": {}}', "was written for another tokenizer"),
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
    assert json.loads(cache.read_text())["version"] == 2  # rebuilt
