"""The conversation of a chat request with tools, as each template family's chat template can render it.

hermes and llama3 templates render OpenAI's history as it is (assistant `tool_calls`, `tool`
messages). Mistral's accept only tool-call ids of 9 letters or digits: `mistral_ids` maps every
other id to one by its hash, the same way each time. A template that knows no tools (generic)
gets the calls and results as JSON text (`generic_history`), the tools' description before the
system turn's own (`with_system`), and consecutive turns of one role merged (`merged`:
templates such as Gemma 3's refuse two user turns in a row).

    generic_history([{"role": "tool", "tool_call_id": "c1", "name": "f", "content": "7"}])
    -> [{"role": "user", "content": '{"tool_response": {"tool": "f", "tool_call_id": "c1", "content": "7"}}'}]

Left out: which family a template is, and the description of the tools (tools.py), the answer's
grammar and parser (tools.py, tool_parser.py).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Sequence

from ..errors import GrammarError
from . import compile as gc
from .tool_parser import ALPHANUMERIC

MISTRAL_ID = re.compile(r"[a-zA-Z0-9]{9}")  # Mistral's templates refuse any other tool-call id
JSON_SEPARATORS = (gc.JSON_LAYOUT["item_separator"], gc.JSON_LAYOUT["key_separator"])


def json_text(value: Any) -> str:
    """JSON text in the answer's layout (compile.JSON_LAYOUT), non-ASCII kept."""
    return json.dumps(value, ensure_ascii=False, separators=JSON_SEPARATORS)


def _calls_of(message: dict, where: str) -> list[tuple[str | None, str, Any]]:
    """An assistant message's tool calls as (id, name, arguments); GrammarError naming a malformed one."""
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise GrammarError(f"{where}.tool_calls must be a list")
    out = []
    for j, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise GrammarError(f'{where}.tool_calls[{j}] must be {{"id": ..., "type": "function", "function": {{"name": ..., "arguments": ...}}}}')
        arguments = function.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                pass  # kept as the text it is
        out.append((call.get("id"), function["name"], arguments))
    return out


def _text(content: Any) -> str:
    return "" if content is None else content if isinstance(content, str) else json_text(content)


def generic_history(messages: Sequence[dict]) -> list[dict]:
    """The history for a template that knows no tools: an assistant's calls become its content
    '{"tool_calls": [{"name", "arguments", "id"}]}' (after its text, if any), a tool's result a
    user turn '{"tool_response": {"tool", "tool_call_id", "content"}}'.

    Example: [{"role": "tool", "tool_call_id": "c1", "name": "f", "content": "7"}]
    -> [{"role": "user", "content": '{"tool_response": {"tool": "f", "tool_call_id": "c1", "content": "7"}}'}]
    """
    names: dict[str, str] = {}  # call id -> function name, for tool messages that do not name theirs
    out = []
    for i, message in enumerate(messages):
        role, content = message.get("role"), message.get("content")
        if role == "assistant" and message.get("tool_calls"):
            calls = []
            for call_id, name, arguments in _calls_of(message, f"messages[{i}]"):
                calls.append({"name": name, "arguments": arguments} | ({"id": call_id} if call_id else {}))
                if call_id:
                    names[call_id] = name
            text = "\n\n".join(part for part in (_text(content), json_text({"tool_calls": calls})) if part)
            out.append({"role": "assistant", "content": text})
        elif role == "tool":
            call_id = message.get("tool_call_id")
            name = message.get("name") or names.get(call_id, "")
            response = {"tool": name, "tool_call_id": call_id, "content": _text(content)}
            out.append({"role": "user", "content": json_text({"tool_response": response})})
        else:
            out.append({"role": role, "content": content})
    return out


def with_system(messages: list[dict], text: str) -> list[dict]:
    """`text` before the first system message's content, or as a system message of its own first."""
    if messages and messages[0]["role"] == "system":
        own = _text(messages[0]["content"])
        return [{"role": "system", "content": f"{text}\n\n{own}" if own else text}] + messages[1:]
    return [{"role": "system", "content": text}] + messages


def merged(messages: list[dict]) -> list[dict]:
    """Consecutive messages of one role as one, contents joined by a blank line.
    Example: user "a", user "b", assistant "c" -> user "a\\n\\nb", assistant "c"."""
    out: list[dict] = []
    for message in messages:
        if out and out[-1]["role"] == message["role"]:
            parts = [part for part in (_text(out[-1]["content"]), _text(message["content"])) if part]
            out[-1] = {"role": message["role"], "content": "\n\n".join(parts)}
        else:
            out.append(dict(message))
    return out


def _mistral_id(call_id: Any) -> Any:
    """A tool-call id as Mistral's templates accept it: 9 letters or digits; others are mapped to such
    an id by their hash, so the same id always maps to the same one. Example: "call_1" -> 9 alphanumerics."""
    if not isinstance(call_id, str) or MISTRAL_ID.fullmatch(call_id):
        return call_id
    number = int.from_bytes(hashlib.sha256(call_id.encode()).digest()[:8], "big")
    chars = []
    for _ in range(9):
        number, digit = divmod(number, len(ALPHANUMERIC))
        chars.append(ALPHANUMERIC[digit])
    return "".join(chars)


def mistral_ids(messages: Sequence[dict]) -> list[dict]:
    """The messages with every tool-call id (assistant calls and tool results) as `_mistral_id` makes it."""
    out = []
    for message in messages:
        message = dict(message)
        if message.get("tool_calls"):
            message["tool_calls"] = [
                {**call, "id": _mistral_id(call.get("id"))} if isinstance(call, dict) else call for call in message["tool_calls"]
            ]
        if "tool_call_id" in message:
            message["tool_call_id"] = _mistral_id(message["tool_call_id"])
        out.append(message)
    return out
