"""`serve --slots`: requests generated at once over the toy pair, their rows in shared passes.

The toy models (tests/fakes.py) record every pass with its parts, so the tests count what the
passes held; the gate holds every decode until the test opens it, which orders events without
sleeping.
"""

from __future__ import annotations

import threading

from toyserver import toy_pair, wait_until

GREEDY_TEXT = "bcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz"


def test_two_requests_generate_at_once_and_share_the_target_passes(serve):
    gate = threading.Event()
    pair = toy_pair(gate=gate)
    s = serve(pair, slots=2)
    try:
        assert s.worker.ready.wait(10)
        results = {}

        def ask(name, prompt, n):
            results[name] = s.post("/v1/completions", {"prompt": prompt, "max_tokens": n})

        threads = [threading.Thread(target=ask, args=("a", "a", 20)), threading.Thread(target=ask, args=("k", "k", 20))]
        [t.start() for t in threads]
        # the first pass is held by the gate; the other request was admitted with the first, or waits for the loop's next iteration
        wait_until(lambda: s.worker.running + s.worker.waiting == 2, "both requests with the worker")
        gate.set()
        [t.join(30) for t in threads]
        assert results["a"][2]["choices"][0]["text"] == GREEDY_TEXT[:20]
        assert results["k"][2]["choices"][0]["text"] == GREEDY_TEXT[10:30]
        # counted by the fake target: passes that held rows of both sequences (how many depends on how
        # the two requests' rounds line up; one at a time there would be none)
        shared = [p for p in pair.target.passes if len({seq for seq, _, _ in p}) == 2]
        assert len(shared) >= 2, pair.target.passes
    finally:
        gate.set()


def test_a_request_takes_the_slot_that_holds_its_prefix(serve):
    s = serve(toy_pair(), slots=2)
    assert s.worker.ready.wait(10)
    first = s.post("/v1/completions", {"prompt": "abcdefgh", "max_tokens": 4})[2]
    s.post("/v1/completions", {"prompt": "mnopq", "max_tokens": 4})
    again = s.post("/v1/completions", {"prompt": "abcdefghijkl", "max_tokens": 4})[2]
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    # the slot of the first request holds "abcdefgh" + its answer "ijkl" (less the last token)
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == 11


def test_a_prompt_that_shares_only_its_first_tokens_takes_an_empty_slot(serve):
    # "ab..." shares "a" with the slot that holds "amnopqrs": under half of the prompt, so it takes
    # the empty slot, and the next "amnopqrs..." finds its whole prefix still cached.
    s = serve(toy_pair(), slots=2)
    assert s.worker.ready.wait(10)
    s.post("/v1/completions", {"prompt": "amnopqrs", "max_tokens": 4})
    other = s.post("/v1/completions", {"prompt": "abcdefgh", "max_tokens": 4})[2]
    again = s.post("/v1/completions", {"prompt": "amnopqrstuvw", "max_tokens": 4})[2]
    assert other["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == 11


def test_slots_shows_each_key_only_its_own_slots_figures(serve):
    s = serve(toy_pair(), slots=2, keys=("k1", "k2"), admin_keys=("ops",))
    assert s.worker.ready.wait(10)
    assert s.post("/v1/completions", {"prompt": "abc", "max_tokens": 5}, headers={"Authorization": "Bearer k1"})[0] == 200
    status, mine = s.get("/slots", headers={"Authorization": "Bearer k1"})
    status2, theirs = s.get("/slots", headers={"Authorization": "Bearer k2"})
    assert status == status2 == 200
    assert [slot["tokens"] for slot in mine["slots"]] == [5] and theirs == {"slots": []}  # k2 has no slot of its own yet
    status, everything = s.get("/slots", headers={"Authorization": "Bearer ops"})  # the server's passes: the admin key's
    assert status == 200 and sum(int(n) * c for n, c in everything["target_passes"].items()) >= 1
    assert s.get("/slots")[0] == 401


def test_a_request_after_one_whose_drafts_all_failed_drafts_less(serve):
    """A draft that never agrees (its greedy choice after letter i is i + 2, the target's i + 1),
    and costs half a target pass: the second request starts from the first one's losing record
    (kept by the tenant's memory: tuning/carried.carried_record), so it gives the draft model up sooner. Counted from
    each answer's rounds (timings.draft_n)."""
    from fakes import ToyModel, successor_table
    from specdec_cli.session import LoadedPair

    target = ToyModel(successor_table(), seconds_per_decode=0.004)
    draft = ToyModel(successor_table({i: (i + 2) % 26 for i in range(26)}), seconds_per_decode=0.002)
    s = serve(LoadedPair(target=target, draft=draft, vocab_limit=26), slots=1)
    assert s.worker.ready.wait(10)
    drafted = []
    for _ in range(2):
        status, _, body = s.post("/v1/completions", {"prompt": "a", "max_tokens": 40, "draft_tokens": "auto"})
        assert status == 200, body
        assert body["timings"]["draft_n_accepted"] == 0
        drafted.append(body["timings"]["draft_n"])
    print(f"drafted by the first and the second request: {drafted}")
    # From its priors a request drafts until it has tried MIN_TRIALS (6) decayed positions, k = 3
    # in round 1; from a carried record of CARRIED_TRIALS (4) it needs a few one-token trials.
    # (Without the carry the second request drafted 10 against the first's 11.)
    assert drafted[0] > 0 and drafted[0] - drafted[1] >= 4, drafted
    assert sum(s.worker.memories[""].earned["model"].hits) == 0.0  # the record it started from: the first request's, all failed


def test_the_mailbox_wakes_the_loop_once_for_calls_posted_before_it_runs():
    """Mailbox's worked example, with a loop that records its wake-ups, then on a real loop: 4
    threads x 200 posts each, made before the loop runs, arrive in each thread's order with one wake-up."""
    import asyncio

    from specdec_cli.serve.jobs import Mailbox

    class Recorded:
        def __init__(self):
            self.scheduled = []

        def call_soon_threadsafe(self, callback):
            self.scheduled.append(callback)

    loop, ran = Recorded(), []
    box = Mailbox(loop)
    box.post(lambda x: ran.append(("f", x)), 1)
    box.post(lambda x: ran.append(("g", x)), 2)
    assert len(loop.scheduled) == 1 and ran == []
    loop.scheduled[0]()
    assert ran == [("f", 1), ("g", 2)]
    box.post(lambda x: ran.append(("h", x)), 3)  # after the loop ran: a wake-up of its own
    assert len(loop.scheduled) == 2

    real = asyncio.new_event_loop()
    wakeups, seen = [0], {t: [] for t in range(4)}
    run = Mailbox._run

    def counted(self):
        wakeups[0] += 1
        run(self)

    box = Mailbox(real)
    box._run = counted.__get__(box)
    posting = [threading.Thread(target=lambda t=t: [box.post(seen[t].append, i) for i in range(200)]) for t in range(4)]
    try:
        [t.start() for t in posting]
        [t.join(10) for t in posting]
        real.call_soon_threadsafe(real.stop)
        real.run_forever()
    finally:
        real.close()
    assert all(seen[t] == list(range(200)) for t in range(4))
    assert wakeups[0] == 1, wakeups[0]


def test_a_requests_last_item_leaves_after_its_slot_is_free(monkeypatch, serve):
    """A client that has its answer and asks GET /slots at once must see the slot idle: each job's
    last item (Done, or Failed) is handed over only once its slot is free. Recorded at the hand-over:
    the slots busy then, for each of 3 requests in turn (one ends in Failed: max_tokens past the context)."""
    from specdec_cli.serve import jobs

    s = serve(toy_pair(), slots=2)
    busy_at_last = []
    put = jobs.Job._put

    def recorded(job, *items):
        if any(isinstance(item, (jobs.Done, jobs.Failed)) for item in items):
            busy_at_last.append(s.worker.running)
        put(job, *items)

    monkeypatch.setattr(jobs.Job, "_put", recorded)
    assert s.worker.ready.wait(10)
    assert s.post("/v1/completions", {"prompt": "abc", "max_tokens": 5})[0] == 200
    assert s.post("/v1/completions", {"prompt": "mno", "max_tokens": 3})[0] == 200
    status, _, _ = s.post("/v1/completions", {"prompt": "abc", "max_tokens": 10**6})
    assert status == 400
    assert busy_at_last == [0, 0, 0]


def test_a_whole_answer_wakes_the_handler_for_its_first_token_and_at_its_end(monkeypatch, serve):
    """A streamed answer is handed over round by round; a whole one (stream false) round by round
    only until its first token, then everything else with the end: counted at the hand-over, the
    hand-overs that hold a Round, and every Token they carried, in order."""
    from specdec_cli.events import Round, Token
    from specdec_cli.serve import jobs

    s = serve(toy_pair(), slots=1)
    puts = []
    put = jobs.Job._put

    def recorded(job, *items):
        puts.append((job.settings.stream, items))
        put(job, *items)

    monkeypatch.setattr(jobs.Job, "_put", recorded)
    assert s.worker.ready.wait(10)
    whole = s.post("/v1/completions", {"prompt": "abc", "max_tokens": 12})[2]["choices"][0]["text"]
    chunks = s.client().completions.create(model="toy", prompt="abc", max_tokens=12, stream=True)
    streamed = "".join(c.choices[0].text for c in chunks if c.choices)
    for stream, text in ((False, whole), (True, streamed)):
        mine = [items for flag, items in puts if flag is stream]
        with_round = [items for items in mine if any(isinstance(i, Round) for i in items)]
        rounds = sum(isinstance(i, Round) for items in mine for i in items)
        tokens = "".join(i.text for items in mine for i in items if isinstance(i, Token))
        assert rounds >= 3, rounds  # several rounds, so that holding them shows
        assert len(with_round) == (2 if not stream else rounds), (stream, [len(items) for items in with_round])
        assert tokens == text == GREEDY_TEXT[2:14]
