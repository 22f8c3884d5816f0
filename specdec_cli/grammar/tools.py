"""Tool calls (OpenAI's `tools`) over a local model, per chat-template family: the prompt, the grammar, the parser.

A chat request with tools becomes a `ToolPlan` (`plan`): the messages and tools to render with
the model's chat template, a grammar that keeps every call valid JSON matching its function's
parameters schema, and a parser per answer that turns the text back into OpenAI's
`tool_calls`, streaming. The format is the one the model's family was trained on, found from
its Jinja template's text as llama.cpp finds it (`family_of`):

    hermes   (Hermes 2 Pro, Qwen 2.5/3)   <tool_call>\\n{"name": "f", "arguments": {...}}\\n</tool_call>  (one block per call)
    mistral  (Mistral Nemo and later)     [TOOL_CALLS][{"name": "f", "arguments": {...}, "id": "a1b2c3d4e"}, ...]
    llama3   (Llama 3.1+ JSON calling)    {"name": "f", "parameters": {...}}                         (the whole answer; one call)
    generic  (any other template)         {"tool_calls": [{"name": "f", "arguments": {...}}, ...]} or {"response": "text"}

hermes, mistral and llama3 templates render the tools themselves (the template's `tools`
variable); for a generic template the tools and the answer's format are described in the
system turn, the history's calls and results are written as JSON text, and consecutive turns of
one role are merged (templates such as Gemma 3's refuse two user turns in a row).

What the grammar allows, by tool_choice (`ToolChoice`): "none": no grammar, no tools shown,
the answer is text. "auto": hermes and mistral: free text until the family's opener, a
constrained call from there on, and after the last call nothing but whitespace; llama3: text
that does not start with "{", or one call; generic: either JSON form. "required": one or more
calls from the first token on. "function": the same, only that function. `parallel` false
allows at most one call (llama3 has one anyway). Every call is `{"name": <the tool's name>,
"arguments": <its parameters schema>}` in compile.JSON_LAYOUT (objects that do not say otherwise
take only the properties they name: `closed`), one `%json` per tool inside a
Lark grammar, so that each tool keeps its own `strict` (false: llguidance's lenient mode). An
opener that is one special token of the target's vocabulary (`special_id`) is written as the
token (`<[id]>`), since a quoted string never matches a control token.

The parser (`plan.parser()`, tool_parser.py) reads the answer as it streams into ContentDelta /
CallStart / ArgumentsDelta, and `finish()` gives the `Reply`. Ids are the parser's own, made
when a call's name is known ("call_" and 24 hex digits; Mistral: 9 alphanumerics): the id a
Mistral model writes after the arguments is not used.

    tools = tools_of([{"type": "function", "function": {"name": "weather", "parameters":
                       {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])
    p = plan([{"role": "user", "content": "Paris?"}], tools, ToolChoice.of("auto", tools), True, qwen_template)
    p.family -> "hermes"; p.tools -> [tools[0].openai()]; p.grammar.kind -> "tools"
    parser = p.parser()
    parser.feed('Let me check.\\n<tool_call>\\n{"name": "weather", "argu')
        -> [ContentDelta("Let me check."), CallStart(0, "call_…", "weather")]
    parser.feed('ments": {"city": "Paris"}}\\n</tool_call>')  -> [ArgumentsDelta(0, '{"city": "Paris"}')]
    parser.finish() -> Reply("Let me check.", [ToolCall("call_…", "weather", '{"city": "Paris"}')])

Left out: the history as each family renders it (tool_history.py), reading the answer
(tool_parser.py), rendering the template (llama/chat_template.py), the vocabulary and which of
its tokens are special (llama/model.py), running the grammar (guide.py), the wire format
(serve/).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import llguidance

from ..errors import GrammarError
from . import compile as gc
from .tool_history import generic_history, json_text, merged, mistral_ids, with_system
from .tool_parser import FORMATS, ToolParser, call_ids

FAMILIES = ("hermes", "llama3", "mistral", "generic")
MODES = ("auto", "none", "required", "function")
NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")  # OpenAI's rule for a function's name


# -- the request: tools and tool_choice ------------------------------------------------------------


@dataclass(frozen=True)
class Tool:
    """One function the model may call: its name, what it does, and a JSON schema (an object) of its arguments."""

    name: str
    description: str
    parameters: dict
    strict: bool = False

    @classmethod
    def of(cls, value: Any, where: str = "tools[0]") -> "Tool":
        """A tool from OpenAI's form {"type": "function", "function": {"name", "description", "parameters",
        "strict"}}; GrammarError naming the field (`where`) that is wrong. A missing parameters schema
        means no arguments; one without "type" is taken as an object's."""
        if not isinstance(value, dict) or value.get("type", "function") != "function" or not isinstance(value.get("function"), dict):
            raise GrammarError(f'{where} must be {{"type": "function", "function": {{"name": ..., "parameters": ...}}}}')
        function = value["function"]
        name = function.get("name")
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise GrammarError(f"{where}.function.name {name!r} is not a function name: use 1 to 64 letters, digits, '_' or '-'")
        description = function.get("description") or ""
        if not isinstance(description, str):
            raise GrammarError(f"{where}.function.description must be a string")
        strict = function.get("strict") or False
        if not isinstance(strict, bool):
            raise GrammarError(f"{where}.function.strict must be true or false")
        parameters = function.get("parameters")
        if parameters is None:
            parameters = {"type": "object", "properties": {}}
        if not isinstance(parameters, dict):
            raise GrammarError(f"{where}.function.parameters must be a JSON schema object, not {type(parameters).__name__}")
        if "type" not in parameters:
            parameters = {"type": "object", **parameters}
        if parameters["type"] != "object":
            raise GrammarError(f'{where}.function.parameters must be a JSON schema of type "object", not {parameters["type"]!r}')
        parameters = closed(parameters)
        try:
            gc.json_schema(parameters, strict)
        except GrammarError as exc:
            raise GrammarError(f"{where}.function.parameters: {exc}") from None
        return cls(name, description, parameters, strict)

    def function(self) -> dict:
        """The function as OpenAI writes it: {"name", "description", "parameters"}."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    def openai(self) -> dict:
        """The tool in OpenAI's form, as templates' `tools` variable expects it."""
        return {"type": "function", "function": self.function()}


def closed(schema: Any) -> Any:
    """A parameters schema whose objects take only the properties they name, where they do not say
    otherwise (additionalProperties absent): a call's arguments are the function's, and a small
    model left free to add keys may add them without end. Example: {"type": "object", "properties":
    {}} -> {"type": "object", "properties": {}, "additionalProperties": False}."""
    if isinstance(schema, list):
        return [closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: closed(value) for key, value in schema.items()}
    if (out.get("type") == "object" or "properties" in out) and "additionalProperties" not in out and "patternProperties" not in out:
        out["additionalProperties"] = False
    return out


def tools_of(value: Any) -> list[Tool]:
    """A request's `tools` (OpenAI's form) as Tools; GrammarError naming the wrong field or a repeated name."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise GrammarError('tools must be a list of {"type": "function", "function": {...}} objects')
    tools = [Tool.of(item, f"tools[{i}]") for i, item in enumerate(value)]
    first: dict[str, int] = {}
    for i, tool in enumerate(tools):
        if tool.name in first:
            raise GrammarError(f"tools[{i}].function.name {tool.name!r} is also the name of tools[{first[tool.name]}]: names must differ")
        first[tool.name] = i
    return tools


@dataclass(frozen=True)
class ToolChoice:
    """What the answer may do (MODES): "auto" (text or calls), "none" (text), "required" (calls),
    "function" (calls of the function `name` only)."""

    mode: str
    name: str | None = None

    @classmethod
    def of(cls, value: Any, tools: Sequence[Tool]) -> "ToolChoice":
        """OpenAI's tool_choice: "auto", "none", "required", {"type": "function", "function": {"name": "f"}},
        or None (auto where there are tools). "auto" without tools is "none"; GrammarError for the rest."""
        names = [tool.name for tool in tools]
        if value is None or value == "auto":
            return cls("auto" if tools else "none")
        if value == "none":
            return cls("none")
        if value == "required":
            if not tools:
                raise GrammarError('tool_choice is "required" but the request has no tools')
            return cls("required")
        if isinstance(value, dict) and value.get("type") == "function" and isinstance(value.get("function"), dict):
            name = value["function"].get("name")
            if not isinstance(name, str):
                raise GrammarError("tool_choice.function.name must be a string")
            if name not in names:
                among = ", ".join(names) if names else "(none)"
                raise GrammarError(f"tool_choice names the function {name!r}, which is not among the tools: {among}")
            return cls("function", name)
        raise GrammarError(
            f'tool_choice must be "auto", "none", "required" or {{"type": "function", "function": {{"name": ...}}}}, not {json.dumps(value)[:80]}'
        )


def family_of(template: str | None) -> str:
    """The tool-call format a chat template's text shows (FAMILIES), found as llama.cpp finds it.

    Example: a template holding "<tool_call>" -> "hermes"; ChatML without tools -> "generic".
    """
    if not template:
        return "generic"
    if "<tool_call>" in template:
        return "hermes"
    if "[TOOL_CALLS]" in template:
        return "mistral"
    if "<|start_header_id|>" in template and ("ipython" in template or re.search(r"\btools\b", template)):
        return "llama3"
    return "generic"


# -- the plan ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ToolPlan:
    """What a chat request with tools becomes: the messages and tools to render (`tools` None: render
    none), the grammar of the answer (None: free text), and `parser()` for each answer."""

    family: str
    messages: list[dict]
    tools: list[dict] | None
    grammar: gc.Grammar | None
    choice: ToolChoice

    def parser(self, new_id: Callable[[], str] | None = None) -> "ToolParser":
        """A fresh parser for one answer; `new_id` makes each call's id (default: random, the family's form)."""
        if self.choice.mode == "none":
            return ToolParser(None, new_id or call_ids(self.family))
        return ToolParser(FORMATS[self.family], new_id or call_ids(self.family))


def plan(
    messages: Sequence[dict],
    tools: Sequence[Tool],
    choice: ToolChoice,
    parallel: bool = True,
    template: str | None = None,
    special_id: Callable[[str], int | None] | None = None,
) -> ToolPlan:
    """A chat request with tools, for a model whose chat template is `template`.

    `messages` are Hugging Face's dicts: assistant `tool_calls` [{"id", "type": "function",
    "function": {"name", "arguments": {...}}}], `tool` messages with `tool_call_id` and content (a
    string or None). `special_id(text)` is the id of the one special token whose text is `text`,
    or None. GrammarError where the grammar cannot be built.
    """
    family = family_of(template)
    if choice.mode != "none" and not tools:
        raise GrammarError(f"tool_choice {choice.mode!r} needs tools, and the request has none")
    shown = [tool.openai() for tool in tools] if choice.mode != "none" else None
    if family == "generic":
        rendered = generic_history(messages)
        if shown is not None:
            rendered = with_system(rendered, _generic_prompt(tools, choice, parallel))
        rendered, shown = merged(rendered), None
    elif family == "mistral":
        rendered = mistral_ids(messages)
    else:
        rendered = [dict(message) for message in messages]
    grammar = None
    if choice.mode != "none":
        allowed = [tool for tool in tools if choice.mode != "function" or tool.name == choice.name]
        grammar = _grammar(family, allowed, choice.mode == "auto", parallel, special_id or (lambda text: None))
    return ToolPlan(family, rendered, shown, grammar, choice)


# -- the generic template's system turn -------------------------------------------------------------


def _generic_prompt(tools: Sequence[Tool], choice: ToolChoice, parallel: bool) -> str:
    """The system turn's description of the tools and of the answer's format, for a generic template."""
    call = '{"name": <tool name>, "arguments": <arguments object>}'
    calls = f'{{"tool_calls": [{call}, ...]}}' if parallel else f'{{"tool_calls": [{call}]}}'
    which = {"auto": "", "required": " one or more of the tools" if parallel else " one of the tools",
             "function": f" the tool {choice.name}"}[choice.mode]  # fmt: skip
    if choice.mode == "auto":
        answer = f'Answer with one JSON object: {calls} to call tools, or {{"response": "<your answer>"}} to answer directly.'
    else:
        answer = f"Answer with one JSON object, {calls}, calling{which}."
    return "\n".join(
        ["You can call these tools (each one's name, what it does, and the JSON schema of its arguments):", ""]
        + [json_text(tool.function()) for tool in tools]
        + ["", answer, 'Results of calls come back as {"tool_response": {"tool": <tool name>, "tool_call_id": <id>, "content": <result>}}.']
    )


# -- the grammar ------------------------------------------------------------------------------------


def _refs_under(schema: Any, key: str) -> Any:
    """`schema` with each local "$ref" ("#..." ) pointing below `key` of the wrapping call object, so
    that a parameters schema's refs ("#/$defs/x", "#") still resolve once it is embedded."""
    if isinstance(schema, list):
        return [_refs_under(item, key) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for name, value in schema.items():
        if name == "$ref" and isinstance(value, str) and value.startswith("#"):
            out[name] = f"#/properties/{key}{value[1:]}"
        elif name in ("const", "enum", "default", "examples"):
            out[name] = value  # values, not schemas
        else:
            out[name] = _refs_under(value, key)
    return out


def _call_schema(tool: Tool, key: str, with_id: bool) -> dict:
    """The JSON schema of one call of `tool`: {"name": <const>, key: <its parameters>} (Mistral: and "id"),
    in compile.JSON_LAYOUT, lenient unless the tool is strict."""
    properties: dict[str, Any] = {"name": {"const": tool.name}, key: _refs_under(tool.parameters, key)}
    if with_id:
        properties["id"] = {"type": "string", "pattern": "^[a-zA-Z0-9]{9}$"}
    return {
        "x-guidance": {**gc.JSON_LAYOUT, "lenient": not tool.strict},
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def _grammar(family: str, tools: Sequence[Tool], auto: bool, parallel: bool, special_id: Callable[[str], int | None]) -> gc.Grammar:
    """The checked Lark grammar of an answer (see the module docstring for what each family allows)."""

    def literal(text: str) -> str:
        token = special_id(text)
        return f"<[{token}]>" if token is not None else json.dumps(text)

    key = "parameters" if family == "llama3" else "arguments"
    rules = [f"call_{i}: %json {json.dumps(_call_schema(tool, key, family == 'mistral'), ensure_ascii=False)}" for i, tool in enumerate(tools)]
    rules.append("call: " + " | ".join(f"call_{i}" for i in range(len(tools))))
    rules += ["TEXT: /(.|\\n)*/", "WS: /[ \\t\\r\\n]*/"]
    if family in ("hermes", "mistral"):
        opener = "<tool_call>" if family == "hermes" else "[TOOL_CALLS]"
        if family == "hermes":
            body = f'"\\n" call "\\n" {literal("</tool_call>")}'
            rest = f"(WS {literal(opener)} {body})* WS" if parallel else "WS"
        else:
            body = '" "? "[" call (", " call)* "]"' if parallel else '" "? "[" call "]"'
            rest = "WS"
        if not auto:
            start = f"{literal(opener)} {body} {rest}"
        elif special_id(opener) is not None:
            start = f"TEXT | TEXT {literal(opener)} {body} {rest}"
        else:  # a lazy lexeme: any text, ended by the first opener (llguidance's docs/syntax.md, "Tool calling")
            rules.append(f"opener[lazy]: TEXT {json.dumps(opener)}")
            start = f"TEXT | opener {body} {rest}"
    elif family == "llama3":
        rules.append("NOT_A_CALL: /([^{](.|\\n)*)?/")
        start = "NOT_A_CALL | call" if auto else "call"
    else:
        calls = '"{\\"tool_calls\\": [" call (", " call)* "]}"' if parallel else '"{\\"tool_calls\\": [" call "]}"'
        rules.append('response: %json {"type": "string"}')
        start = f'{calls} | "{{\\"response\\": " response "}}"' if auto else calls
    text = "\n".join(["%llguidance {}", f"start: {start}"] + rules) + "\n"
    if len(text) > gc.MAX_GRAMMAR_CHARS:
        raise GrammarError(f"the tool list's grammar is {len(text):,} characters; at most {gc.MAX_GRAMMAR_CHARS:,} are accepted (MAX_GRAMMAR_CHARS)")
    try:
        source = llguidance.LLMatcher.grammar_from_lark(text)
    except ValueError as exc:
        raise GrammarError(f"the tool list cannot be used: {exc}") from None
    return gc.check(gc.Grammar("tools", source))

