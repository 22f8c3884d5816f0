"""The built-in pair served with several slots: every request exact while its rows share the passes.

The server runs in this process (toyserver.Served over the real pair, loaded with 4 slots); the
test reads the target's logits itself, where two answers differ, from a second copy of the pair
loaded beside it (`reference`: the served models belong to the server's loop). Batches of other shapes
round the target's logits differently, so at temperature 0 an answer in a batch may leave its
alone-answer only at a step where the target's two likeliest tokens are within MARGIN of each
other (the test computes that gap and prints it).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from stat_checks import ALPHA, chi_square_pvalue
from toyserver import Served
from specdec_cli.maths.filters import probabilities
from specdec_cli.maths.sampling import SamplingParams
from specdec_cli.session import LoadOptions, open_pair

pytestmark = pytest.mark.model

MARGIN = 0.05  # logits: a near-tie that rounding may turn (the gap is printed where it is used)
PROMPTS = ["The history of the Roman Empire", "Water boils at", "def fibonacci(n):", "My favourite recipe for pancakes", "The capital of France is"]


@pytest.fixture(scope="module")
def served(builtin_paths):
    draft, target = builtin_paths
    with open_pair(draft, target, LoadOptions(n_ctx=1024, slots=4)) as pair:
        s = Served(pair, slots=4, queue=16)
        try:
            assert s.worker.ready.wait(60)
            yield s
        finally:
            s.stop()


@pytest.fixture(scope="module")
def reference(builtin_paths):
    """The pair once more, one sequence, outside the server: the target's own logits alone."""
    draft, target = builtin_paths
    with open_pair(draft, target, LoadOptions(n_ctx=1024)) as pair:
        yield pair


def complete(s, prompt: str, **fields) -> dict:
    status, _, body = s.post("/v1/completions", {"prompt": prompt, "max_tokens": 24, "temperature": 0, **fields})
    assert status == 200, body
    return body


def at_once(s, requests: list[tuple[str, dict]]) -> list[dict]:
    out: list = [None] * len(requests)

    def ask(i):
        out[i] = complete(s, requests[i][0], **requests[i][1])

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(requests))]
    [t.start() for t in threads]
    [t.join(300) for t in threads]
    return out


def near_tie_gap(pair, prompt: str, text: str, other: str) -> float:
    """The gap between the target's two likeliest logits where `text` and `other` part (decoded alone, by `pair`)."""
    ids = pair.prompt_tokens(prompt, chat=False)
    mine, theirs = pair.target.tokenize(text, add_special=False), pair.target.tokenize(other, add_special=False)
    n = next(i for i, (a, b) in enumerate(zip(mine + [-1], theirs + [-2])) if a != b)
    view = pair.target
    view.rewind(0)
    row = np.array(view.decode(ids + mine[:n], 1)[0], dtype=np.float64)
    view.rewind(0)
    top = np.sort(row)[-2:]
    return float(top[1] - top[0])


def check_same(reference, prompt, got: str, alone: str) -> None:
    if got != alone:
        gap = near_tie_gap(reference, prompt, got, alone)
        print(f"{prompt!r}: parts from its alone-answer where the top two logits are {gap:.4f} apart (margin {MARGIN})")
        assert gap < MARGIN, f"{prompt!r}: {got!r} != {alone!r} at a step {gap:.3f} apart"


def test_every_answer_of_a_batch_is_its_alone_target_only_answer(served, reference):
    alone = {p: complete(served, p, drafter="none")["choices"][0]["text"] for p in PROMPTS}  # target-only, one at a time
    settings = [{"draft_tokens": 4}, {"draft_tokens": "auto"}, {"draft_tokens": 2, "verify": "block"}, {"drafter": "model+lookup"}, {"draft_tokens": 8}]
    answers = at_once(served, list(zip(PROMPTS, settings)))
    for p, answer in zip(PROMPTS, answers):
        check_same(reference, p, answer["choices"][0]["text"], alone[p])
    held = served.worker.batcher.log.sequences["target"]  # counted by the batcher per pass
    assert max(held) >= 2, held


@pytest.mark.parametrize("sampling", [{"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0}, {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05}], ids=["T1", "T0.8-filtered"])
def test_first_token_law_with_three_clients_of_different_settings(served, reference, sampling):
    """N = 300 first tokens per client, three clients at once with different drafting and verify
    settings (seeds 0..299 each), each against the target's own law at the prompt's end, at T = 1
    and at T = 0.8 with llama.cpp's default filters (ALPHA = 1e-4 each, so a false failure has
    probability at most 3e-4 per setting)."""
    n = 300
    prompt = PROMPTS[1]
    pair = reference
    view = pair.target
    view.rewind(0)
    row = np.array(view.decode(pair.prompt_tokens(prompt, chat=False), 1)[0][: pair.vocab_limit], dtype=np.float64)
    view.rewind(0)
    p = probabilities(row.astype(np.float32), SamplingParams(**sampling))
    settings = [{"draft_tokens": 3}, {"draft_tokens": 2, "verify": "block"}, {"drafter": "model+lookup", "draft_tokens": 4}]
    firsts: list[list[str]] = [[], [], []]

    def client(i):
        for seed in range(n):
            body = complete(served, prompt, max_tokens=1, seed=seed, **sampling, **settings[i])
            firsts[i].append(body["choices"][0]["text"])

    threads = [threading.Thread(target=client, args=(i,)) for i in range(3)]
    [t.start() for t in threads]
    [t.join(600) for t in threads]
    by_text: dict[str, list[int]] = {}
    for t in range(len(p)):
        if p[t] > 0:
            by_text.setdefault(pair.target.piece(t).decode("utf-8", "replace"), []).append(t)
    keys = list(by_text)
    probs = np.array([p[by_text[k]].sum() for k in keys])
    for i in range(3):
        assert len(firsts[i]) == n
        counts = np.array([sum(1 for f in firsts[i] if f == k) for k in keys])
        assert counts.sum() == n, "a first token the target gives probability 0"
        assert chi_square_pvalue(counts, probs / probs.sum()) > ALPHA


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def test_eight_clients_of_ten_requests_are_all_answered_exactly_and_memory_stays(served, reference):
    alone = {p: complete(served, p, max_tokens=16)["choices"][0]["text"] for p in PROMPTS}
    before = _rss_mb()
    results: list[list] = [[] for _ in range(8)]

    def client(i):
        for j in range(10):
            prompt = PROMPTS[(i + j) % len(PROMPTS)]
            results[i].append((prompt, complete(served, prompt, max_tokens=16)["choices"][0]["text"]))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    [t.start() for t in threads]
    [t.join(600) for t in threads]
    assert sum(len(r) for r in results) == 80
    for r in results:
        for prompt, text in r:
            check_same(reference, prompt, text, alone[prompt])
    grown = _rss_mb() - before
    print(f"resident memory grew {grown:.1f} MB over 80 requests")
    assert grown < 64
