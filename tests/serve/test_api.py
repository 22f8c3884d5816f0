"""`specdec serve`'s HTTP side over a scripted pair, in this process: the wire format, errors,
the queue, disconnects and keys. No models (the real pair is tests/serve/test_serve_real.py).

The app runs under a real uvicorn on a free loopback port, in a thread; clients are the
`openai` package, urllib and raw sockets. The toy pair writes letters: after letter i the
target's greedy choice is i + 1, the draft's too except after "e", where it guesses "z"
(tests/fakes.py), so at temperature 0 the answer to "a" is "bcdefghij..." with one
rejection per pass over "e".
"""

from __future__ import annotations

import http.client
import json
import math
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from toyserver import JSON, chat, toy_pair, wait_until


# -- the wire format ----------------------------------------------------------------------------


def test_chat_answers_greedily_with_usage_and_the_speculative_timings(served):
    status, _, body = served.post("/v1/chat/completions", chat("a"))
    assert status == 200, body
    (choice,) = body["choices"]
    assert choice["message"] == {"role": "assistant", "content": "bcdefghij"} and choice["finish_reason"] == "length"
    assert body["object"] == "chat.completion" and body["model"] == "toy" and body["id"].startswith("chatcmpl-")
    assert body["usage"] == {"prompt_tokens": 1, "completion_tokens": 9, "total_tokens": 10, "prompt_tokens_details": {"cached_tokens": 0}}
    t = body["timings"]
    assert t["predicted_n"] == 9 and t["draft_n"] >= t["draft_n_accepted"] > 0 and t["target_passes"] < 9
    assert t["draft_n_accepted"] < t["draft_n"]  # the draft's "z" after "e" was rejected


def test_the_openai_client_streams_the_same_text_and_a_usage_chunk(served):
    client = served.client()
    whole = client.chat.completions.create(model="toy", messages=[{"role": "user", "content": "c"}], max_tokens=12)
    chunks = list(client.chat.completions.create(model="toy", messages=[{"role": "user", "content": "c"}], max_tokens=12, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content == "defghijklmno"
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 12


def test_the_stream_ends_with_done_and_only_the_page_sees_rounds_and_rejections(served):
    def events(**fields) -> list:
        request = urllib.request.Request(served.url + "/v1/chat/completions", data=json.dumps(chat("a", stream=True, **fields)).encode(), headers=JSON)
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.headers["Content-Type"].startswith("text/event-stream")
            lines = [line for line in response.read().decode().split("\n\n") if line]
        assert all(line.startswith("data: ") for line in lines) and lines[-1] == "data: [DONE]"
        return [json.loads(line[6:]) for line in lines[:-1]]

    plain = events()
    assert not any("specdec" in c for c in plain)
    paged = events(specdec_events=True)
    tokens = [c["specdec"] for c in paged if c["choices"] and "specdec" in c]
    # b c d drafted and kept, e the bonus; then the draft's "z" after "e" is rejected and f corrects it
    assert [t["source"] for t in tokens][:5] == ["draft", "draft", "draft", "bonus", "correction"]
    assert any("rejected" in c.get("specdec", {}) for c in paged) and any("round" in c.get("specdec", {}) for c in paged)
    assert "timings" in paged[-1]  # the page gets the figures without asking for usage


def test_verify_auto_is_a_request_field_and_the_page_sees_which_rule_verified_each_round(served):
    body = chat("a", stream=True, specdec_events=True, verify="auto", temperature=1)
    request = urllib.request.Request(served.url + "/v1/chat/completions", data=json.dumps(body).encode(), headers=JSON)
    with urllib.request.urlopen(request, timeout=30) as response:
        chunks = [json.loads(line[6:]) for line in response.read().decode().split("\n\n") if line and line != "data: [DONE]"]
    rounds = [c["specdec"]["round"] for c in chunks if "round" in c.get("specdec", {})]
    # sampled drafts of 3 tokens: auto verifies round 1 by token, round 2 by block, round 3 by token
    assert [r["verify"] for r in rounds][:3] == ["token", "block", "token"]


def test_completions_take_the_prompt_as_it_is(served):
    status, _, body = served.post("/v1/completions", {"prompt": "k", "max_tokens": 4})
    assert status == 200, body
    assert body["object"] == "text_completion" and body["choices"][0]["text"] == "lmno"


def test_the_next_turn_reuses_the_cached_prefix(served):
    _, _, first = served.post("/v1/completions", {"prompt": "abc", "max_tokens": 3})
    before = served.pair.target.decoded
    _, _, second = served.post("/v1/completions", {"prompt": "abcdef", "max_tokens": 3})
    assert first["choices"][0]["text"] == "def" and second["choices"][0]["text"] == "ghi"
    # The first call left a..e in the target's cache (prompt + output, but the last token), so
    # of "abcdef" all but the last token, which opens round 1, is already there.
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == 5
    t = second["timings"]
    assert t["prompt_n"] == 1
    # What the target decoded (the fake counts it): no prefill at all, then each pass's rows.
    assert served.pair.target.decoded - before == t["target_passes"] + t["draft_n"]


def test_logprobs_are_the_targets_own(served):
    status, _, body = served.post("/v1/chat/completions", chat("a", max_tokens=3, logprobs=True, top_logprobs=2))
    assert status == 200, body
    content = body["choices"][0]["logprobs"]["content"]
    # At temperature 0 the row's softmax: 10 for the successor, 0 for the other 25 letters.
    best, other = 10 - math.log(math.exp(10) + 25), -math.log(math.exp(10) + 25)
    assert [e["token"] for e in content] == ["b", "c", "d"]
    for e in content:
        assert e["logprob"] == pytest.approx(best, abs=1e-9) and e["bytes"] == list(e["token"].encode())
        assert [t["logprob"] for t in e["top_logprobs"]] == pytest.approx([best, other], abs=1e-9)
        assert e["top_logprobs"][0]["token"] == e["token"]


def test_logprobs_at_temperature_one_are_the_processed_law(served):
    status, _, body = served.post("/v1/chat/completions", chat("a", max_tokens=2, temperature=1, top_k=2, top_p=1, min_p=0, seed=3, logprobs=True, top_logprobs=3))
    assert status == 200, body
    for e in body["choices"][0]["logprobs"]["content"]:
        top = [t["logprob"] for t in e["top_logprobs"]]
        # top-k 2 keeps the successor and one tied 0-logit letter: p = e^10 / (e^10 + 1), 1 / (e^10 + 1), then nothing (-inf -> -9999)
        assert top[:2] == pytest.approx([10 - math.log(math.exp(10) + 1), -math.log(math.exp(10) + 1)], abs=1e-9)
        assert top[2] == -9999.0


def test_models_and_health(served):
    assert served.get("/v1/models") == (200, {"object": "list", "data": [{"id": "toy", "object": "model", "created": pytest.approx(time.time(), abs=60), "owned_by": "specdec"}]})
    assert served.get("/health")[0] == 200


def test_health_is_503_while_loading_then_200(serve):
    loaded = threading.Event()
    s = serve(toy_pair(), loaded=loaded)
    try:
        status, body = s.get("/health")
        assert status == 503 and body["error"]["type"] == "unavailable_error"
        status, headers, body = s.post("/v1/chat/completions", chat("a"))
        assert status == 503 and headers["Retry-After"] == "2"
        loaded.set()
        assert s.worker.ready.wait(10)
        assert s.get("/health")[0] == 200
    finally:
        loaded.set()


# -- bad input never crashes or wedges it ------------------------------------------------------


BAD = [
    (b"{bad", 400, None, "not valid JSON"),
    (b"[1, 2]", 400, None, "must be a JSON object"),
    (b"\xff\xfe{}", 400, None, "not UTF-8"),
    (b'{"messages": [{"role": "user", "content": "\\ud800"}]}', 400, None, "not valid Unicode"),
    (json.dumps({"messages": []}).encode(), 400, "messages", "at least 1"),
    (json.dumps({"messages": [{"role": "robot", "content": "a"}]}).encode(), 400, "messages.0.role", ""),
    (json.dumps(chat(temperature="hot")).encode(), 400, "temperature", "valid number"),
    (json.dumps(chat(stream=1)).encode(), 400, "stream", "boolean"),
    (json.dumps(chat(top_p=1.5)).encode(), 400, "top_p", "top_p must be in (0, 1], got 1.5"),
    (json.dumps(chat(temperature=-1)).encode(), 400, "temperature", "temperature must be 0 (greedy) or more"),
    (json.dumps(chat(max_tokens=0)).encode(), 400, "max_tokens", "max_tokens must be at least 1"),
    (json.dumps(chat(draft_tokens=65)).encode(), 400, "draft_tokens", "draft_tokens must be between 1 and 64"),
    (json.dumps(chat(drafter="oracle")).encode(), 400, "drafter", "drafter must be one of model, lookup, model+lookup, cascade"),
    (json.dumps(chat(verify="tree")).encode(), 400, "verify", "verify must be one of token, block, auto, got 'tree'"),
    (json.dumps(chat(seed=-1)).encode(), 400, "seed", "seed must be between 0 and"),
    (json.dumps(chat(stop=[""])).encode(), 400, "stop", "stop must not be an empty string"),
    (json.dumps(chat(n=2)).encode(), 400, "n", "n is not supported"),
    (json.dumps(chat(frequency_penalty=0.5)).encode(), 400, "frequency_penalty", "not supported"),
    (json.dumps(chat(top_logprobs=3)).encode(), 400, "top_logprobs", "needs logprobs: true"),
    (json.dumps(chat(logprobs=True, top_logprobs=21)).encode(), 400, "top_logprobs", "between 0 and 20"),
    (json.dumps(chat(model="gpt-4")).encode(), 404, "model", "does not exist"),
    (json.dumps(chat(max_tokens=5000)).encode(), 400, None, "max_tokens is 5000 but the context holds 4096 tokens and the prompt takes 1, leaving 4095"),
    (json.dumps(chat("a" * 5000)).encode(), 400, None, "the prompt is 5000 tokens but the context holds 4096"),
]


@pytest.mark.parametrize("raw, status, param, needle", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_input_gets_an_openai_error_and_the_next_request_is_served(served, raw, status, param, needle):
    got, _, body = served.post("/v1/chat/completions", None, raw=raw)
    assert got == status, body
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["param"] == param and needle in body["error"]["message"], body
    assert served.post("/v1/chat/completions", chat("a"))[2]["choices"][0]["message"]["content"] == "bcdefghij"


def test_a_body_over_the_limit_is_413(serve):
    s = serve(toy_pair(), max_body=1000)
    status, _, body = s.post("/v1/chat/completions", chat("a" * 2000))
    assert status == 413 and "at most 1000" in body["error"]["message"]


def test_paths_outside_the_api_are_404_in_the_error_shape(served):
    for path in ("/v1/nothing", "/etc/passwd", "/static/../app.py", "/static/secret.js", "/docs", "/openapi.json"):
        status, body = served.get(path)
        assert status == 404 and set(body["error"]) == {"message", "type", "param", "code"}, (path, body)


def test_the_api_key_is_required_on_the_api_but_not_on_health_or_the_page(serve):
    s = serve(toy_pair(), keys=("s3cret",))
    assert s.worker.ready.wait(10)
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
        status, _, body = s.post("/v1/chat/completions", chat("a"), headers=headers)
        assert status == 401 and body["error"]["code"] == "invalid_api_key", headers
        assert s.get("/v1/models", headers=headers)[0] == 401
    assert s.client("s3cret").chat.completions.create(model="toy", messages=[{"role": "user", "content": "a"}]).choices[0].message.content == "bcdefghij"
    assert s.get("/health")[0] == 200
    with urllib.request.urlopen(s.url + "/", timeout=10) as page:
        assert page.status == 200 and b"<html" in page.read().lower()


# -- one generation at a time: the queue and disconnects ---------------------------------------


def test_a_full_queue_answers_503_with_retry_after_and_nothing_is_lost(serve):
    gate = threading.Event()
    pair = toy_pair(gate=gate)
    s = serve(pair, queue=1)
    try:
        assert s.worker.ready.wait(10)
        results = {}

        def ask(name):
            results[name] = s.post("/v1/completions", {"prompt": "a", "max_tokens": 20, "draft_tokens": 1})

        first = threading.Thread(target=ask, args=("first",))
        first.start()
        assert pair.target.decoding.wait(10)  # the first is generating (held at its first decode)
        second = threading.Thread(target=ask, args=("second",))
        second.start()
        wait_until(lambda: s.worker.waiting == 1, "the second request waits in the queue")
        status, headers, body = s.post("/v1/completions", {"prompt": "a", "max_tokens": 2})
        assert status == 503 and headers["Retry-After"] == "2" and "queue" in body["error"]["message"]
        gate.set()
        first.join(30)
        second.join(30)
        assert [results[n][0] for n in ("first", "second")] == [200, 200]
        assert results["first"][2]["choices"][0]["text"] == results["second"][2]["choices"][0]["text"] == "bcdefghijklmnopqrstu"
        assert results["first"][2]["usage"]["completion_tokens"] == 20  # the one in flight, whole
    finally:
        gate.set()


def test_a_client_that_leaves_mid_stream_stops_its_generation_and_the_caches_stay_exact(serve):
    pair = toy_pair(seconds_per_decode=0.02)
    s = serve(pair)
    assert s.worker.ready.wait(10)
    host, port = s.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    body = json.dumps({"prompt": "a", "max_tokens": 2000, "stream": True, "draft_tokens": 2})
    connection.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    assert response.status == 200
    response.read(300)  # a few chunks
    connection.sock.shutdown(socket.SHUT_RDWR)
    connection.close()
    left = time.monotonic()
    while s.worker.running and time.monotonic() - left < 5:
        time.sleep(0.01)
    assert not s.worker.running, "the generation went on after its client left"
    # one round is 2 draft steps + 1 target batch at 20 ms each, and the disconnect is noticed
    # within 0.25 s: nowhere near the 2000 tokens asked for
    assert time.monotonic() - left < 2.0
    held, drafted = pair.target.kv[0], pair.draft.kv[0]  # the fakes' own record of the slot's sequence
    assert len(held) < 1000
    # The caches hold an accepted prefix of the output ("abcd..."), and the next answer is exact.
    expected = [i % 26 for i in range(len(held))]
    assert held == expected and drafted == expected[: len(drafted)]
    assert held == s.worker.slots[0].pair.target.tokens
    status, _, answer = s.post("/v1/completions", {"prompt": "a", "max_tokens": 5})
    assert status == 200 and answer["choices"][0]["text"] == "bcdef"


def test_stop_cancels_the_generation_in_flight_and_the_queue(serve):
    gate = threading.Event()
    pair = toy_pair(gate=gate)
    s = serve(pair, queue=2)
    try:
        assert s.worker.ready.wait(10)
        results = {}

        def ask(name):
            results[name] = s.post("/v1/completions", {"prompt": "a", "max_tokens": 2000})

        in_flight = threading.Thread(target=ask, args=("in flight",))
        in_flight.start()
        assert pair.target.decoding.wait(10)
        queued = threading.Thread(target=ask, args=("queued",))
        queued.start()
        wait_until(lambda: s.worker.waiting == 1, "the second request waits in the queue")
        stopping = threading.Thread(target=s.worker.stop)
        stopping.start()
        queued.join(10)  # failed by stop() at once, while the first is still held in its decode
        status, _, body = results["queued"]
        assert status == 503 and body["error"]["message"] == "the server is shutting down"
        gate.set()
        stopping.join(10)
        in_flight.join(10)
        assert not s.worker._thread.is_alive()
        status, _, body = results["in flight"]
        assert status == 503 and body["error"]["message"] == "the server is shutting down; the generation was cancelled"
        held = pair.target.kv[0]  # the fake's own record of the slot's sequence
        assert held == [i % 26 for i in range(len(held))] and len(held) < 100
    finally:
        gate.set()
