"""Structured outputs and tools on the built-in pair through `specdec serve`, with the clients people use.

- the openai SDK: `beta.chat.completions.parse` with a pydantic model, `response_format`
  json_object, tools with tool_choice required (streamed and not: the same call);
- `llm`: `--schema`, and a tool it runs (`-T llm_version`), through an extra-openai-models.yaml;
- at temperature 0 every answer with speculation equals the one with `drafter: "none"`.

SmolLM2's template knows no tools, so its calls come in the generic form (grammar/tools.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

import pytest
from pydantic import BaseModel

pytestmark = pytest.mark.model

PERSON_PROMPT = "Give the name, age and city of this person as JSON. Text: Maria Lopez is 34 and lives in Madrid."
WEATHER = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                           "required": ["city", "unit"]}}}]  # fmt: skip


class Person(BaseModel):
    name: str
    age: int
    city: str


@pytest.fixture(scope="module")
def client(live_server):
    from openai import OpenAI

    c = OpenAI(base_url=live_server.url + "/v1", api_key="none", max_retries=0, timeout=120)
    return c, c.models.list().data[0].id


def test_the_openai_sdk_parses_a_pydantic_model_and_speculation_changes_nothing(client):
    c, model = client
    messages = [{"role": "user", "content": PERSON_PROMPT}]
    got = c.beta.chat.completions.parse(model=model, messages=messages, response_format=Person, max_tokens=60, temperature=0)
    person = got.choices[0].message.parsed
    assert isinstance(person, Person) and got.choices[0].finish_reason == "stop"
    alone = c.beta.chat.completions.parse(model=model, messages=messages, response_format=Person, max_tokens=60, temperature=0, extra_body={"drafter": "none"})
    assert alone.choices[0].message.content == got.choices[0].message.content
    timings = got.model_extra["timings"]
    assert timings["forced_n"] >= 6 and alone.model_extra["timings"]["draft_n"] == 0  # every key and separator forced


def test_json_object_is_valid_json(client):
    c, model = client
    got = c.chat.completions.create(model=model, messages=[{"role": "user", "content": PERSON_PROMPT}], response_format={"type": "json_object"}, max_tokens=80, temperature=0)
    assert got.choices[0].finish_reason == "stop" and isinstance(json.loads(got.choices[0].message.content), dict)


def test_a_tool_call_streamed_and_whole_is_the_same_call(client):
    c, model = client
    asked = dict(model=model, messages=[{"role": "user", "content": "What is the weather in Paris?"}], tools=WEATHER, tool_choice="required",
                 parallel_tool_calls=False, max_tokens=80, temperature=0)  # fmt: skip
    whole = c.chat.completions.create(**asked)
    (call,) = whole.choices[0].message.tool_calls
    assert whole.choices[0].finish_reason == "tool_calls" and call.function.name == "get_weather"
    arguments = json.loads(call.function.arguments)
    assert set(arguments) == {"city", "unit"} and arguments["unit"] in ("celsius", "fahrenheit")
    pieces, names, finish = [], [], None
    for chunk in c.chat.completions.create(**asked, stream=True):
        for choice in chunk.choices:
            for delta in choice.delta.tool_calls or []:
                assert delta.index == 0
                names += [delta.function.name] if delta.function.name else []
                pieces.append(delta.function.arguments or "")
            finish = choice.finish_reason or finish
    assert names == ["get_weather"] and "".join(pieces) == call.function.arguments and finish == "tool_calls"
    alone = c.chat.completions.create(**asked, extra_body={"drafter": "none"})
    assert alone.choices[0].message.tool_calls[0].function.arguments == call.function.arguments


def test_a_tool_result_comes_back_into_the_next_turn(client):
    c, model = client
    messages = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees and sunny"},
    ]  # fmt: skip
    got = c.chat.completions.create(model=model, messages=messages, tools=WEATHER, max_tokens=60, temperature=0)
    reply = got.choices[0].message
    assert reply.content or reply.tool_calls  # an answer or another call, each in its own field


def test_llm_takes_a_schema_and_runs_a_tool(live_server, tmp_path):
    alias = json.loads(urllib.request.urlopen(live_server.url + "/v1/models").read())["data"][0]["id"]
    (tmp_path / "extra-openai-models.yaml").write_text(
        f"- model_id: specdec\n  model_name: {alias}\n  api_base: {live_server.url}/v1\n  supports_schema: true\n  supports_tools: true\n"
    )
    env = {**os.environ, "LLM_USER_PATH": str(tmp_path), "OPENAI_API_KEY": "none"}

    def llm(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "llm", "-m", "specdec", "-o", "max_tokens", "60", *args], env=env, capture_output=True, text=True, timeout=300)

    done = llm("--schema", "name, age int, city", PERSON_PROMPT)
    assert done.returncode == 0, done.stderr
    assert set(json.loads(done.stdout)) == {"name", "age", "city"} and isinstance(json.loads(done.stdout)["age"], int)
    # The tool call comes back valid, llm runs it and sends its result in the next turn. (SmolLM2
    # then calls it again: llm stops at the chain limit, which is the model's doing, not the server's.)
    done = llm("-T", "llm_version", "--td", "--cl", "2", "What version of llm is installed?")
    assert "Tool call: llm_version({})" in done.stderr, done.stderr
    assert "Chain limit" in done.stderr or done.returncode == 0, done.stderr
