"""`specdec serve` on the built-in pair, as its users reach it: the openai client and curl.

The reference texts come from `specdec run` (a subprocess) before the one server process
starts, so two llama.cpp processes never run at once. At temperature 0 speculative decoding
is the target's greedy decoding, so the served text must equal `run`'s on the same rendered
prompt: chat through the chat template, completions as `run --raw`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "Write a haiku about the sea"
RAW = "The history of the Roman Empire"


def specdec_run(*args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "specdec_cli.cli", "run", "--temperature", "0", "-n", "24", "--json", *args],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)["text"]


@pytest.fixture(scope="module")
def reference(builtin_paths) -> dict[str, str]:
    return {"chat": specdec_run(PROMPT), "raw": specdec_run("--raw", RAW)}


@pytest.fixture(scope="module")
def server(reference, live_server):
    """The live server, started only after the references were taken."""
    return live_server


def client(url: str):
    from openai import OpenAI

    return OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=120)


def model_of(c) -> str:
    (model,) = c.models.list().data
    return model.id


def test_the_openai_client_gets_runs_greedy_text_streamed_or_not(reference, server):
    c = client(server.url)
    whole = c.chat.completions.create(model=model_of(c), messages=[{"role": "user", "content": PROMPT}], max_tokens=24, temperature=0)
    assert whole.choices[0].message.content == reference["chat"], server.log()
    stream = c.chat.completions.create(model=model_of(c), messages=[{"role": "user", "content": PROMPT}], max_tokens=24, temperature=0, stream=True)
    assert "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices) == reference["chat"]
    raw = c.completions.create(model=model_of(c), prompt=RAW, max_tokens=24, temperature=0)
    assert raw.choices[0].text == reference["raw"]
    timings = whole.model_extra["timings"]
    assert timings["draft_n"] > 0 and 0 < timings["draft_n_accepted"] <= timings["draft_n"]


def test_curl_streams_server_sent_events(reference, server):
    body = json.dumps({"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 24, "temperature": 0, "stream": True})
    proc = subprocess.run(["curl", "-sN", server.url + "/v1/chat/completions", "-H", "Content-Type: application/json", "-d", body], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    events = [line[6:] for line in proc.stdout.split("\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == reference["chat"]


def test_a_chats_next_turn_evaluates_only_what_is_new(reference, server):
    c = client(server.url)
    turns = [{"role": "user", "content": PROMPT}]
    first = c.chat.completions.create(model=model_of(c), messages=turns, max_tokens=16, temperature=0)
    turns += [{"role": "assistant", "content": first.choices[0].message.content}, {"role": "user", "content": "Now one about the mountains."}]
    before = decoded_so_far(server.url)
    second = c.chat.completions.create(model=model_of(c), messages=turns, max_tokens=16, temperature=0)
    decoded = decoded_so_far(server.url) - before
    cached = second.usage.prompt_tokens_details.cached_tokens
    t = second.model_extra["timings"]
    assert cached >= first.usage.prompt_tokens - 1 and t["prompt_n"] < second.usage.prompt_tokens - first.usage.prompt_tokens + 16
    # What the target's llama_decode evaluated (the backend's counter): the uncached prompt but
    # its last token, then each pass's last token and drafts. A cache that claimed more than it
    # held would show here as more tokens decoded.
    assert decoded == t["prompt_n"] - 1 + t["target_passes"] + t["draft_n"], (decoded, t)


def decoded_so_far(url: str) -> float:
    with urllib.request.urlopen(url + "/metrics", timeout=30) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("specdec:target_tokens_decoded "):
                return float(line.split()[1])
    raise AssertionError("no specdec:target_tokens_decoded in /metrics")


def test_concurrent_clients_each_get_what_they_get_alone(reference, server):
    """4 clients x 2 requests at once (bounded: 8 requests of 12 tokens): queued FIFO, none lost,
    each greedy answer identical to the same request served alone."""
    from concurrent.futures import ThreadPoolExecutor

    c = client(server.url)
    model = model_of(c)
    prompts = [f"Name {n} colours." for n in range(2, 6)]

    def ask(prompt: str) -> str:
        return c.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}], max_tokens=12, temperature=0).choices[0].message.content

    alone = {p: ask(p) for p in prompts}
    with ThreadPoolExecutor(max_workers=4) as pool:
        together = list(pool.map(ask, prompts * 2, timeout=300))
    assert together == [alone[p] for p in prompts * 2]
