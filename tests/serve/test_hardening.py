"""`specdec serve` against its own bugs, hostile clients and hostile pages, over the toy pair
(tests/serve/toyserver.py) in this process. Each test fails without the rule it checks:

- a failure costs one request: an exception that is not a SpecdecError, in generation or in
  loading; caches that cannot be reset;
- tenants: each API key's drafting memory and cached prefix are its own, and the tokens the
  target decoded (the fake's counter) are what the cache claims; /metrics needs the admin key,
  and /slots shows a tenant its own slots alone;
- browsers: Host, Content-Type, Origin and CORS;
- limits: stop strings, JSON nesting and numbers, connections, slow headers and bodies,
  --request-timeout, a drafter that cannot work refused before the stream starts;
- /metrics.
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
import time

import pytest

from specdec_cli.serve.guard import Access, Refused
from toyserver import Served, chat, toy_pair
from specdec_cli.serve.body import MAX_INT, MAX_JSON_DEPTH
from specdec_cli.options import MAX_STOP_CHARS, MAX_STOPS

GREEDY_TEXT = "bcdefghijklmnopqrstuvwxyz"


def raw(served: Served, method: str, path: str, body: bytes | None = None, headers: dict | None = None) -> tuple[int, dict, bytes]:
    """One request with exactly these headers (http.client adds only Host, unless given, and Content-Length)."""
    connection = http.client.HTTPConnection("127.0.0.1", served.port, timeout=30)
    try:
        names = {k.lower() for k in headers or {}}
        connection.putrequest(method, path, skip_host="host" in names, skip_accept_encoding=True)
        for k, v in (headers or {}).items():
            connection.putheader(k, v)
        if body is not None:
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def post(served: Served, body: dict, headers: dict | None = None, path: str = "/v1/completions") -> tuple[int, dict, dict]:
    status, got, data = raw(served, "POST", path, json.dumps(body).encode(), {"Content-Type": "application/json", **(headers or {})})
    return status, got, json.loads(data) if data else {}


# -- a failure costs one request ---------------------------------------------------------------


def test_an_unexpected_exception_fails_its_request_alone_logged_once(caplog, serve):
    pair = toy_pair()
    s = serve(pair)
    assert s.worker.ready.wait(10)
    pair.target.fail_on_decode, pair.target.error = 3, AssertionError("a planted bug")
    with caplog.at_level(logging.ERROR, logger="specdec"):
        status, _, body = post(s, {"prompt": "a", "max_tokens": 9})
    assert status == 500 and body["error"]["type"] == "server_error" and "AssertionError: a planted bug" in body["error"]["message"]
    stacks = [r for r in caplog.records if r.exc_info]
    assert len(stacks) == 1 and "a planted bug" in caplog.text and "Traceback" in caplog.text
    pair.target.fail_on_decode = None
    status, _, body = post(s, {"prompt": "a", "max_tokens": 9})  # the worker went on; the caches were emptied
    assert status == 200 and body["choices"][0]["text"] == GREEDY_TEXT[:9]
    assert raw(s, "GET", "/health")[0] == 200


def test_a_stream_that_fails_midway_ends_with_an_error_event_and_the_next_is_exact(serve):
    pair = toy_pair()
    s = serve(pair)
    assert s.worker.ready.wait(10)
    pair.target.fail_on_decode, pair.target.error = 4, ZeroDivisionError("planted")
    status, _, data = raw(s, "POST", "/v1/completions", json.dumps({"prompt": "a", "max_tokens": 30, "stream": True}).encode(), {"Content-Type": "application/json"})
    events = [json.loads(line[6:]) for line in data.decode().split("\n\n") if line.startswith("data: {")]
    assert status == 200 and events[-1]["error"]["type"] == "server_error" and "ZeroDivisionError" in events[-1]["error"]["message"]
    pair.target.fail_on_decode = None
    assert post(s, {"prompt": "a", "max_tokens": 12})[2]["choices"][0]["text"] == GREEDY_TEXT[:12]


def test_caches_that_cannot_be_reset_make_health_503_with_the_reason_and_requests_503_at_once(serve):
    pair = toy_pair()
    s = serve(pair)
    assert s.worker.ready.wait(10)
    assert post(s, {"prompt": "a", "max_tokens": 5})[0] == 200
    pair.target.fail_on_decode, pair.target.error = len(pair.target.calls) + 2, RuntimeError("device lost")

    def broken_seq_rm(seq, n_keep):
        raise RuntimeError("the device is gone")

    pair.target.seq_rm = broken_seq_rm  # what emptying a slot's sequence calls
    assert post(s, {"prompt": "a", "max_tokens": 5})[0] == 500
    status, _, data = raw(s, "GET", "/health")
    assert status == 503 and "the device is gone" in json.loads(data)["error"]["message"]
    started = time.monotonic()
    status, _, body = post(s, {"prompt": "a", "max_tokens": 5})
    assert status == 503 and "restart the server" in body["error"]["message"] and time.monotonic() - started < 5


@pytest.mark.parametrize("error", [RuntimeError("no such device"), MemoryError("out of memory")], ids=["RuntimeError", "MemoryError"])
def test_a_load_that_fails_unexpectedly_gives_its_reason_on_health_and_503(error, serve):
    def load(stack):
        raise error

    s = serve(toy_pair(), load=load)
    assert s.worker.ready.wait(10)
    status, _, data = raw(s, "GET", "/health")
    assert status == 503 and f"{type(error).__name__}: {error}" in json.loads(data)["error"]["message"]
    status, _, body = post(s, {"prompt": "a"})
    assert status == 503 and f"{type(error).__name__}" in body["error"]["message"]


# -- tenants -----------------------------------------------------------------------------------


KEYS = ("key-one", "key-two")


def as_key(n: int) -> dict:
    return {"Authorization": f"Bearer {KEYS[n - 1]}"}


def test_each_key_drafts_only_from_its_own_memory(serve):
    s = serve(toy_pair(), keys=KEYS)
    assert s.worker.ready.wait(10)
    lookup = {"prompt": "a", "max_tokens": 12, "drafter": "lookup"}
    # Key 1 writes "abc..." into its memory. "a" alone gives lookup nothing in its own context.
    assert post(s, {"prompt": "a", "max_tokens": 20}, as_key(1))[0] == 200
    status, _, other = post(s, {**lookup, "specdec_events": True}, as_key(2))
    assert status == 200 and other["timings"]["draft_n"] == 0, "key 2 drafted from key 1's text"
    status, _, own = post(s, lookup, as_key(1))
    assert status == 200 and own["timings"]["draft_n"] > 0, "key 1's memory should draft for key 1"
    assert own["choices"][0]["text"] == other["choices"][0]["text"] == GREEDY_TEXT[:12]


def test_a_cached_prefix_is_reused_and_reported_only_within_a_key_and_the_target_decodes_what_it_claims(serve):
    pair = toy_pair()
    s = serve(pair, keys=KEYS)
    assert s.worker.ready.wait(10)

    def ask(n: int, prompt: str) -> tuple[dict, int]:
        before = pair.target.decoded
        status, _, body = post(s, {"prompt": prompt, "max_tokens": 3}, as_key(n))
        assert status == 200, body
        return body, pair.target.decoded - before

    def check(body: dict, decoded: int) -> None:
        # The target evaluates the prompt's uncached tokens but its last (prefill), then each
        # pass's last token and drafts: prompt_n - 1 + passes + drafted, counted by the fake.
        t = body["timings"]
        assert decoded == t["prompt_n"] - 1 + t["target_passes"] + t["draft_n"], (decoded, t)

    first, decoded = ask(1, "abcdefgh")
    check(first, decoded)
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    other, decoded = ask(2, "abcdefghijk")  # shares key 1's prefix, but is key 2
    check(other, decoded)
    assert other["usage"]["prompt_tokens_details"]["cached_tokens"] == 0 and other["timings"]["prompt_n"] == 11
    again, decoded = ask(2, "abcdefghijklmn")  # key 2's own next turn
    check(again, decoded)
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == 13 and again["timings"]["prompt_n"] == 1
    back, decoded = ask(1, "abcdefghijklmn")  # key 1 again: key 2's prefix is not its own
    check(back, decoded)
    assert back["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


def test_without_keys_all_requests_are_one_tenant(served):
    post(served, {"prompt": "abcdefgh", "max_tokens": 3})
    assert post(served, {"prompt": "abcdefghijk", "max_tokens": 3})[2]["usage"]["prompt_tokens_details"]["cached_tokens"] == 10


def test_any_of_the_keys_opens_the_api_and_others_do_not(serve):
    s = serve(toy_pair(), keys=KEYS)
    assert s.worker.ready.wait(10)
    for n in (1, 2):
        assert post(s, {"prompt": "a", "max_tokens": 2}, as_key(n))[0] == 200
        assert raw(s, "GET", "/slots", headers=as_key(n))[0] == 200
    for headers in ({}, {"Authorization": "Bearer key-three"}, {"Authorization": "Bearer key-one-and-more"}):
        assert post(s, {"prompt": "a"}, headers)[0] == 401
        assert raw(s, "GET", "/metrics", headers=headers)[0] == 401
        assert raw(s, "GET", "/slots", headers=headers)[0] == 401


ADMIN = {"Authorization": "Bearer the-operator"}


def error_of(reply: tuple[int, dict, bytes]) -> tuple[int, str | None, str]:
    status, _, data = reply
    error = json.loads(data)["error"]  # the one error shape, as every other refusal
    return status, error["code"], error["message"]


def test_metrics_need_the_admin_key_and_a_tenants_key_gets_403(serve):
    """Issue 73: any tenant's key read /metrics, every tenant's traffic summed."""
    s = serve(toy_pair(), keys=KEYS, admin_keys=("the-operator",))
    assert s.worker.ready.wait(10)
    assert post(s, {"prompt": "a", "max_tokens": 2}, as_key(1))[0] == 200
    status, headers, data = raw(s, "GET", "/metrics", headers=ADMIN)
    assert status == 200 and headers["content-type"].startswith("text/plain") and b"specdec:" in data
    for n in (1, 2):
        status, code, message = error_of(raw(s, "GET", "/metrics", headers=as_key(n)))
        assert (status, code) == (403, "admin_key_required") and "admin key" in message and "--admin-key-file" not in message
    for headers in ({}, {"Authorization": "Bearer the-operator-and-more"}):
        assert error_of(raw(s, "GET", "/metrics", headers=headers))[:2] == (401, "invalid_api_key")
    assert post(s, {"prompt": "a", "max_tokens": 2}, ADMIN)[0] == 401  # the admin key is no tenant's
    s.stop()
    s = serve(toy_pair(), keys=KEYS)  # keys, and no admin key: nobody reads /metrics, and the refusal says how
    status, code, message = error_of(raw(s, "GET", "/metrics", headers=as_key(1)))
    assert (status, code) == (403, "admin_key_required") and "--admin-key-file" in message and "SPECDEC_ADMIN_KEY" in message


SERVER_WIDE = {"target_passes", "target_rows", "busy_seconds", "between_passes", "drafting"}


def test_slots_show_a_tenant_its_own_slots_alone_and_the_admin_every_slot(serve):
    """Issue 73: /slots showed any tenant every slot's state and the server's pass counts, busy
    seconds and drafting rates, the other tenants' traffic among them."""
    s = serve(toy_pair(), keys=KEYS, admin_keys=("the-operator",), slots=2)
    assert s.worker.ready.wait(10)
    assert post(s, {"prompt": "a", "max_tokens": 5}, as_key(1))[0] == 200
    assert post(s, {"prompt": "k", "max_tokens": 7}, as_key(2))[0] == 200
    views = {n: json.loads(raw(s, "GET", "/slots", headers=as_key(n))[2]) for n in (1, 2)}
    everything = json.loads(raw(s, "GET", "/slots", headers=ADMIN)[2])
    s.stop()
    assert SERVER_WIDE <= set(everything) and len(everything["slots"]) == 2
    assert sum(everything["target_passes"].values()) > 0
    owned = {slot["slot"]: slot for slot in everything["slots"] if slot["tokens"] is not None}
    assert sorted(slot["tokens"] for slot in owned.values()) == [5, 7] or list(owned) == [everything["slots"][0]["slot"]]
    for n, view in views.items():
        assert set(view) == {"slots"}  # nothing summed over the server
        assert all(slot["tokens"] is not None for slot in view["slots"])  # no other tenant's slot, busy or free
        assert all(slot == owned[slot["slot"]] for slot in view["slots"])
    assert not {slot["slot"] for slot in views[1]["slots"]} & {slot["slot"] for slot in views[2]["slots"]}
    assert [slot["tokens"] for slot in views[2]["slots"]] == [7]  # the last request's slot is its own


def test_without_keys_slots_show_everything_as_before(served):
    assert post(served, {"prompt": "a", "max_tokens": 3})[0] == 200
    status, _, data = raw(served, "GET", "/slots")
    report = json.loads(data)
    assert status == 200 and SERVER_WIDE <= set(report) and [slot["tokens"] for slot in report["slots"]] == [3]
    assert raw(served, "GET", "/metrics")[0] == 200


# -- browsers ----------------------------------------------------------------------------------


@pytest.mark.parametrize("host, allowed", [
    ("127.0.0.1:{port}", True), ("localhost:{port}", True), ("[::1]:{port}", True), ("localhost", True),
    ("evil.example:{port}", False), ("evil.example", False), ("localhost:1", False), ("127.0.0.1.evil.example:{port}", False), ("", False),
])  # fmt: skip
def test_the_host_header_must_name_this_server(served, host, allowed):
    status, _, data = raw(served, "GET", "/v1/models", headers={"Host": host.format(port=served.port)})
    assert status == (200 if allowed else 400), data
    if not allowed:
        assert json.loads(data)["error"]["code"] == "host_not_allowed"


def test_allowed_host_adds_a_name(serve):
    s = serve(toy_pair(), allowed_hosts=("box.lan",))
    assert raw(s, "GET", "/v1/models", headers={"Host": f"box.lan:{s.port}"})[0] == 200
    assert raw(s, "GET", "/v1/models", headers={"Host": f"other.lan:{s.port}"})[0] == 400


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"])
def test_a_post_body_that_is_not_declared_json_is_415(served, content_type):
    headers = {} if content_type is None else {"Content-Type": content_type}
    status, _, data = raw(served, "POST", "/v1/completions", json.dumps({"prompt": "a"}).encode(), headers)
    assert status == 415 and json.loads(data)["error"]["code"] == "unsupported_media_type"
    assert post(served, {"prompt": "a", "max_tokens": 2}, {"Content-Type": "application/json; charset=utf-8"})[0] == 200


def test_another_pages_origin_is_403_and_the_servers_own_page_passes(served):
    evil = {"Origin": "http://evil.example"}
    assert post(served, {"prompt": "a", "max_tokens": 2}, evil)[0] == 403
    assert raw(served, "GET", "/v1/models", headers=evil)[0] == 403
    assert raw(served, "OPTIONS", "/v1/completions", headers={**evil, "Access-Control-Request-Method": "POST"})[0] == 403
    own = {"Origin": f"http://127.0.0.1:{served.port}"}
    status, headers, _ = post(served, {"prompt": "a", "max_tokens": 2}, own)
    assert status == 200 and "access-control-allow-origin" not in headers
    status, _, page = raw(served, "GET", "/", headers=own)
    assert status == 200 and b"<html" in page.lower()


def test_a_key_may_hold_spaces_and_hashes_and_an_empty_key_is_refused(tmp_path):
    # SPECDEC_API_KEY is one key, its whole value (click split it on whitespace: "horse" alone
    # passed); a key file's "#" starts a comment only at a line's start or after whitespace
    # (a line "Xy#9fSecretPart" was cut to "Xy"); an empty variable is refused, not an open server.
    from specdec_cli.cli.serve import api_keys
    from specdec_cli.errors import BadInput

    assert api_keys(None, "correct horse battery staple", None) == ["correct horse battery staple"]
    assert api_keys(["a b"], "ignored when --api-key is given", None) == ["a b"]
    (tmp_path / "keys").write_text("Xy#9fSecretPart\nk2  # the second\n")
    assert api_keys(None, None, tmp_path / "keys") == ["Xy#9fSecretPart", "k2"]
    with pytest.raises(BadInput, match="must not be empty"):
        api_keys(None, "", None)
    access = Access.for_bind("127.0.0.1", 1, keys=api_keys(None, "correct horse battery staple", None))
    assert access.tenant("Bearer correct horse battery staple") == "key-1"
    with pytest.raises(Refused):
        access.tenant("Bearer horse")


def test_the_admin_key_is_read_as_the_api_keys_are(tmp_path):
    from specdec_cli.cli.serve import ADMIN_VARIABLE, api_keys
    from specdec_cli.errors import BadInput

    assert api_keys(None, "an operator's passphrase", None, ADMIN_VARIABLE, "--admin-key-file") == ["an operator's passphrase"]
    (tmp_path / "admin").write_text("# ops\nOp#1 secret\n")
    assert api_keys(None, None, tmp_path / "admin", ADMIN_VARIABLE, "--admin-key-file") == ["Op#1 secret"]
    with pytest.raises(BadInput) as empty:
        api_keys(None, "", None, ADMIN_VARIABLE, "--admin-key-file")
    assert str(empty.value) == "SPECDEC_ADMIN_KEY must not be empty (unset it for no key)"
    with pytest.raises(BadInput) as missing:
        api_keys(None, None, tmp_path / "nothing", ADMIN_VARIABLE, "--admin-key-file")
    assert str(missing.value).startswith(f"--admin-key-file {tmp_path / 'nothing'}: ")


def test_a_server_on_another_loopback_address_takes_its_own_host_header():
    access = Access.for_bind("127.0.0.2", 8080)
    access.check_host("127.0.0.2:8080")
    access.check_host("localhost:8080")
    with pytest.raises(Refused):
        access.check_host("127.0.0.3:8080")


def test_the_preflight_allows_the_headers_the_page_asks_for(serve):
    # The openai JS SDK sends x-stainless-* headers; a preflight from an allowed page gets them allowed.
    s = serve(toy_pair(), cors_origins=("http://localhost:3000",))
    assert s.worker.ready.wait(10)
    asked = "authorization, content-type, x-stainless-os, x-stainless-lang, x-stainless-retry-count"
    status, headers, _ = raw(s, "OPTIONS", "/v1/chat/completions", headers={"Origin": "http://localhost:3000", "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": asked})
    allowed = [h.strip().lower() for h in headers["access-control-allow-headers"].split(",")]
    assert status == 204 and set(asked.split(", ")) <= set(allowed) and len(allowed) == len(set(allowed))


def test_cors_origin_allows_one_page_with_a_proper_preflight(serve):
    s = serve(toy_pair(), cors_origins=("http://localhost:3000",))
    assert s.worker.ready.wait(10)
    page = {"Origin": "http://localhost:3000"}
    status, headers, _ = raw(s, "OPTIONS", "/v1/chat/completions", headers={**page, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization, content-type"})
    assert status == 204 and headers["access-control-allow-origin"] == "http://localhost:3000"
    assert "POST" in headers["access-control-allow-methods"] and "Content-Type" in headers["access-control-allow-headers"]
    assert "Authorization" in headers["access-control-allow-headers"] and headers["vary"] == "Origin"
    status, headers, body = post(s, chat("a", max_tokens=3), page, path="/v1/chat/completions")
    assert status == 200 and headers["access-control-allow-origin"] == "http://localhost:3000" and body["choices"][0]["message"]["content"] == "bcd"
    assert post(s, {"prompt": "a"}, {"Origin": "http://localhost:4000"})[0] == 403


# -- limits ------------------------------------------------------------------------------------


@pytest.mark.parametrize("stop, needle", [
    (["x"] * (MAX_STOPS + 1), f"at most {MAX_STOPS} strings, got {MAX_STOPS + 1}"),
    (["x" * (MAX_STOP_CHARS + 1)], f"at most {MAX_STOP_CHARS} characters each, got one of {MAX_STOP_CHARS + 1}"),
])  # fmt: skip
def test_stop_strings_are_bounded(served, stop, needle):
    status, _, body = post(served, {"prompt": "a", "stop": stop})
    assert status == 400 and body["error"]["param"] == "stop" and needle in body["error"]["message"]
    assert post(served, {"prompt": "a", "max_tokens": 4, "stop": ["x" * MAX_STOP_CHARS] * MAX_STOPS})[0] == 200


BAD_JSON = [
    (b"[" * 100_000 + b"]" * 100_000, "nests deeper than"),
    (b'{"prompt": "a", "x": ' + b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1) + b"}", "nests deeper than"),
    (b'{"prompt": "a", "max_tokens": ' + b"9" * 5000 + b"}", "out of range"),
    (b'{"prompt": "a", "seed": ' + str(MAX_INT + 1).encode() + b"}", "out of range"),
    (b'{"prompt": "a", "temperature": 1e999}', "out of range"),
    (b'{"prompt": "a", "temperature": NaN}', "NaN is not JSON"),
    (b'{"prompt": "a", "top_p": -Infinity}', "-Infinity is not JSON"),
]


@pytest.mark.parametrize("body, needle", BAD_JSON, ids=[str(i) for i in range(len(BAD_JSON))])
def test_bodies_too_deep_or_with_numbers_out_of_range_are_400(served, body, needle):
    status, _, data = raw(served, "POST", "/v1/completions", body, {"Content-Type": "application/json"})
    assert status == 400 and needle in json.loads(data)["error"]["message"], data[:300]


INT_FIELDS = ["max_tokens", "seed", "top_k", "draft_tokens", "logprobs", "n", "max_completion_tokens", "top_logprobs"]


@pytest.mark.parametrize("field", INT_FIELDS)
@pytest.mark.parametrize("value", [MAX_INT, -MAX_INT, 0])
def test_no_integer_a_client_sends_gives_500(served, field, value):
    chat_fields = {"max_completion_tokens", "top_logprobs"}
    body = chat("a", logprobs=True, **{field: value}) if field in chat_fields else {"prompt": "a", field: value}
    status, _, answer = post(served, body, path="/v1/chat/completions" if field in chat_fields else "/v1/completions")
    assert status < 500, answer


def test_past_the_connection_bound_requests_get_503(serve):
    s = serve(toy_pair(), max_connections=2)
    idle = []
    try:
        assert s.worker.ready.wait(10)
        for _ in range(2):
            idle.append(socket.create_connection(("127.0.0.1", s.port)))
        time.sleep(0.2)  # not an ordering: the server must have accepted the idle connections before the third counts them
        status, _, _ = raw(s, "GET", "/v1/models")
        assert status == 503
        for sock in idle:
            sock.close()
        deadline = time.monotonic() + 5
        while raw(s, "GET", "/v1/models")[0] != 200:
            assert time.monotonic() < deadline, "closed connections were never released"
    finally:
        for sock in idle:
            sock.close()


def test_a_connection_that_trickles_its_headers_is_cut_off(serve):
    s = serve(toy_pair(), header_seconds=0.5)
    with socket.create_connection(("127.0.0.1", s.port)) as sock:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # the headers never end
        sock.settimeout(10)
        started = time.monotonic()
        assert sock.recv(1024) == b""  # closed by the server
        assert time.monotonic() - started < 5
    assert raw(s, "GET", "/v1/models")[0] == 200


def test_a_body_that_does_not_arrive_in_time_is_408(serve):
    s = serve(toy_pair(), body_seconds=0.5)
    assert s.worker.ready.wait(10)
    with socket.create_connection(("127.0.0.1", s.port)) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"prompt\"")
        sock.settimeout(10)
        reply = sock.recv(4096)
        head, _, body = reply.partition(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        while len(body) < length:
            body += sock.recv(4096)
        reply = head + b"\r\n\r\n" + body
    assert reply.startswith(b"HTTP/1.1 408") and b"did not arrive within 0.5 s" in reply


def test_request_timeout_ends_a_generation_with_its_tokens_so_far_as_length(serve):
    s = serve(toy_pair(seconds_per_decode=0.01), request_timeout=0.3)
    assert s.worker.ready.wait(10)
    status, _, body = post(s, {"prompt": "a", "max_tokens": 3000})
    assert status == 200 and body["choices"][0]["finish_reason"] == "length"
    text = body["choices"][0]["text"]
    assert 0 < len(text) < 3000 and body["usage"]["completion_tokens"] == len(text)
    assert text == (GREEDY_TEXT + "a") * (len(text) // 26) + (GREEDY_TEXT + "a")[: len(text) % 26]
    assert post(s, {"prompt": "a", "max_tokens": 5})[2]["choices"][0]["text"] == "bcdef"  # the caches were rolled back


def test_an_answer_that_ends_in_the_round_that_crosses_the_time_limit_keeps_its_finish_reason(serve):
    # Each decode takes 50 ms and the limit is 10 ms: it passes during the prefill. The answer
    # ends by its stop string in round 1, and says so ("stop", not "length"), with its text.
    s = serve(toy_pair(seconds_per_decode=0.05), request_timeout=0.01)
    assert s.worker.ready.wait(10)
    status, _, body = post(s, {"prompt": "a", "max_tokens": 30, "stop": ["de"]})
    assert status == 200 and body["choices"][0]["finish_reason"] == "stop" and body["choices"][0]["text"] == "bc"


def test_a_stream_cut_by_the_time_limit_carries_every_token_it_counts(serve):
    # The worker hands a round's events over together, with its Round; a limit that strikes
    # mid-round still sends the tokens of that round the answer counts. Each decode takes 10 ms,
    # and the limit is checked after each event: the first event after the decode that crossed it
    # is a round's Token (no drafter: a round is a Token, then its Round), so the check cuts
    # between the two. Without the worker's last hand-over the stream lacked that token.
    s = serve(toy_pair(seconds_per_decode=0.01), request_timeout=0.3)
    assert s.worker.ready.wait(10)
    body = {"prompt": "a", "max_tokens": 3000, "stream": True, "stream_options": {"include_usage": True}, "drafter": "none"}
    status, _, data = raw(s, "POST", "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    chunks = [json.loads(line[6:]) for line in data.decode().splitlines() if line.startswith("data: {")]
    text = "".join(c["choices"][0]["text"] for c in chunks if c.get("choices"))
    reasons = [c["choices"][0]["finish_reason"] for c in chunks if c.get("choices") and c["choices"][0].get("finish_reason")]
    assert status == 200 and reasons == ["length"]
    assert 0 < len(text) == chunks[-1]["usage"]["completion_tokens"]
    assert text == ((GREEDY_TEXT + "a") * (len(text) // 26 + 1))[: len(text)]


@pytest.mark.parametrize("stream", [False, True])
def test_a_drafter_that_cannot_work_is_400_before_the_stream_starts(stream, serve):
    s = serve(toy_pair(draft=False))
    assert s.worker.ready.wait(10)
    status, _, data = raw(s, "POST", "/v1/completions", json.dumps({"prompt": "a", "drafter": "cascade", "stream": stream}).encode(), {"Content-Type": "application/json"})
    assert status == 400 and "needs a draft model" in json.loads(data)["error"]["message"]


# -- metrics -----------------------------------------------------------------------------------


def metric(text: str, name: str) -> float:
    """The value of one sample line `name value` (name with its labels, as Prometheus writes it)."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {name} in:\n{text}")


def test_metrics_count_what_was_served(served):
    _, _, first = post(served, {"prompt": "abc", "max_tokens": 9})
    _, _, second = post(served, {"prompt": "abcdef", "max_tokens": 3})
    assert post(served, {"prompt": "a", "top_p": 5})[0] == 400
    status, headers, data = raw(served, "GET", "/metrics")
    text = data.decode()
    assert status == 200 and headers["content-type"].startswith("text/plain")
    p = "specdec:"
    assert metric(text, p + 'http_requests_total{endpoint="/v1/completions",status="200"}') == 2
    assert metric(text, p + 'http_requests_total{endpoint="/v1/completions",status="400"}') == 1
    both = [first, second]
    assert metric(text, p + "prompt_tokens_total") == 3 + 6
    assert metric(text, p + "prompt_tokens_cached_total") == sum(b["usage"]["prompt_tokens_details"]["cached_tokens"] for b in both) > 0
    assert metric(text, p + "generation_tokens_total") == 12
    assert metric(text, p + "spec_decode_num_draft_tokens_total") == sum(b["timings"]["draft_n"] for b in both)
    assert metric(text, p + "spec_decode_num_accepted_tokens_total") == sum(b["timings"]["draft_n_accepted"] for b in both)
    assert metric(text, p + 'spec_decode_num_accepted_tokens_per_pos_total{position="1"}') == sum(b["timings"]["accepted_by_position"][0] for b in both)
    assert metric(text, p + "n_decode_total") == sum(b["timings"]["target_passes"] for b in both)
    assert metric(text, p + "target_tokens_decoded") == served.pair.target.decoded > 0
    assert metric(text, p + "num_requests_waiting") == 0 and metric(text, p + "num_requests_running") == 0
    assert metric(text, p + "time_to_first_token_seconds_count") == 2 and metric(text, p + "e2e_request_latency_seconds_count") == 2


# -- the worked examples in the docstrings --------------------------------------------------------


def test_guard_docstring_examples(tmp_path):
    from specdec_cli.serve.guard import Access, Refused, is_loopback, read_key_file, split_host

    access = Access.for_bind("127.0.0.1", 8080, keys=("k1", "k2"))
    access.check_host("localhost:8080")
    with pytest.raises(Refused) as refused:
        access.check_host("evil.example:8080")
    assert refused.value.status == 400 and refused.value.message.startswith("the Host header names 'evil.example:8080'")
    with pytest.raises(Refused) as refused:
        access.check_origin("http://evil.example", "localhost:8080")
    assert refused.value.status == 403
    assert access.tenant("Bearer k2") == "key-2"
    access = Access.for_bind("127.0.0.1", 8080, keys=("k1", "k2"), admin_keys=("a1",))
    with pytest.raises(Refused) as refused:
        access.check_admin("Bearer k2", "/metrics")
    assert refused.value.status == 403 and refused.value.message.startswith("a tenant's key does not open /metrics")
    assert access.sees_everything("Bearer a1") and not access.sees_everything("Bearer k1")
    assert (is_loopback("::1"), is_loopback("0.0.0.0"), is_loopback("localhost"), is_loopback("192.168.1.2")) == (True, False, True, False)
    keys = tmp_path / "keys"
    keys.write_text("# ours\nk1\n\n k2 # Bo's\nXy#9f\n")
    assert read_key_file(keys) == ["k1", "k2", "Xy#9f"]
    assert split_host("localhost:8080") == ("localhost", 8080) and split_host("[::1]:80") == ("[::1]", 80)
    assert split_host("example") == ("example", None) and split_host("a:b") == ("a:b", None)
    assert Access.for_bind("0.0.0.0", 8080).hosts is None  # another address: any Host, unless --allowed-host names some


def test_body_and_stop_docstring_examples():
    from specdec_cli.options import BadSetting, check_stops
    from specdec_cli.serve.body import _depth

    assert _depth({"a": [1, {}]}) == 3
    with pytest.raises(BadSetting) as bad:
        check_stops(["a" * 1001])
    assert bad.value.setting == "stop" and "must be at most 1000 characters each, got one of 1001" in str(bad.value)


def test_metrics_docstring_example():
    from specdec_cli.decoding.stats import RunStats
    from specdec_cli.serve.metrics import Metrics

    metrics = Metrics(waiting=lambda: 2, running=lambda: 1, decoded=lambda: 530)
    metrics.finished(RunStats(prompt_tokens=7, new_tokens=5, drafted=4, accepted=3, target_passes=2), cached_tokens=5, first_token_seconds=0.1, seconds=0.9)
    metrics.answered("/v1/completions", 200)
    text = metrics.render().decode()
    assert text.startswith("# HELP specdec:http_requests_total")
    assert metric(text, "specdec:num_requests_waiting") == 2 and metric(text, "specdec:target_tokens_decoded") == 530
    assert metric(text, "specdec:prompt_tokens_evaluated_total") == 2 and metric(text, "specdec:generation_tokens_total") == 5
