"""Structured outputs and tools through the server: what a request may ask, what is refused, and the answers' shape.

The toy pair (toyserver.py) writes letters; its grammar vocabulary is the 26 letters (and an end
id past its rows), so the constraints here are grammars over letters: `root ::= [a-e]+` turns
the greedy "bcdefghij" into "bcdeabcde". Bad constraints, tools and tool messages each get a 400
naming the field, with llguidance's reason, and the next request is served. The real pair's
JSON schemas, tools and clients are in test_structured_real.py.
"""

from __future__ import annotations

import json

import pytest

from specdec_cli.grammar.compile import MAX_GRAMMAR_CHARS
from specdec_cli.serve.types import IGNORED
from toyserver import chat

LETTERS = 'root ::= [a-e]+'
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


def content(served, **fields) -> str:
    status, _, body = served.post("/v1/chat/completions", chat("a", **fields))
    assert status == 200, body
    return body["choices"][0]["message"]["content"]


def test_a_grammar_constrains_the_answer_and_speculation_keeps_it(served):
    assert content(served) == "bcdefghij"
    assert content(served, grammar=LETTERS) == "bcdeabcde"  # after 'e' the greedy 'f' is masked: the first allowed maximum, 'a'
    assert content(served, grammar=LETTERS, drafter="none") == "bcdeabcde"
    status, _, body = served.post("/v1/completions", {"prompt": "a", "grammar": LETTERS})
    assert status == 200 and body["choices"][0]["text"] == "bcdeabcde"


def test_the_timings_count_forced_tokens(served):
    status, _, body = served.post("/v1/chat/completions", chat("a", grammar='root ::= "abc" [a-z]+'))
    assert status == 200 and body["choices"][0]["message"]["content"].startswith("abc")
    assert body["timings"]["forced_n"] == 3 and body["timings"]["grammar_ms"] > 0


BAD = [
    (chat(grammar='root ::= "a'), "grammar", "GBNF grammar cannot be used"),
    (chat(grammar=""), "grammar", "must be a GBNF grammar"),
    (chat(json_schema={"type": "foo"}), "json_schema", "Invalid type: foo"),
    (chat(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "foo"}}}), "response_format.json_schema.schema", "Invalid type: foo"),
    (chat(response_format={"type": "json_schema", "json_schema": {"name": "x"}}), "response_format.json_schema.schema", "is required"),
    (chat(response_format={"type": "xml"}), "response_format.type", ""),
    (chat(response_format={"type": "json_object"}, grammar=LETTERS), "grammar", "cannot be combined with response_format"),
    (chat(json_schema={"type": "object", "enum": ["x" * 100] * (MAX_GRAMMAR_CHARS // 100)}), "json_schema", "MAX_GRAMMAR_CHARS"),
    (chat(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_time"}}), "tool_choice", "'get_time', which is not among the tools: get_weather"),
    (chat(tools=TOOLS, tool_choice="sometimes"), "tool_choice", "tool_choice must be"),
    (chat(tools=[{"type": "function", "function": {"name": "bad name"}}]), "tools", "is not a function name"),
    (chat(tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]), "tools", 'of type "object"'),
    (chat(tool_choice="required"), "tool_choice", "needs tools"),
    (chat(tools=TOOLS, response_format={"type": "json_object"}), "response_format", "cannot be combined with tools"),
    ({"messages": [{"role": "user", "content": "a"}, {"role": "tool", "tool_call_id": "call_9", "content": "sunny"}]}, "messages.1.tool_call_id", "answers no tool call"),
    ({"messages": [{"role": "tool", "content": "sunny"}]}, "messages.0.tool_call_id", "is required"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, "messages.0.content.0.type", "'image_url' is not supported"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{bad"}}]}]},
     "messages.0.tool_calls.0.function.arguments", "is not JSON"),
    (chat(functions=[{"name": "f"}]), "functions", "not supported"),
    (chat(best_of=2), "best_of", "not supported"),
    (chat(repeat_penalty=1.2), "repeat_penalty", "not supported"),
    (chat(logit_bias={"1": 5}), "logit_bias", "not supported"),
    (chat(audio={"voice": "alloy"}), "audio", "not supported"),
]  # fmt: skip


@pytest.mark.parametrize("body, param, needle", BAD, ids=[b[1] + "-" + str(i) for i, b in enumerate(BAD)])
def test_a_bad_constraint_or_tool_is_a_400_naming_the_field_and_the_server_goes_on(served, body, param, needle):
    status, _, got = served.post("/v1/chat/completions", body)
    assert status == 400, got
    assert got["error"]["param"] == param and needle in got["error"]["message"], got
    assert content(served) == "bcdefghij"


def test_fields_that_change_nothing_are_accepted(served):
    neutral = {"parallel_tool_calls": True, "response_format": {"type": "text"}, "n": 1, "best_of": 1, "functions": [], "repeat_penalty": 1.0}
    assert content(served, **neutral, **{name: "x" for name in IGNORED}) == "bcdefghij"


def test_a_tool_result_turn_is_taken(served):
    messages = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "b"}]},
    ]
    status, _, body = served.post("/v1/chat/completions", {"messages": messages, "tools": TOOLS, "tool_choice": "none"})
    assert status == 200 and body["choices"][0]["finish_reason"] == "length", body
    # The toy's template knows no tools (the generic family): the call and its result reach it as
    # text, the call as JSON in the assistant's turn, the result as a user turn.
    rendered = served.pair.target.messages  # what the chat template was given (the toy records it)
    assert [m["role"] for m in rendered] == ["user", "assistant", "user"]
    assert json.loads(rendered[1]["content"]) == {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "call_1"}]}
    assert json.loads(rendered[2]["content"]) == {"tool_response": {"tool": "get_weather", "tool_call_id": "call_1", "content": "b"}}


def test_a_streamed_constrained_answer_ends_with_length_when_cut(served):
    status, _, body = served.post("/v1/chat/completions", chat("a", grammar=LETTERS, max_tokens=3))
    assert status == 200 and body["choices"][0]["finish_reason"] == "length" and body["choices"][0]["message"]["content"] == "bcd"
    chunks = list(served.client().chat.completions.create(model="toy", messages=[{"role": "user", "content": "a"}], stream=True,
                                                           max_tokens=4, extra_body={"grammar": LETTERS}))  # fmt: skip
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "bcde"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert json.loads(json.dumps(chunks[-1].model_dump()))  # plain JSON all along
