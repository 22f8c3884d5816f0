"""A GGUF's Jinja chat template, rendered as Hugging Face renders it, in a sandbox and within limits.

A chat template is code that comes with the model file, so it runs in jinja2's immutable
sandbox, under a time limit and a size limit (`render_jinja_template`). model.py renders a
model's template here and falls back to llama.cpp's built-in matcher when Jinja cannot.

    template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
    render_jinja_template(template, [("user", "hi")], bos="", eos="")  -> "<user>hi<assistant>"

Left out: reading the template from the model and the fallback (model.py).
"""

from __future__ import annotations

import sys
import time
from typing import Sequence

from ..errors import BadInput

# A chat template is code that comes with the GGUF file: it renders under these limits.
TEMPLATE_SECONDS = 2.0  # real templates render in milliseconds
TEMPLATE_MIN_CHARS = 1 << 16  # output allowed beyond 8x the messages' own length


class _TemplateTimeout(BaseException):
    """Raised by the watchdog inside the template's code; a BaseException, so no `except Exception` there swallows it."""


def render_jinja_template(
    template: str, messages: Sequence[tuple[str, str]], *, bos: str, eos: str, seconds: float = TEMPLATE_SECONDS
) -> str:
    """Render a Hugging Face chat template in a sandbox, with the generation prompt added, within limits.

    Limits (BadInput when one is passed, so the caller does not fall back to another
    template): `seconds` of rendering, checked on every line the template's compiled code
    runs (a trace function, only when no debugger or coverage tool has set one); output of
    at most TEMPLATE_MIN_CHARS + 8 x the messages' length; `*` and `**` that would build a
    string, list or number beyond that; recursion beyond Python's limit. Jinja's sandbox
    itself caps each range() at 100000 items.

    Example: "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}"
    -> BadInput("the chat template did not finish within 2 s ...")
    """
    import jinja2.sandbox  # only when a template is rendered

    max_chars = TEMPLATE_MIN_CHARS + 8 * sum(len(role) + len(content) for role, content in messages)

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

    env = Sandbox(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
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
        for piece in env.from_string(template).generate(
            messages=[{"role": role, "content": content} for role, content in messages],
            add_generation_prompt=True,
            bos_token=bos,
            eos_token=eos,
        ):
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
