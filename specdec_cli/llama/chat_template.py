"""A chat conversation as prompt text, through the model's own template: Jinja in a sandbox first, llama.cpp's matcher second.

`render_chat` formats messages with a GGUF's chat template, ending on the assistant's turn. It
renders the Jinja template as Hugging Face does (so a default system prompt written into the
template is kept); where Jinja cannot render it, llama.cpp's built-in matcher, which recognises
the common families by their markers, is the fallback (without tools: it knows none). A limit
hit while rendering is the template's fault and has no fallback.

A chat template is code that comes with the model file, so it runs in jinja2's immutable
sandbox, under a time limit and a size limit (`render_jinja_template`).

Messages are (role, content) pairs, or dicts in Hugging Face's form: assistant turns may hold
`tool_calls` ([{"id", "type": "function", "function": {"name", "arguments": {...}}}]) and
`tool` turns a `tool_call_id`. `tools` (OpenAI's form) reaches the template as its `tools`
variable. The template sees what Hugging Face's `apply_chat_template` gives it: `messages`,
`tools`, `add_generation_prompt`, `bos_token`, `eos_token`, `raise_exception`,
`strftime_now(format)`, a `tojson` filter that keeps non-ASCII text and HTML characters as they
are (jinja2's own escapes them), and `{% break %}` / `{% continue %}`.

    template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
    render_jinja_template(template, [("user", "hi")], bos="", eos="")  -> "<user>hi<assistant>"

    template = "{% for t in tools %}{{ t.function | tojson }}{% endfor %}{% for m in messages %}{{ m.content }}{% endfor %}"
    render_jinja_template(template, [{"role": "user", "content": "<weather>?"}], bos="", eos="",
                          tools=[{"type": "function", "function": {"name": "w"}}])  -> '{"name": "w"}<weather>?'

    render_chat("{% if <|im_start|>", [("user", "hi")], bos="", eos="", name="m.gguf")   # Jinja fails: ChatML by its marker
    -> "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"

Left out: reading the template from the model file (model.py, gguf.py); what tools and tool
calls become for a template that knows none (grammar/tools.py).
"""

from __future__ import annotations

import ctypes
import json
import logging
import sys
import time
from datetime import datetime
from typing import Any, Sequence, Union

import llama_cpp as lc  # before numpy: see specdec_cli/__init__.py

from ..errors import BadInput, SpecdecError

log = logging.getLogger("specdec")

# A chat template is code that comes with the GGUF file: it renders under these limits.
TEMPLATE_SECONDS = 2.0  # real templates render in milliseconds
TEMPLATE_MIN_CHARS = 1 << 16  # output allowed beyond 8x the messages' own length


Message = Union[tuple[str, str], dict[str, Any]]  # (role, content), or Hugging Face's dict form


def render_chat(template: str, messages: Sequence[Message], *, bos: str, eos: str, name: str, tools: list[dict] | None = None) -> str:
    """Format messages with a chat template, ending on the assistant's turn: Jinja first
    (`render_jinja_template`), llama.cpp's matcher where Jinja cannot render it. Each error names
    the model file (`name`); `bos` and `eos` are the template's `bos_token` and `eos_token`."""
    try:
        return render_jinja_template(template, messages, bos=bos, eos=eos, tools=tools)
    except BadInput as exc:  # a limit was hit: the template is at fault, no fallback
        raise BadInput(f"{name}: {exc}") from None
    except Exception as exc:  # jinja2 errors of every kind: fall back to llama.cpp's matcher
        if tools:
            raise BadInput(f"{name}: the chat template cannot render this conversation with tools: {exc}") from None
        log.debug("jinja rendering of the chat template failed (%s); using llama.cpp's matcher", exc)
    return _render_builtin(template, messages, name)


def _render_builtin(template: str, messages: Sequence[Message], name: str) -> str:
    """llama.cpp's built-in matcher: it knows a template's family by its markers and formats the turns so."""
    turns = [(m["role"], m.get("content") or "") if isinstance(m, dict) else m for m in messages]
    keep = [(role.encode(), content.encode()) for role, content in turns]
    chat = (lc.llama_chat_message * len(keep))()
    for i, (role, content) in enumerate(keep):
        chat[i].role = role
        chat[i].content = content
    size = 2 * sum(len(c) + len(r) for r, c in keep) + 256
    buf = ctypes.create_string_buffer(size)
    n = lc.llama_chat_apply_template(template.encode(), chat, len(keep), True, buf, size)
    if n > size:
        buf = ctypes.create_string_buffer(n)
        n = lc.llama_chat_apply_template(template.encode(), chat, len(keep), True, buf, n)
    if n < 0:
        raise SpecdecError(f"llama.cpp does not recognise the chat template of {name}; pass --raw and format the prompt yourself")
    return buf.raw[:n].decode("utf-8", errors="replace")


class _TemplateTimeout(BaseException):
    """Raised by the watchdog inside the template's code; a BaseException, so no `except Exception` there swallows it."""


def render_jinja_template(
    template: str,
    messages: Sequence[Message],
    *,
    bos: str,
    eos: str,
    seconds: float = TEMPLATE_SECONDS,
    tools: list[dict] | None = None,
) -> str:
    """Render a Hugging Face chat template in a sandbox, with the generation prompt added, within limits.

    `messages` are (role, content) pairs or Hugging Face's dicts; `tools`, where not None, is
    the template's `tools` variable.

    Limits (BadInput when one is passed, so the caller does not fall back to another
    template): `seconds` of rendering, checked on every line the template's compiled code
    runs (a trace function, only when no debugger or coverage tool has set one); output of
    at most TEMPLATE_MIN_CHARS + 8 x the messages' length (a dict message, and the tools,
    count as their JSON text); `*` and `**` that would build a string, list or number beyond
    that; recursion beyond Python's limit. Jinja's sandbox itself caps each range() at
    100000 items.

    Example: "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}"
    -> BadInput("the chat template did not finish within 2 s ...")
    """
    import jinja2.sandbox  # only when a template is rendered

    rendered = [_as_dict(message) for message in messages]
    own = sum(_length(message) for message in messages) + (_json_length(tools) if tools is not None else 0)
    max_chars = TEMPLATE_MIN_CHARS + 8 * own

    def too_big() -> BadInput:
        return BadInput(
            f"the chat template writes more than {max_chars} characters for this prompt (an endless loop?); "
            "pass --raw and format the prompt yourself"
        )

    class Sandbox(jinja2.sandbox.ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**"})

        def call_binop(self, context, operator, left, right):
            if operator == "*":
                for seq, n in ((left, right), (right, left)):
                    if isinstance(seq, (str, list, tuple)) and isinstance(n, int) and len(seq) * n > max_chars:
                        raise too_big()
            elif isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
                if right * abs(left).bit_length() > 8 * max_chars:  # a number with more digits than the output may hold
                    raise too_big()
            return super().call_binop(context, operator, left, right)

    def raise_exception(message: str) -> None:
        raise ValueError(message)

    env = Sandbox(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.filters["tojson"] = _tojson
    deadline = time.monotonic() + seconds

    def watchdog(frame, event, arg):
        if time.monotonic() > deadline:
            raise _TemplateTimeout  # raised in the traced frame; the trace function is then removed
        return watchdog

    timed = sys.gettrace() is None
    pieces: list[str] = []
    size = 0
    try:
        if timed:
            sys.settrace(watchdog)
        variables: dict[str, Any] = {"messages": rendered, "add_generation_prompt": True, "bos_token": bos, "eos_token": eos}
        if tools is not None:
            variables["tools"] = tools
        for piece in env.from_string(template).generate(**variables):
            size += len(piece)
            if size > max_chars:
                raise too_big()
            pieces.append(piece)
    except _TemplateTimeout:
        raise BadInput(
            f"the chat template did not finish within {seconds:g} s (an endless loop?); pass --raw and format the prompt yourself"
        ) from None
    except RecursionError:
        raise BadInput("the chat template recurses without end (Python's recursion limit); pass --raw and format the prompt yourself") from None
    finally:
        if timed:
            sys.settrace(None)
    return "".join(pieces)


def _as_dict(message: Message) -> dict[str, Any]:
    """A message as the template sees it: a (role, content) pair becomes {"role", "content"}; a dict stays."""
    if isinstance(message, dict):
        return message
    role, content = message
    return {"role": role, "content": content}


def _length(message: Message) -> int:
    """What a message counts towards the size limit: its role and content, or a dict's JSON text."""
    if isinstance(message, dict):
        return _json_length(message)
    role, content = message
    return len(role) + len(content)


def _json_length(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, default=str))


def _tojson(value: Any, indent: int | None = None, separators: tuple[str, str] | None = None, sort_keys: bool = False,
            ensure_ascii: bool = False) -> str:  # fmt: skip
    """Hugging Face's `tojson` filter: plain json.dumps, non-ASCII and HTML characters kept as they are."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    """Hugging Face's `strftime_now` global: the local time now, formatted. Example: "%d %b %Y" -> "26 Jul 2024"."""
    return datetime.now().strftime(fmt)
