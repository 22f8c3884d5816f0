"""Tool calls per chat-template family (grammar/tools.py), without a model.

The grammars run over a toy vocabulary (one token per byte, an EOS token, and the family
openers as special tokens where a test asks for them) in llguidance's own matcher: each
family's canonical call is accepted to the end and EOS, wrong names, wrong argument types and
calls beyond `parallel` are refused at the token where they go wrong, and required / named
choices refuse text at the first token. The parser reads each family's answers in pieces of
1, 3 and 7 characters and whole, and must give the same deltas joined and the same Reply.
"""

from __future__ import annotations

import json
import re

import llguidance
import pytest

from specdec_cli.errors import GrammarError
from specdec_cli.grammar.tool_parser import ArgumentsDelta, CallStart, ContentDelta, Reply, ToolCall
from specdec_cli.grammar.tools import FAMILIES, Tool, ToolChoice, closed, family_of, plan, tools_of

EOS = 256
SPECIALS = {"<tool_call>": 257, "</tool_call>": 258, "[TOOL_CALLS]": 259}
TEMPLATES = {  # short fakes that carry each family's markers
    "hermes": "{% for t in tools %}{{ t | tojson }}{% endfor %}<tool_call>{% for m in messages %}{{ m.content }}{% endfor %}",
    "mistral": "{% for m in messages %}{% if m.tool_calls %}[TOOL_CALLS]{% endif %}{{ m.content }}{% endfor %}",
    "llama3": "{% for m in messages %}<|start_header_id|>{{ m.role }}{% if m.role == 'ipython' %}{% endif %}{{ m.content }}{% endfor %}",
    "generic": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}",
}
WEATHER = {"type": "function", "function": {"name": "weather", "description": "Today's weather in a city.", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"],
    "additionalProperties": False}}}  # fmt: skip
CLOCK = {"type": "function", "function": {"name": "clock", "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}}}}
TOOLS = tools_of([WEATHER, CLOCK])
W = '{"name": "weather", "arguments": {"city": "Paris"}}'
C = '{"name": "clock", "arguments": {"zone": "CET"}}'
CANONICAL = {  # each family's answer with two calls, as the model writes it
    "hermes": f"<tool_call>\n{W}\n</tool_call>\n<tool_call>\n{C}\n</tool_call>",
    "mistral": f'[TOOL_CALLS][{W[:-1]}, "id": "abcdefghi"}}, {C[:-1]}, "id": "123456789"}}]',
    "llama3": W.replace('"arguments"', '"parameters"'),
    "generic": f'{{"tool_calls": [{W}, {C}]}}',
}


class ToyVocab:
    """One token per byte, EOS, and the openers as special tokens (their bytes start with 0xff, as llguidance wants)."""

    def __init__(self) -> None:
        self.tokens = [bytes([i]) for i in range(256)] + [b"\xff<eos>"] + [b"\xff" + text.encode() for text in SPECIALS]
        self.eos_token_id = EOS
        self.bos_token_id = None
        self.special_token_ids = [EOS, *SPECIALS.values()]

    def __call__(self, text: bytes | str) -> list[int]:
        return list(text.encode() if isinstance(text, str) else text)


TOKENIZER = llguidance.LLTokenizer(llguidance.TokenizerWrapper(ToyVocab()))


def ids(text: str, special: bool) -> list[int]:
    """The toy tokens of `text`; with `special`, each opener is its special token."""
    if not special:
        return list(text.encode())
    out: list[int] = []
    for part in re.split("(" + "|".join(re.escape(s) for s in SPECIALS) + ")", text):
        out += [SPECIALS[part]] if part in SPECIALS else list(part.encode())
    return out


def special_id(text: str) -> int | None:
    return SPECIALS.get(text)


def grammar_of(family, choice="auto", parallel=True, special=False, tools=TOOLS):
    choice = ToolChoice.of(choice, tools)
    return plan([{"role": "user", "content": "hi"}], tools, choice, parallel, TEMPLATES[family], special_id if special else None).grammar


def taken(grammar, text: str, special: bool = False, eos: bool = True) -> tuple[int, int]:
    """(tokens the grammar accepts, tokens offered) for `text` (and EOS)."""
    tokens = ids(text, special) + ([EOS] if eos else [])
    return grammar.matcher(TOKENIZER).validate_tokens(tokens), len(tokens)


def accepts(grammar, text: str, special: bool = False) -> bool:
    n, total = taken(grammar, text, special)
    return n == total


def refused_after(grammar, text: str, special: bool = False) -> int:
    """How many tokens of `text` the grammar takes before refusing one (asserts that it refuses one)."""
    n, total = taken(grammar, text, special, eos=False)
    assert n < total, f"{text!r} was accepted whole"
    return n


# -- family_of -------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_family_of_finds_each_familys_marker(family):
    assert family_of(TEMPLATES[family]) == family


def test_family_of_needs_tools_for_llama3_and_defaults_to_generic():
    llama30 = "{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>{{ m.content }}<|eot_id|>{% endfor %}"
    assert family_of(llama30) == "generic"  # Llama 3.0: no tool calling
    assert family_of(llama30 + "{% if tools %}{% endif %}") == "llama3"
    gemma3 = "{% for m in messages %}<start_of_turn>{{ m.role }}\n{{ m.content }}<end_of_turn>\n{% endfor %}"
    assert family_of(gemma3) == "generic" and family_of(None) == "generic" and family_of("") == "generic"


# -- the grammars ------------------------------------------------------------------------------------


@pytest.mark.parametrize("special", [False, True], ids=["opener as text", "opener as special token"])
@pytest.mark.parametrize("family", FAMILIES)
def test_each_familys_canonical_answer_is_accepted_to_the_end(family, special):
    for choice in ("auto", "required"):
        assert accepts(grammar_of(family, choice, special=special), CANONICAL[family], special)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_call_with_an_unknown_name_is_refused_at_the_name(family):
    grammar = grammar_of(family, "required")
    wrong = CANONICAL[family].replace('"weather"', '"sunny"', 1)
    assert refused_after(grammar, wrong) == len(wrong[: wrong.index('"sunny"') + 1].encode())  # no tool's name starts with "s"


@pytest.mark.parametrize("family", FAMILIES)
def test_an_argument_of_the_wrong_type_is_refused(family):
    grammar = grammar_of(family, "required")
    wrong = CANONICAL[family].replace('"Paris"', "42", 1)
    assert refused_after(grammar, wrong) == len(wrong[: wrong.index("42")].encode())


@pytest.mark.parametrize("family", ["hermes", "mistral", "generic"])
def test_parallel_false_refuses_a_second_call(family):
    grammar = grammar_of(family, "required", parallel=False)
    text = CANONICAL[family]
    second = text.index("\n<tool_call>") + 1 if family == "hermes" else text.index(', {"name": "clock"')
    assert refused_after(grammar, text) == second  # at the second call's first character
    one = {"hermes": f"<tool_call>\n{W}\n</tool_call>", "mistral": f'[TOOL_CALLS][{W[:-1]}, "id": "abcdefghi"}}]',
           "generic": f'{{"tool_calls": [{W}]}}'}[family]  # fmt: skip
    assert accepts(grammar, one)


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "weather"}}])
@pytest.mark.parametrize("family", FAMILIES)
def test_required_and_named_choices_refuse_text_at_the_first_token(family, choice):
    grammar = grammar_of(family, choice)
    assert refused_after(grammar, "The weather is fine.") == 0
    assert refused_after(grammar, " " + CANONICAL[family]) == 0


@pytest.mark.parametrize("family", FAMILIES)
def test_a_named_choice_refuses_the_other_tools(family):
    grammar = grammar_of(family, {"type": "function", "function": {"name": "clock"}})
    assert refused_after(grammar, CANONICAL[family]) == CANONICAL[family].index("weather")  # only "clock" may follow '"name": "'


@pytest.mark.parametrize("special", [False, True], ids=["opener as text", "opener as special token"])
@pytest.mark.parametrize("family", ["hermes", "mistral"])
def test_auto_allows_text_then_calls_and_nothing_but_whitespace_after(family, special):
    grammar = grammar_of(family, special=special)
    assert accepts(grammar, "The weather is fine, no <tool call needed.\n", special)
    assert accepts(grammar, "", special)
    assert accepts(grammar, "Let me look.\n" + CANONICAL[family] + "\n", special)
    assert refused_after(grammar, CANONICAL[family] + " Done.", special) == len(ids(CANONICAL[family] + " ", special))
    opener = "<tool_call>" if family == "hermes" else "[TOOL_CALLS]"
    text = f"Sure: {opener} oops"
    after = 1 if family == "mistral" else 0  # Mistral's opener may be followed by a space
    assert refused_after(grammar, text, special) == len(ids(f"Sure: {opener}", special)) + after


def test_llama3_auto_takes_text_that_does_not_start_a_call():
    grammar = grammar_of("llama3")
    assert accepts(grammar, "The weather is fine.") and accepts(grammar, "")
    assert refused_after(grammar, '{"weather": 1}') == 2  # '{' starts a call: '"w' cannot go on to '"weather"'
    assert refused_after(grammar, CANONICAL["llama3"] + " ") == len(CANONICAL["llama3"])  # one call, then the end


def test_generic_auto_takes_a_response_and_required_does_not():
    response = '{"response": "It is sunny in Zürich, \\"really\\".\\n"}'
    assert accepts(grammar_of("generic"), response)
    assert refused_after(grammar_of("generic", "required"), response) == 2


def test_the_grammar_keeps_the_json_layout():
    grammar = grammar_of("hermes", "required")
    assert refused_after(grammar, '<tool_call>\n{"name":"weather"') == len('<tool_call>\n{"name":')


def test_strict_tools_refuse_what_llguidance_cannot_enforce_and_others_ignore_it():
    odd = {"type": "object", "properties": {"day": {"type": "string", "format": "lunar-date"}}}
    lenient = tools_of([{"type": "function", "function": {"name": "moon", "parameters": odd}}])
    assert accepts(grammar_of("generic", "required", tools=lenient), '{"tool_calls": [{"name": "moon", "arguments": {"day": "x"}}]}')
    with pytest.raises(GrammarError, match=r"tools\[0\]\.function\.parameters: the JSON schema cannot be used: .*lunar-date"):
        tools_of([{"type": "function", "function": {"name": "moon", "parameters": odd, "strict": True}}])


def test_a_parameters_schema_with_refs_still_resolves_inside_the_call():
    parameters = {"type": "object", "$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}},
                  "properties": {"at": {"$ref": "#/$defs/point"}, "near": {"type": "array", "items": {"$ref": "#"}}},
                  "required": ["at"]}  # fmt: skip
    tools = tools_of([{"type": "function", "function": {"name": "go", "parameters": parameters}}])
    grammar = grammar_of("hermes", "required", tools=tools)
    assert accepts(grammar, '<tool_call>\n{"name": "go", "arguments": {"at": {"x": 1}, "near": [{"at": {"x": 2}}]}}\n</tool_call>')
    assert refused_after(grammar, '<tool_call>\n{"name": "go", "arguments": {"at": {"x": "1"') == len('<tool_call>\n{"name": "go", "arguments": {"at": {"x": ')


# -- the request's tools and tool_choice -----------------------------------------------------------------


def test_tool_choice_of_each_form():
    assert ToolChoice.of(None, TOOLS) == ToolChoice("auto") and ToolChoice.of(None, []) == ToolChoice("none")
    assert ToolChoice.of("required", TOOLS) == ToolChoice("required") and ToolChoice.of("none", TOOLS) == ToolChoice("none")
    assert ToolChoice.of({"type": "function", "function": {"name": "clock"}}, TOOLS) == ToolChoice("function", "clock")


@pytest.mark.parametrize(
    "value, message",
    [
        ({"type": "function", "function": {"name": "x"}}, "tool_choice names the function 'x', which is not among the tools: weather, clock"),
        ("sometimes", 'tool_choice must be "auto", "none", "required" or {"type": "function", "function": {"name": ...}}, not "sometimes"'),
        ({"type": "function"}, "tool_choice must be"),
        ({"type": "function", "function": {"name": 3}}, "tool_choice.function.name must be a string"),
    ],
)
def test_tool_choice_of_refuses_what_it_cannot_use(value, message):
    with pytest.raises(GrammarError) as info:
        ToolChoice.of(value, TOOLS)
    assert str(info.value).startswith(message)


def test_required_without_tools_is_refused():
    with pytest.raises(GrammarError, match='tool_choice is "required" but the request has no tools'):
        ToolChoice.of("required", [])


@pytest.mark.parametrize(
    "tools, message",
    [
        ([{"type": "function", "function": {"name": "get weather"}}], r"tools\[0\]\.function\.name 'get weather' is not a function name"),
        ([{"type": "function", "function": {"name": "x" * 65}}], r"tools\[0\]\.function\.name 'x{65}' is not a function name"),
        ([{"type": "retrieval"}], r'tools\[0\] must be \{"type": "function"'),
        ([WEATHER, {"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}],
         r'tools\[1\]\.function\.parameters must be a JSON schema of type "object", not \'string\''),
        ([{"type": "function", "function": {"name": "f", "parameters": [1]}}], r"tools\[0\]\.function\.parameters must be a JSON schema object"),
        ([WEATHER, CLOCK, WEATHER], r"tools\[2\]\.function\.name 'weather' is also the name of tools\[0\]"),
        ({"weather": WEATHER}, "tools must be a list"),
    ],
)  # fmt: skip
def test_tools_of_names_the_field_that_is_wrong(tools, message):
    with pytest.raises(GrammarError, match=message):
        tools_of(tools)


def test_a_tool_without_parameters_takes_an_empty_object():
    tool = Tool.of({"type": "function", "function": {"name": "ping"}})
    assert tool.parameters == {"type": "object", "properties": {}, "additionalProperties": False} and not tool.strict
    assert accepts(grammar_of("llama3", "required", tools=[tool]), '{"name": "ping", "parameters": {}}')
    assert not accepts(grammar_of("llama3", "required", tools=[tool]), '{"name": "ping", "parameters": {"x": 1}}')


def test_objects_that_do_not_say_otherwise_take_only_their_properties():
    schema = {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "integer"}}},
                                               "c": {"type": "object", "additionalProperties": True}}}  # fmt: skip
    got = closed(schema)
    assert got["additionalProperties"] is False and got["properties"]["a"]["additionalProperties"] is False
    assert got["properties"]["c"]["additionalProperties"] is True and schema.get("additionalProperties") is None  # the caller's is not changed


# -- the messages ------------------------------------------------------------------------------------------

HISTORY = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "18 °C"},
    {"role": "user", "content": "And Rome?"},
]  # fmt: skip


def test_generic_describes_the_tools_in_the_system_turn_and_writes_the_history_as_json():
    p = plan(HISTORY, TOOLS, ToolChoice("auto"), True, TEMPLATES["generic"])
    assert p.family == "generic" and p.tools is None
    assert [m["role"] for m in p.messages] == ["system", "user", "assistant", "user"]
    system = p.messages[0]["content"]
    assert system.endswith("\n\nBe brief.") and '{"response": ' in system and '{"tool_calls": [' in system
    assert '{"name": "weather", "description": "Today\'s weather in a city.", "parameters": {"type": "object", ' in system
    assert p.messages[2]["content"] == '{"tool_calls": [{"name": "weather", "arguments": {"city": "Paris"}, "id": "call_1"}]}'
    assert p.messages[3]["content"] == (
        '{"tool_response": {"tool": "weather", "tool_call_id": "call_1", "content": "18 °C"}}\n\nAnd Rome?'
    )  # the tool's result and the next question, merged into one user turn


def test_generic_adds_a_system_turn_and_none_adds_no_description():
    p = plan(HISTORY[1:], TOOLS, ToolChoice("required"), False, TEMPLATES["generic"])
    assert p.messages[0]["role"] == "system" and "calling one of the tools" in p.messages[0]["content"]
    none = plan(HISTORY, TOOLS, ToolChoice("none"), True, TEMPLATES["generic"])
    assert none.grammar is None and none.tools is None and none.messages[0] == {"role": "system", "content": "Be brief."}
    assert none.messages[2]["content"].startswith('{"tool_calls": [')  # the history is still written as JSON


def test_generic_messages_render_with_a_template_that_refuses_two_user_turns_in_a_row():
    from specdec_cli.llama.chat_template import render_jinja_template

    alternating = (
        "{% for m in messages %}{% if loop.index0 > 0 and messages[loop.index0 - 1].role == m.role %}"
        "{{ raise_exception('roles must alternate') }}{% endif %}<{{ m.role }}>{{ m.content }}{% endfor %}"
    )
    p = plan(HISTORY, TOOLS, ToolChoice("auto"), True, alternating)
    text = render_jinja_template(alternating, p.messages, bos="", eos="", tools=p.tools)
    assert text.count("<user>") == 2 and '"tool_response"' in text


def test_template_families_get_the_tools_and_the_messages_as_they_are():
    p = plan(HISTORY, TOOLS, ToolChoice("auto"), True, TEMPLATES["hermes"])
    assert p.tools == [WEATHER, TOOLS[1].openai()] and p.messages == HISTORY
    none = plan(HISTORY, TOOLS, ToolChoice("none"), True, TEMPLATES["hermes"])
    assert none.tools is None and none.grammar is None and none.messages == HISTORY


def test_mistral_ids_become_nine_alphanumerics_the_same_way_every_time():
    history = HISTORY + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "abcdefghi", "type": "function", "function": {"name": "clock", "arguments": {}}}]}]  # fmt: skip
    first = plan(history, TOOLS, ToolChoice("auto"), True, TEMPLATES["mistral"]).messages
    again = plan(history, TOOLS, ToolChoice("auto"), True, TEMPLATES["mistral"]).messages
    mapped = first[2]["tool_calls"][0]["id"]
    assert re.fullmatch("[a-zA-Z0-9]{9}", mapped) and first[3]["tool_call_id"] == mapped and first == again
    assert first[5]["tool_calls"][0]["id"] == "abcdefghi"  # already a Mistral id: kept
    assert HISTORY[2]["tool_calls"][0]["id"] == "call_1"  # the request's messages are left as they were


# -- the parser ------------------------------------------------------------------------------------------


def counter():
    n = iter(range(1000))
    return lambda: f"id{next(n)}"


def read(family, text, size, choice="auto"):
    """Feed `text` in pieces of `size` characters (0: whole); the deltas (joined per kind) and the Reply."""
    parser = plan(HISTORY, TOOLS, ToolChoice.of(choice, TOOLS), True, TEMPLATES[family]).parser(counter())
    deltas = []
    for i in range(0, len(text), size or len(text) or 1):
        deltas += parser.feed(text[i : i + (size or len(text))])
    deltas += parser.end()
    return deltas, parser.finish()


def joined(deltas):
    """Content text, call starts and each call's arguments text, from a list of deltas (checking their order)."""
    content, starts, arguments = "", [], {}
    for delta in deltas:
        if isinstance(delta, ContentDelta):
            content += delta.text
        elif isinstance(delta, CallStart):
            assert delta.index == len(starts)
            starts.append((delta.index, delta.id, delta.name))
            arguments[delta.index] = ""
        else:
            assert isinstance(delta, ArgumentsDelta) and delta.index in arguments, "arguments before their call's start"
            arguments[delta.index] += delta.text
    return content, starts, arguments


TWO_CALLS = [ToolCall("id0", "weather", '{"city": "Paris"}'), ToolCall("id1", "clock", '{"zone": "CET"}')]
ANSWERS = [  # (family, answer, the Reply)
    ("hermes", CANONICAL["hermes"], Reply(None, TWO_CALLS)),
    ("hermes", "I will look both up.\n\n" + CANONICAL["hermes"] + "\n", Reply("I will look both up.", TWO_CALLS)),
    ("hermes", "No call: a <tool_ca and [TOOL_CALLS] are text.  \n", Reply("No call: a <tool_ca and [TOOL_CALLS] are text.  \n", [])),
    ("hermes", '<tool_call>\n{"name": "weather", "arguments": {"city": "}{\\"", "days": [1, {"a": "]"}]}}\n</tool_call>',
     Reply(None, [ToolCall("id0", "weather", '{"city": "}{\\"", "days": [1, {"a": "]"}]}')])),
    ("mistral", CANONICAL["mistral"], Reply(None, TWO_CALLS)),
    ("mistral", "Hm. [TOOL_CALLS] [" + C[:-1] + ', "id": "123456789"}]', Reply("Hm.", [ToolCall("id0", "clock", '{"zone": "CET"}')])),
    ("llama3", CANONICAL["llama3"], Reply(None, TWO_CALLS[:1])),
    ("llama3", "It is sunny {really}.", Reply("It is sunny {really}.", [])),
    ("generic", CANONICAL["generic"], Reply(None, TWO_CALLS)),
    ("generic", '{"response": "Sunny \\ud83d\\ude00 in Z\\u00fcrich,\\n\\"really\\" \\\\o/"}', Reply('Sunny 😀 in Zürich,\n"really" \\o/', [])),
    ("generic", '{"response": "lone \\ud83d half"}', Reply("lone \ufffd half", [])),
]  # fmt: skip


@pytest.mark.parametrize("family, answer, reply", ANSWERS, ids=[f"{a[0]}-{i}" for i, a in enumerate(ANSWERS)])
def test_the_parser_reads_each_familys_answer_the_same_in_pieces_of_any_size(family, answer, reply):
    whole = read(family, answer, 0)
    assert whole[1] == reply
    content, starts, arguments = joined(whole[0])
    assert content == (reply.content or "")
    assert starts == [(i, call.id, call.name) for i, call in enumerate(reply.calls)]
    assert [arguments[i] for i in range(len(reply.calls))] == [call.arguments for call in reply.calls]
    for call in reply.calls:
        json.loads(call.arguments)
    for size in (1, 3, 7):
        deltas, again = read(family, answer, size)
        assert again == reply and joined(deltas) == joined(whole[0]), f"pieces of {size}"


@pytest.mark.parametrize("family", FAMILIES)
def test_what_the_grammar_accepts_the_parser_reads(family):
    answer = CANONICAL[family]
    assert accepts(grammar_of(family), answer)
    assert read(family, answer, 5)[1].calls == (TWO_CALLS if family != "llama3" else TWO_CALLS[:1])


def test_content_is_held_back_only_while_it_may_be_an_opener():
    parser = plan(HISTORY, TOOLS, ToolChoice("auto"), True, TEMPLATES["hermes"]).parser(counter())
    assert parser.feed("Sure <tool") == [ContentDelta("Sure")]
    assert parser.feed("box") == [ContentDelta(" <toolbox")]
    assert parser.feed(" <tool_call>\n{") == []
    assert parser.feed('"name": "clock", "arguments": {"zone"') == [CallStart(0, "id0", "clock"), ArgumentsDelta(0, '{"zone"')]


def test_an_answer_cut_short_keeps_what_was_complete():
    cut = CANONICAL["hermes"][: CANONICAL["hermes"].index('"CET"') + 3]
    deltas, reply = read("hermes", cut, 3)
    assert reply == Reply(None, TWO_CALLS[:1])  # the second call's arguments never closed: left out
    assert joined(deltas)[2][1] == '{"zone": "CE'  # though its start was streamed
    assert read("generic", '{"response": "Half an ans', 4)[1] == Reply("Half an ans", [])
    assert read("hermes", "Wait <tool_c", 1)[1] == Reply("Wait <tool_c", [])
    assert read("mistral", "[TOOL_CALLS][", 2)[1] == Reply("", [])


def test_tool_choice_none_passes_the_text_through():
    parser = plan(HISTORY, TOOLS, ToolChoice("none"), True, TEMPLATES["hermes"]).parser()
    assert parser.feed("<tool_call>\n") == [ContentDelta("<tool_call>\n")]
    assert parser.finish() == Reply("<tool_call>\n", [])


def test_call_ids_have_each_familys_form():
    for family, pattern in (("hermes", "call_[0-9a-f]{24}"), ("mistral", "[a-zA-Z0-9]{9}")):
        parser = plan(HISTORY, TOOLS, ToolChoice("auto"), True, TEMPLATES[family]).parser()
        reply = (parser.feed(CANONICAL[family]), parser.finish())[1]
        assert len(reply.calls) == 2 and all(re.fullmatch(pattern, call.id) for call in reply.calls)
        assert reply.calls[0].id != reply.calls[1].id


def test_the_module_docstring_example():
    qwen_template = TEMPLATES["hermes"]
    tools = tools_of([{"type": "function", "function": {"name": "weather", "parameters":
                       {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])  # fmt: skip
    p = plan([{"role": "user", "content": "Paris?"}], tools, ToolChoice.of("auto", tools), True, qwen_template)
    assert p.family == "hermes" and p.tools == [tools[0].openai()] and p.grammar.kind == "tools"
    parser = p.parser()
    first = parser.feed('Let me check.\n<tool_call>\n{"name": "weather", "argu')
    assert first[0] == ContentDelta("Let me check.") and first[1].name == "weather" and len(first) == 2
    assert parser.feed('ments": {"city": "Paris"}}\n</tool_call>') == [ArgumentsDelta(0, '{"city": "Paris"}')]
    assert parser.finish() == Reply("Let me check.", [ToolCall(first[1].id, "weather", '{"city": "Paris"}')])


def test_the_parser_docstring_example():
    from specdec_cli.grammar.tool_parser import FORMATS, ToolParser

    parser = ToolParser(FORMATS["generic"], lambda: "call_1")
    assert parser.feed('{"tool_calls": [{"name": "weather", "arguments": {"city": ') == [CallStart(0, "call_1", "weather"), ArgumentsDelta(0, '{"city": ')]
    assert parser.feed('"Paris"}}]}') == [ArgumentsDelta(0, '"Paris"}')]
    assert parser.finish() == Reply(None, [ToolCall("call_1", "weather", '{"city": "Paris"}')])
